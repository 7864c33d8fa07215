package dispatch

import (
	"context"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/invoice"
)

// defaultHedgeDelay is how long a delayed hedge waits for a first token,
// used when a delayed plan names
// no delay.
const defaultHedgeDelay = time.Second

// hedgeTarget returns the endpoint to hedge the first attempt on ep with, or
// nil when this request is not to be hedged: not streamed, no plan, no
// budget to ask, no room for a second attempt, or no usable second endpoint.
func (s *serving) hedgeTarget(ep *switchboardv1.Endpoint) *switchboardv1.Endpoint {
	hp := s.call.Hedge
	mode := hp.GetMode()
	if mode != switchboardv1.HedgeMode_HEDGE_MODE_DELAYED && mode != switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE {
		return nil
	}
	h := hp.GetEndpoint()
	if !s.call.Stream || s.d.opts.Hedges == nil || s.d.opts.MaxAttempts < 2 ||
		h == nil || h.GetBaseUrl() == "" || h.GetId() == ep.GetId() || s.d.opts.Cooldowns.Active(h.GetId()) || s.rsv.isRefused(h.GetId()) {
		return nil
	}
	s.hedge = &switchboardv1.HedgeInfo{Mode: mode}
	return h
}

// acquire asks the hedge budget for a second call on ep, backing up primary.
// Any error, or no answer within HedgeTimeout, is a refusal: one endpoint
// then serves.
//
// The estimate sent is the most the hedge can take from the budget: either
// leg may lose, and a loser costs its prompt at its uncached input price.
func (s *serving) acquire(ctx context.Context, primary, ep *switchboardv1.Endpoint) bool {
	ctx, cancel := context.WithTimeout(ctx, s.d.opts.HedgeTimeout)
	defer cancel()
	resp, err := s.d.opts.Hedges.AcquireHedge(ctx, &switchboardv1.AcquireHedgeRequest{
		RequestId:  s.call.RequestID,
		EndpointId: ep.GetId(),
		EstimatedCostUsd: max(invoice.LoserCost(s.call.PromptTokens, ep.GetPrice()),
			invoice.LoserCost(s.call.PromptTokens, primary.GetPrice())),
	})
	if err != nil {
		s.d.log.Debug("hedge not granted", "request_id", s.call.RequestID, "endpoint", ep.GetId(), "error", err)
		return false
	}
	if !resp.GetGranted() {
		s.d.log.Debug("hedge refused", "request_id", s.call.RequestID, "endpoint", ep.GetId(), "remaining_usd", resp.GetRemainingUsd())
	}
	return resp.GetGranted()
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
		g.resp, g.err = s.d.reserve(actx, s.call, ep, hedgeAttempt)
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
	g := <-s.pending.grant
	ep := s.pending.ep
	s.pending = nil
	switch {
	case g.held != "":
		s.rsv.keep(ep.GetId(), g.held)
	case !g.granted || (g.resp == nil && g.err == nil):
	case g.err == nil && g.resp.GetAdmitted():
		s.rsv.granted(g.resp.GetReservation().GetReservationId())
		s.rsv.keep(ep.GetId(), g.resp.GetReservation().GetReservationId())
	default:
		if _, sk := s.admitted(ep, true, g.resp, g.err, g.at); sk != nil {
			s.attempts = append(s.attempts, attempt{skip: sk})
		}
	}
}

// askHedge starts a delayed hedge's budget-and-reserve step beside the
// race, with the reservation already held on the hedge endpoint, if any.
func (s *serving) askHedge(ctx context.Context, r *race, primary, hedgeEp *switchboardv1.Endpoint) {
	actx, cancel := context.WithCancel(ctx)
	grant := make(chan hedgeGrant, 1)
	r.stopAcquire, r.grant = cancel, grant
	held, _ := s.rsv.take(hedgeEp.GetId())
	go func() { grant <- s.grantHedge(actx, primary, hedgeEp, held) }()
}

// hedgeGranted acts on a delayed hedge's budget-and-reserve step: it
// launches the hedge leg when both granted it, lists the broker's refusal
// among the attempts, or keeps what was reserved for release.
func (s *serving) hedgeGranted(ctx context.Context, r *race, hedgeEp *switchboardv1.Endpoint, g hedgeGrant) {
	if !g.granted {
		s.rsv.keep(hedgeEp.GetId(), g.held)
		return
	}
	hid, sk, ok := s.hedgeReservation(hedgeEp, g)
	switch {
	case sk != nil:
		s.attempts = append(s.attempts, attempt{skip: sk})
	case ok && len(r.done) == 0:
		s.launch(ctx, r, hedgeEp, true, hid)
		s.hedge.Used = true
	default:
		// The primary is ready too, its event waiting in done: take it
		// rather than start a hedge only to cancel it. What was reserved
		// for the hedge is given back.
		s.rsv.keep(hedgeEp.GetId(), hid)
	}
}

// pendingHedge is a delayed hedge's budget-and-reserve step for ep, still
// running when its race ended.
type pendingHedge struct {
	grant chan hedgeGrant
	ep    *switchboardv1.Endpoint
}
