package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/reservation"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Broker is the central rate-limit broker as dispatch needs it: a
// reservation for every endpoint a request is sent to besides the one Decide
// reserved, and the release of a reservation that was granted but never
// used (or of a failed attempt's, at once). Used reservations are not
// released here: each is reconciled when its leg is reported (see Ledger).
// The decider's client implements it.
type Broker interface {
	Reserve(ctx context.Context, in *switchboardv1.ReserveRequest, opts ...grpc.CallOption) (*switchboardv1.ReserveResponse, error)
	Reconcile(ctx context.Context, in *switchboardv1.ReconcileRequest, opts ...grpc.CallOption) (*switchboardv1.ReconcileResponse, error)
}

// Admission is what the broker granted a request in Decide: the reservation
// on the chosen endpoint and what any further reservation is made of.
type Admission struct {
	// ReservationID is Decide's reservation (DecideResponse.reservation),
	// held on EndpointID (Required).
	ReservationID string
	// EndpointID is the endpoint Decide reserved on, DecideResponse.endpoint
	// (Required).
	EndpointID string
	// Identity is the identity Decide resolved (DecideResponse.identity);
	// every further reservation is made for it (Required).
	Identity *switchboardv1.Identity
	// Demand is what Decide reserved (DecideResponse.demand). A fallback or
	// hedge reserves the same, with usd replaced by that endpoint's
	// estimated_cost_usd (Required).
	Demand *switchboardv1.Demand
	// TTL is how long a reservation lives if never reconciled (Optional).
	// Zero leaves it to the broker's default.
	TTL time.Duration
}

// Summaries of an endpoint skipped because it could not be reserved, as the
// activity log shows them.
const (
	skippedCapacity = "skipped: provider capacity"
	skippedNoBroker = "skipped: capacity could not be reserved"
)

var errNoBroker = errors.New("no rate-limit broker configured")

// noWait is the max_wait of a Reserve that must be answered at once,
// without a place in the class's admission queue.
var noWait = durationpb.New(reservation.NoWait)

// skip is an endpoint that was not called because no reservation could be
// made on it. It is an attempt in the activity record, not a provider call:
// no CallReport, no cost.
type skip struct {
	ep      *switchboardv1.Endpoint
	hedge   bool
	at      time.Time
	outcome switchboardv1.Outcome
	summary string
	// capacity is set for a broker refusal (not an error), with the
	// refusal's retry delay.
	capacity   bool
	retryAfter time.Duration
	// reason and code are the broker refusal's (Refusal.reason, .code).
	reason switchboardv1.RefusalReason
	code   string
}

// skipped records sk among the request's attempts, and reports whether it
// ends the request: the broker holds the request's retries, and a refusal
// for its retry budget or as not retryable means no more attempts.
func (s *serving) skipped(sk *skip) (stop bool) {
	if sk.code == codeRetryBudget || sk.code == codeNonRetryable {
		s.stopped = sk
		return true
	}
	s.attempts = append(s.attempts, attempt{skip: sk})
	return false
}

// attempt is one entry of the activity record's attempts, in order: a leg
// (a provider call) or a skip.
type attempt struct {
	leg  *leg
	skip *skip
}

// reserve asks the broker for a reservation on ep for this call. It is safe
// to run on any goroutine: it reads only the call.
//
// The RPC is bounded by ReserveTimeout but not cancelled when the client
// leaves or a hedge race ends: a reservation granted after the edge stopped
// waiting could never be released, and would hold a concurrency slot until
// its TTL. The caller releases what it does not use.
func (d *Dispatcher) reserve(ctx context.Context, call Call, ep *switchboardv1.Endpoint, at attemptNo) (*switchboardv1.ReserveResponse, error) {
	if d.opts.Broker == nil {
		return nil, errNoBroker
	}
	a := call.Admission
	dem := &switchboardv1.Demand{}
	if a.Demand != nil {
		dem = proto.Clone(a.Demand).(*switchboardv1.Demand)
	}
	// The same request, priced where it is going this time.
	dem.Usd = ep.GetEstimatedCostUsd()
	if dem.Requests <= 0 {
		dem.Requests = 1
	}
	req := &switchboardv1.ReserveRequest{
		RequestId: call.RequestID,
		// The key the decider used for Decide's own reservation on an
		// endpoint, so a retried Reserve returns the same reservation; a
		// retry on an endpoint already called gets a key of its own.
		IdempotencyKey:  at.key(call.RequestID, ep.GetId()),
		Identity:        proto.Clone(a.Identity).(*switchboardv1.Identity),
		Model:           call.Model,
		EndpointId:      ep.GetId(),
		Demand:          dem,
		Attempt:         at.n,
		PreviousFailure: switchboardv1.RefusalReason(at.prev),
		// An admitted request waited in its class's queue once, in
		// Decide; a further endpoint that is full is skipped for the
		// next, never waited for.
		MaxWait: noWait,
	}
	if a.TTL > 0 {
		req.Ttl = durationpb.New(a.TTL)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.ReserveTimeout)
	defer cancel()
	resp, err := d.opts.Broker.Reserve(rctx, req)
	if err != nil {
		return nil, err
	}
	if resp.GetAdmitted() && resp.GetReservation().GetReservationId() == "" {
		return nil, errors.New("the broker admitted without a reservation id")
	}
	return resp, nil
}

// reservation returns the reservation ep's call is sent under: none when the
// broker is not in play for this call, Decide's (or another one still held)
// for its endpoint, else a new one. A non-nil skip means ep must not be
// called; the caller records it among the attempts. It runs on the request's
// goroutine.
//
// The walk that chooses where a request is admitted is the decider's
// (admission.Policy.Decide): it reserves on the first endpoint that can take
// the request and is the only one that waits in the class's queue. This one
// follows the order that decision left (its endpoint, then its fallbacks,
// and the hedge) as it calls each, because a further endpoint is only needed
// once a call failed or a hedge starts: reserving them all up front would
// hold capacity the request mostly never uses. Each is keyed as the decider
// keys its own (pkg/reservation), never waits, and is skipped when refused.
func (s *serving) reservation(ctx context.Context, ep *switchboardv1.Endpoint, hedge bool) (string, *skip) {
	if s.call.Admission == nil {
		return "", nil
	}
	if id, ok := s.rsv.take(ep.GetId()); ok {
		return id, nil
	}
	at := hedgeAttempt
	if !hedge {
		at = s.nextAttempt(ep)
	}
	resp, err := s.d.reserve(ctx, s.call, ep, at)
	return s.admitted(ep, hedge, resp, err, time.Now())
}

// admitted turns a Reserve answer, received at, into a reservation id or a
// skip, and remembers a refused endpoint so it is not asked again for this
// request.
func (s *serving) admitted(ep *switchboardv1.Endpoint, hedge bool, resp *switchboardv1.ReserveResponse, err error, at time.Time) (string, *skip) {
	if err == nil && resp.GetAdmitted() {
		id := resp.GetReservation().GetReservationId()
		s.rsv.granted(id)
		return id, nil
	}
	s.rsv.refuse(ep.GetId())
	sk := &skip{ep: ep, hedge: hedge, at: at}
	if err != nil {
		// Without a reservation the endpoint's quota cannot be vouched
		// for; sending anyway is how a gateway overruns a provider.
		sk.outcome, sk.summary = switchboardv1.Outcome_OUTCOME_UNSPECIFIED, skippedNoBroker
		s.d.log.Warn("reserve failed; endpoint skipped", "request_id", s.call.RequestID, "endpoint", ep.GetId(), "hedge", hedge, "error", err)
		return "", sk
	}
	ref := resp.GetRefusal()
	sk.outcome, sk.capacity = switchboardv1.Outcome_OUTCOME_RATE_LIMITED, true
	sk.summary = skipSummary(ref)
	sk.reason, sk.code = ref.GetReason(), ref.GetCode()
	if ra := ref.GetRetryAfter(); ra != nil && ref.GetReason() != switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST {
		sk.retryAfter = ra.AsDuration()
	}
	if stops(ref) {
		// The logical request may not be retried any more: the broker
		// holds its budget, or its last failure was its own.
		sk.capacity, sk.retryAfter = false, 0
		sk.summary = "not retried: " + ref.GetMessage()
	}
	s.d.log.Debug("reservation refused; endpoint skipped", "request_id", s.call.RequestID, "endpoint", ep.GetId(), "hedge", hedge,
		"reason", ref.GetReason().String(), "scope", ref.GetScope().String(), "unit", ref.GetUnit().String())
	return "", sk
}

// skipSummary is the activity log's word for a refused reservation. A
// refusal by the caller's own limit (its concurrency, counted once more for
// the extra call) says so; anything else is the provider's capacity, with no
// detail about whose traffic filled it.
func skipSummary(ref *switchboardv1.Refusal) string {
	switch ref.GetScope() {
	case switchboardv1.LimitScope_LIMIT_SCOPE_API_KEY:
		return "skipped: API key rate limit"
	case switchboardv1.LimitScope_LIMIT_SCOPE_APP:
		return "skipped: app rate limit"
	case switchboardv1.LimitScope_LIMIT_SCOPE_TENANT:
		return "skipped: tenant rate limit"
	case switchboardv1.LimitScope_LIMIT_SCOPE_PARTNER:
		return "skipped: partner rate limit"
	}
	if ref.GetCode() == codeProviderPaused || ref.GetCode() == codeDeadline {
		return "skipped: provider paused"
	}
	return skippedCapacity
}

// release gives back every reservation granted for this request that no
// leg used: Decide's when its endpoint was never called, a hedge's that did
// not start. Each is reconciled as cancelled with zero usage (through the
// Ledger when the RPC fails). A used reservation is never released here —
// it is reconciled when its leg is reported, with the call's real usage — so
// no reservation is reconciled twice.
func (s *serving) release(ctx context.Context) {
	for _, id := range s.rsv.unused() {
		rq, term, err := s.d.releaseReservation(ctx, id)
		if err != nil {
			// Delivered on the Report stream instead, until applied.
			s.d.log.Debug("releasing an unused reservation failed; queued", "request_id", s.call.RequestID, "reservation", id, "error", err)
			s.d.opts.Ledger.Reconcile(&switchboardv1.ReconcileRequest{
				ReservationId: id, Usage: &switchboardv1.Usage{}, Outcome: switchboardv1.Outcome_OUTCOME_CANCELLED,
			})
			continue
		}
		s.rsv.applied(rq, term)
	}
}

// releaseReservation reconciles an unused reservation as cancelled with
// zero usage, and returns that reconciliation and the term of the broker
// owner that applied it.
func (d *Dispatcher) releaseReservation(ctx context.Context, id string) (*switchboardv1.ReconcileRequest, int64, error) {
	if d.opts.Broker == nil {
		return nil, 0, errNoBroker
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.ReserveTimeout)
	defer cancel()
	rq := &switchboardv1.ReconcileRequest{
		ReservationId: id,
		Usage:         &switchboardv1.Usage{},
		Outcome:       switchboardv1.Outcome_OUTCOME_CANCELLED,
	}
	resp, err := d.opts.Broker.Reconcile(rctx, rq)
	if err != nil {
		return nil, 0, fmt.Errorf("release reservation %s: %w", id, err)
	}
	return rq, resp.GetOwnerTerm(), nil
}

// releaseFailed reconciles a leg that failed before its first token at
// once (its outcome and the provider's rate-limit headers, which the broker
// folds in, with no usage) and, when that worked, takes the reservation off
// its call report, so it is still reconciled exactly once. With deferred,
// the broker gives the capacity back but pauses nothing yet (see charge.go).
func (s *serving) releaseFailed(l *leg, deferred bool) {
	if l.reservation == "" || s.d.opts.Broker == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.d.opts.ReserveTimeout)
	defer cancel()
	rq := &switchboardv1.ReconcileRequest{
		ReservationId:     l.reservation,
		Usage:             &switchboardv1.Usage{},
		Outcome:           l.Result.Outcome,
		RateLimitHeaders:  l.Result.Headers,
		Failure:           switchboardv1.RefusalReason(l.Result.Class()),
		ProviderErrorCode: l.Result.ProviderErrorCode,
		FailureDeferred:   deferred,
	}
	resp, err := s.d.opts.Broker.Reconcile(ctx, rq)
	if err != nil {
		// The call report reconciles it instead.
		s.d.log.Debug("releasing a failed attempt's reservation", "request_id", s.call.RequestID, "reservation", l.reservation, "error", err)
		return
	}
	s.rsv.closed(rq, resp.GetOwnerTerm())
	if deferred {
		l.deferred, l.deferredID = true, l.reservation
	}
	l.reservation = ""
}
