package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

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
func (d *Dispatcher) reserve(ctx context.Context, call Call, ep *switchboardv1.Endpoint) (*switchboardv1.ReserveResponse, error) {
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
		// endpoint, so a retried Reserve returns the same reservation.
		IdempotencyKey: call.RequestID + "|" + ep.GetId(),
		Identity:       proto.Clone(a.Identity).(*switchboardv1.Identity),
		Model:          call.Model,
		EndpointId:     ep.GetId(),
		Demand:         dem,
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
func (s *serving) reservation(ctx context.Context, ep *switchboardv1.Endpoint, hedge bool) (string, *skip) {
	if s.call.Admission == nil {
		return "", nil
	}
	if id, ok := s.takeHeld(ep.GetId()); ok {
		return id, nil
	}
	resp, err := s.d.reserve(ctx, s.call, ep)
	return s.admitted(ep, hedge, resp, err, time.Now())
}

// admitted turns a Reserve answer, received at, into a reservation id or a
// skip, and remembers a refused endpoint so it is not asked again for this
// request.
func (s *serving) admitted(ep *switchboardv1.Endpoint, hedge bool, resp *switchboardv1.ReserveResponse, err error, at time.Time) (string, *skip) {
	if err == nil && resp.GetAdmitted() {
		id := resp.GetReservation().GetReservationId()
		s.d.hold(id)
		return id, nil
	}
	s.refused[ep.GetId()] = true
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
	if ra := ref.GetRetryAfter(); ra != nil && ref.GetReason() != switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST {
		sk.retryAfter = ra.AsDuration()
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
	return skippedCapacity
}

// takeHeld takes the reservation held on an endpoint, if any.
func (s *serving) takeHeld(endpointID string) (string, bool) {
	id, ok := s.held[endpointID]
	if ok {
		delete(s.held, endpointID)
	}
	return id, ok
}

// hold keeps a granted reservation that no leg uses (yet): a later attempt
// on the same endpoint takes it, else it is released when the request ends.
func (s *serving) hold(endpointID, id string) {
	if id == "" || s.used[id] {
		return
	}
	if old, ok := s.held[endpointID]; ok && old != id {
		s.spare = append(s.spare, old)
	}
	s.held[endpointID] = id
}

// hedgeGrant is what the delayed hedge's background step found: whether the
// budget granted the hedge and, if so, its reservation.
type hedgeGrant struct {
	granted bool
	// held is a reservation already held on the hedge endpoint, taken
	// before the step started; it goes back if the hedge does not start.
	held string
	// resp and err are the hedge's Reserve answer, received at; both nil
	// when no Reserve was made.
	resp *switchboardv1.ReserveResponse
	err  error
	at   time.Time
}

// grantHedge asks the hedge budget and then the broker for a hedge leg on
// ep, backing up primary. It runs on its own goroutine: it reads only the
// call and the dispatcher. The budget comes first: it is refused far more
// often (once a day's budget is spent), and a refused budget then costs no
// reservation to give back.
func (s *serving) grantHedge(actx context.Context, primary, ep *switchboardv1.Endpoint, held string) hedgeGrant {
	g := hedgeGrant{held: held}
	if !s.acquire(actx, primary, ep) {
		return g
	}
	g.granted = true
	if held == "" && s.call.Admission != nil && actx.Err() == nil {
		g.resp, g.err = s.d.reserve(actx, s.call, ep)
		g.at = time.Now()
	}
	return g
}

// hedgeReservation turns a granted hedge into its reservation, on the
// request's goroutine. ok is false when the hedge must not start; sk is set
// when that is the broker's doing and belongs among the attempts.
func (s *serving) hedgeReservation(ep *switchboardv1.Endpoint, g hedgeGrant) (id string, sk *skip, ok bool) {
	switch {
	case g.held != "":
		return g.held, nil, true
	case s.call.Admission == nil:
		return "", nil, true
	case g.resp == nil && g.err == nil:
		// The race ended before the reservation was asked.
		return "", nil, false
	}
	id, sk = s.admitted(ep, true, g.resp, g.err, g.at)
	return id, sk, sk == nil
}

// drainHedge waits for a delayed hedge's background step still running
// when its race ended, and keeps what it reserved for release. A refusal is
// still listed among the attempts, so the record does not depend on which
// of the refusal and the primary's first token came first.
func (s *serving) drainHedge() {
	if s.pending == nil {
		return
	}
	g := <-s.pending
	s.pending = nil
	ep := s.pendingEp
	switch {
	case g.held != "":
		s.hold(ep.GetId(), g.held)
	case !g.granted || (g.resp == nil && g.err == nil):
	case g.err == nil && g.resp.GetAdmitted():
		s.d.hold(g.resp.GetReservation().GetReservationId())
		s.hold(ep.GetId(), g.resp.GetReservation().GetReservationId())
	default:
		if _, sk := s.admitted(ep, true, g.resp, g.err, g.at); sk != nil {
			s.attempts = append(s.attempts, attempt{skip: sk})
		}
	}
}

// release gives back every reservation granted for this request that no
// leg used: Decide's when its endpoint was never called, a hedge's that did
// not start. Each is reconciled as cancelled with zero usage (through the
// Ledger when the RPC fails). A used reservation is never released here —
// it is reconciled when its leg is reported, with the call's real usage — so
// no reservation is reconciled twice.
func (s *serving) release(ctx context.Context) {
	ids := s.spare
	for _, id := range s.held {
		ids = append(ids, id)
	}
	s.held, s.spare = nil, nil
	for _, id := range ids {
		if s.used[id] {
			continue
		}
		if err := s.d.releaseReservation(ctx, id); err != nil {
			if s.d.opts.Ledger != nil {
				// Delivered on the Report stream instead, until applied.
				s.d.log.Debug("releasing an unused reservation failed; queued", "request_id", s.call.RequestID, "reservation", id, "error", err)
				s.d.opts.Ledger.Reconcile(&switchboardv1.ReconcileRequest{
					ReservationId: id, Usage: &switchboardv1.Usage{}, Outcome: switchboardv1.Outcome_OUTCOME_CANCELLED,
				})
				continue
			}
			// It expires at its TTL: its concurrency slot is back then,
			// its tokens stay counted, which can only under-admit.
			s.d.log.Warn("releasing an unused reservation failed", "request_id", s.call.RequestID, "reservation", id, "error", err)
			continue
		}
		s.d.forget(id)
	}
}

// hold declares a granted reservation to the ledger, if any.
func (d *Dispatcher) hold(id string) {
	if d.opts.Ledger != nil && id != "" {
		d.opts.Ledger.Hold(id)
	}
}

// forget tells the ledger a reservation was closed by a Reconcile RPC.
func (d *Dispatcher) forget(id string) {
	if d.opts.Ledger != nil && id != "" {
		d.opts.Ledger.Forget(id)
	}
}

func (d *Dispatcher) releaseReservation(ctx context.Context, id string) error {
	if d.opts.Broker == nil {
		return errNoBroker
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.ReserveTimeout)
	defer cancel()
	_, err := d.opts.Broker.Reconcile(rctx, &switchboardv1.ReconcileRequest{
		ReservationId: id,
		Usage:         &switchboardv1.Usage{},
		Outcome:       switchboardv1.Outcome_OUTCOME_CANCELLED,
	})
	if err != nil {
		return fmt.Errorf("release reservation %s: %w", id, err)
	}
	return nil
}

// releaseFailed reconciles a leg that failed before its first token at
// once (its outcome and the provider's rate-limit headers, which the broker
// folds in, with no usage) and, when that worked, takes the reservation off
// its call report, so it is still reconciled exactly once.
func (s *serving) releaseFailed(l *leg) {
	if l.reservation == "" || s.d.opts.Broker == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.d.opts.ReserveTimeout)
	defer cancel()
	_, err := s.d.opts.Broker.Reconcile(ctx, &switchboardv1.ReconcileRequest{
		ReservationId:    l.reservation,
		Usage:            &switchboardv1.Usage{},
		Outcome:          l.res.outcome,
		RateLimitHeaders: l.res.headers,
	})
	if err != nil {
		// The call report reconciles it instead.
		s.d.log.Debug("releasing a failed attempt's reservation", "request_id", s.call.RequestID, "reservation", l.reservation, "error", err)
		return
	}
	s.used[l.reservation] = true
	s.d.forget(l.reservation)
	l.reservation = ""
}
