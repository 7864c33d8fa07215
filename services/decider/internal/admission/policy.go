package admission

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/reservation"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/metrics"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

// Contracts names the contract of a workload class (auth.Authenticator
// does, from the catalog).
type Contracts interface {
	Contract(cls switchboardv1.WorkloadClass) (catalog.Contract, bool)
}

// Policy is the decider's admission policy, the one place that decides
// what a call is admitted with: the walk over a decision's endpoints (the
// endpoint it is reserved on, and the one it waits for in its class's
// queue), the degrade to its class's fallback model, forwarding to the
// broker's owner (reservations through Admission, the hedge budget here),
// and the admission metrics of what this replica's broker answers. The
// gRPC server builds one per call from what it holds and only adapts the
// RPCs to it. A Policy is a value: copying it is cheap.
type Policy struct {
	// Admission is the broker and its owner (Optional): nil while the
	// broker is starting, when reservations answer UNAVAILABLE and the
	// hedge budget is decided on this replica.
	Admission *Admission
	// Budget is the hedge budget as this replica holds it (Required for
	// AcquireHedge and SettleHedge).
	Budget *hedge.Budget
	// Contracts are the workload classes' contracts, for the degrade
	// (Required for Decide and Reserve).
	Contracts Contracts
	// Metrics records admission decisions (Optional): nil records none.
	Metrics *metrics.Admission
}

// errStarting is the answer to a reservation before the broker started.
var errStarting = status.Error(codes.Unavailable, "the rate-limit broker is starting")

// Ready reports UNAVAILABLE while the broker is starting.
func (p Policy) Ready() error {
	if p.Admission == nil {
		return errStarting
	}
	return nil
}

// recorder is the metrics to record an answer with: nil when metrics are
// off or the owner records it (a forwarded call reaches the owner's own
// Reserve or Reconcile, which counts it there). Ownership may change during
// the call; a decision made around a handover may then be counted twice or
// not at all.
func (p Policy) recorder() *metrics.Admission {
	if p.Metrics == nil || p.Admission == nil || !p.Admission.Owner() {
		return nil
	}
	return p.Metrics
}

// reserve is Admission.Reserve, recorded when this replica's broker answers.
func (p Policy) reserve(ctx context.Context, req *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error) {
	m := p.recorder()
	resp, err := p.Admission.Reserve(ctx, req)
	m.Reserved(ctx, req, resp, err)
	return resp, err
}

// Reserve is a Reserve call's admission for the identity id the caller
// resolved to: reserved on the broker's owner (with the key hash the caller
// sent, see withKeyHash), and a refusal degraded to the class's fallback
// model where the class says so.
func (p Policy) Reserve(ctx context.Context, req *switchboardv1.ReserveRequest, id *switchboardv1.Identity) (*switchboardv1.ReserveResponse, error) {
	if err := p.Ready(); err != nil {
		return nil, err
	}
	req.Identity = withKeyHash(id, req.GetIdentity())
	resp, err := p.reserve(ctx, req)
	if err != nil {
		return nil, err
	}
	p.degrade(ctx, resp.GetRefusal(), req.GetModel(), id)
	return resp, nil
}

// Decide reserves for a decision (Decide's reserve option): it walks the
// decided order and reserves on the first endpoint whose limits can take
// the request now: an endpoint whose own provider limits are full is
// skipped — the request goes to the next one, not back to the client. When
// none can take it now, the request waits in its workload class's queue,
// within the call's deadline, for the endpoint that refused it by the
// caller's own limit (API key, app, tenant, partner), or else for the one
// whose capacity comes back first; only what that wait ends with refuses
// the client. A refusal by the broker's own state (broker_not_durable) is
// no endpoint's: the request waits for the state to be saved instead, then
// walks every endpoint again (afterDurable). resp is rewritten to what was
// admitted: the endpoint reserved on and the fallbacks after it, or the
// refusal and no endpoint.
//
// This walk is the one that chooses where a request is admitted, and the
// only one that waits. The edge's dispatch walks the fallbacks this leaves
// it only as it calls them, after a failure or for a hedge: each is reserved
// then, with the same key (pkg/reservation) and this demand priced for that
// endpoint, without a wait (the request waited here once, and a client
// already being served must not wait again), and one refused is skipped for
// the next.
func (p Policy) Decide(ctx context.Context, req *switchboardv1.DecideRequest, resp *switchboardv1.DecideResponse) error {
	if err := p.Ready(); err != nil {
		return err
	}
	w := walk{p: p, req: req, resp: resp, first: resp.GetEndpoint(), fallbacks: resp.GetFallbacks()}
	admitted, refusal, at, err := w.tryAll(ctx)
	if err != nil || admitted {
		return err
	}
	var wait *durationpb.Duration // the class's own
	if refusal.GetCode() == broker.CodeNotDurable {
		// The state refused, not an endpoint: waiting in the queue of the
		// endpoint that refused would keep the request on it once the
		// state is saved, however full that endpoint is. It waits for the
		// state instead, then walks every endpoint again.
		if admitted, refusal, at, wait, err = w.afterDurable(ctx, refusal, at); err != nil || admitted {
			return err
		}
	}
	var queue *switchboardv1.QueueDecision
	if at >= 0 && retryable(refusal) && refusal.GetCode() != broker.CodeNotDurable {
		rr, d, err := w.ask(ctx, at, wait)
		if err != nil {
			return err
		}
		if rr.GetAdmitted() {
			w.admit(at, rr, d)
			return nil
		}
		refusal, queue = rr.GetRefusal(), rr.GetQueue()
	}
	p.degrade(ctx, refusal, resp.GetModel(), resp.GetIdentity())
	resp.Endpoint, resp.Fallbacks, resp.Refusal, resp.Queue = nil, nil, refusal, queue
	resp.Hedge = &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_NONE}
	return nil
}

// tryAll reserves on the first endpoint in the decided order that can take
// the request now, without waiting (admitted). Otherwise it returns the
// refusal to wait on and the endpoint at that gave it: the caller's own
// limit's, or else the one whose capacity comes back first.
func (w walk) tryAll(ctx context.Context) (admitted bool, refusal *switchboardv1.Refusal, at int, _ error) {
	at = -1
	for i := range 1 + len(w.fallbacks) {
		rr, d, err := w.ask(ctx, i, NoWait)
		if err != nil {
			return false, nil, -1, err
		}
		if rr.GetAdmitted() {
			w.admit(i, rr, d)
			return true, nil, -1, nil
		}
		ref := rr.GetRefusal()
		if callerScope(ref.GetScope()) {
			return false, ref, i, nil
		}
		if refusal == nil || earlier(ref, refusal) {
			refusal, at = ref, i
		}
	}
	return false, refusal, at, nil
}

// afterDurable waits, within what the class's queue would have waited, for
// the broker's owner to save its state, and walks the endpoints again
// (tryAll) each time it may have: the refusal broker_not_durable (ref, by
// the at-th endpoint) says nothing of any endpoint's capacity. On the
// owner it waits for the save itself, elsewhere the refusal's retry_after
// between walks. A class that does not queue does not wait: ref is
// returned as it is, as is the last not-durable refusal when the wait
// ends first, which Decide answers without queueing. A refusal by an
// endpoint after the state is saved is returned with what is left of the
// wait (left), for the endpoint's queue: the request waits no longer in
// all than its class lets it.
func (w walk) afterDurable(ctx context.Context, ref *switchboardv1.Refusal, at int) (admitted bool, _ *switchboardv1.Refusal, _ int, left *durationpb.Duration, _ error) {
	a := w.p.Admission
	cc := a.o.Broker.Contract(broker.WorkloadClass(w.resp.GetIdentity().GetWorkloadClass()))
	if cc.MaxWait <= 0 || cc.MaxDepth <= 0 {
		return false, ref, at, nil, nil
	}
	wait := waitFor(ctx, durationpb.New(cc.MaxWait), time.Now())
	if wait <= 0 {
		return false, ref, at, nil, nil
	}
	end := time.Now().Add(wait)
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	for ref.GetCode() == broker.CodeNotDurable {
		if !a.awaitDurable(wctx, ref.GetRetryAfter().AsDuration()) {
			return false, ref, at, nil, nil
		}
		var err error
		if admitted, ref, at, err = w.tryAll(ctx); err != nil || admitted {
			return admitted, ref, at, nil, err
		}
	}
	left = NoWait
	if d := time.Until(end); d > 0 {
		left = durationpb.New(d)
	}
	return false, ref, at, left, nil
}

// walk is one Decide's walk over its decided order: the endpoint, then its
// fallbacks.
type walk struct {
	p         Policy
	req       *switchboardv1.DecideRequest
	resp      *switchboardv1.DecideResponse
	first     *switchboardv1.Endpoint
	fallbacks []*switchboardv1.Endpoint
}

func (w walk) endpoint(i int) *switchboardv1.Endpoint {
	if i == 0 {
		return w.first
	}
	return w.fallbacks[i-1]
}

// ask reserves the request on the i-th endpoint, waiting up to wait (nil:
// the class's own wait), and returns the answer and the demand asked.
func (w walk) ask(ctx context.Context, i int, wait *durationpb.Duration) (*switchboardv1.ReserveResponse, *switchboardv1.Demand, error) {
	ep, req := w.endpoint(i), w.req
	out := req.GetTokens().GetMaxOutputTokens()
	if out <= 0 {
		out = routing.DefaultOutputTokens
	}
	d := &switchboardv1.Demand{InputTokens: req.GetTokens().GetInputTokens(), OutputTokens: out, Usd: ep.GetEstimatedCostUsd(), Requests: 1}
	key := ""
	if k := req.GetIdempotencyKey(); k != "" {
		key = reservation.Key(k, ep.GetId())
	}
	rr, err := w.p.reserve(ctx, &switchboardv1.ReserveRequest{
		RequestId: w.resp.GetRequestId(), IdempotencyKey: key, Identity: withKeyHash(w.resp.GetIdentity(), req.GetIdentity()),
		Model: w.resp.GetModel(), EndpointId: ep.GetId(), Demand: d, Ttl: req.GetReservationTtl(), MaxWait: wait,
	})
	return rr, d, err
}

// admit makes the i-th endpoint the decision's, with the fallbacks after it.
func (w walk) admit(i int, rr *switchboardv1.ReserveResponse, d *switchboardv1.Demand) {
	ep, resp := w.endpoint(i), w.resp
	resp.Endpoint, resp.Fallbacks = ep, w.fallbacks[i:]
	resp.Reservation, resp.Demand, resp.Queue = rr.GetReservation(), d, rr.GetQueue()
	if h := resp.GetHedge(); h.GetEndpoint().GetId() == ep.GetId() {
		resp.Hedge = &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_NONE}
	}
}

// retryable reports whether capacity may come back for a refused request
// while it waits: a bucket that refills, or a provider's pause that ends.
func retryable(ref *switchboardv1.Refusal) bool {
	switch ref.GetReason() {
	case switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD:
		return true
	}
	return false
}

// degrade names the fallback model of the class's contract on a refusal
// the broker's rule lets degrade (broker.Degrades: capacity on the
// provider's side), when the class's overload action is fallback: the
// caller serves the request with that model instead. A refusal that
// already names a model is kept as it is. A fallback named here is counted
// in the admission metrics.
func (p Policy) degrade(ctx context.Context, ref *switchboardv1.Refusal, model string, id *switchboardv1.Identity) {
	if ref == nil || ref.GetFallbackModel() != "" || !broker.Degrades(broker.RefusalReason(ref.GetReason()), broker.Scope(ref.GetScope())) {
		return
	}
	k, ok := p.Contracts.Contract(id.GetWorkloadClass())
	if !ok || k.Overload != catalog.OverloadFallback || k.FallbackModel == "" || k.FallbackModel == model {
		return
	}
	ref.FallbackModel = k.FallbackModel
	p.Metrics.Degraded(ctx, id, k.FallbackModel)
}

// callerScope reports whether a bucket belongs to the caller (its own
// limits) rather than to a provider.
func callerScope(sc switchboardv1.LimitScope) bool {
	switch sc {
	case switchboardv1.LimitScope_LIMIT_SCOPE_API_KEY, switchboardv1.LimitScope_LIMIT_SCOPE_APP, switchboardv1.LimitScope_LIMIT_SCOPE_TENANT, switchboardv1.LimitScope_LIMIT_SCOPE_PARTNER:
		return true
	}
	return false
}

// earlier prefers the refusal whose capacity comes back first.
func earlier(a, b *switchboardv1.Refusal) bool {
	if a.GetRetryAfter() == nil {
		return false
	}
	return b.GetRetryAfter() == nil || a.GetRetryAfter().AsDuration() < b.GetRetryAfter().AsDuration()
}

// withKeyHash is the resolved identity a reservation is asked with, with
// the key hash the caller sent (if any): the broker reads only the
// resolved fields, but a replica forwards the request to the broker's
// owner, which checks it by the caller's own rules again, and an edge acts
// only for an identity carrying api_key_sha256. resolved itself, which
// Decide answers with, is left as it was.
func withKeyHash(resolved, asked *switchboardv1.Identity) *switchboardv1.Identity {
	h := asked.GetApiKeySha256()
	if h == "" || resolved == nil {
		return resolved
	}
	id := proto.CloneOf(resolved)
	id.ApiKeySha256 = h
	return id
}

// Reconcile is a Reconcile call's: applied on the broker's owner, checked
// with allow there (see Admission.Reconcile), recorded when this replica's
// broker answers.
func (p Policy) Reconcile(ctx context.Context, req *switchboardv1.ReconcileRequest, allow broker.Allow) (*switchboardv1.ReconcileResponse, error) {
	if err := p.Ready(); err != nil {
		return nil, err
	}
	var resp *switchboardv1.ReconcileResponse
	err := p.reconciled(ctx, req, func() (err error) {
		resp, err = p.Admission.Reconcile(ctx, req, allow)
		return err
	})
	return resp, err
}

// ReconcileOnce is a reconciliation an edge sent on its Report stream
// (see Admission.ReconcileOnce), recorded as Reconcile is. One that names
// no reservation has nothing to apply, ever: it answers the owner's term.
func (p Policy) ReconcileOnce(ctx context.Context, req *switchboardv1.ReconcileRequest, allow broker.Allow) (term int64, err error) {
	if err := p.Ready(); err != nil {
		return 0, err
	}
	if req.GetReservationId() == "" {
		term, _ = p.Admission.OwnerTerm()
		return term, nil
	}
	err = p.reconciled(ctx, req, func() (err error) {
		term, err = p.Admission.ReconcileOnce(ctx, req, allow)
		return err
	})
	return term, err
}

// reconciled runs reconcile, recorded when this replica's broker answers:
// the reservation is looked up before it closes, for its tenant, route and
// estimate.
func (p Policy) reconciled(ctx context.Context, req *switchboardv1.ReconcileRequest, reconcile func() error) error {
	m := p.recorder()
	if m == nil {
		return reconcile()
	}
	info, ok := m.Lookup(req.GetReservationId())
	err := reconcile()
	m.Reconciled(ctx, req, info, ok, err)
	return err
}

// Keep extends open reservations on the broker's owner (see
// Admission.Keep).
func (p Policy) Keep(ctx context.Context, ids []string, allow broker.Allow) (int64, error) {
	if err := p.Ready(); err != nil {
		return 0, err
	}
	return p.Admission.Keep(ctx, ids, allow)
}
