package dispatch

import (
	"context"
	"strconv"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/failclass"
	"github.com/switchboard-ai/switchboard/pkg/reservation"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Retries are central: the decider's rate-limit broker holds each logical
// request's retry budget and pauses an endpoint that failed for everyone,
// and the edge follows what it says. Every attempt's Reserve names its
// attempt number and how the previous attempt failed (pkg/failclass); a
// refusal with code retry_budget or non_retryable ends the request. An
// endpoint whose failure may be retried on it (a rate limit or an overload)
// is tried again only once the broker admits it again, which it does not
// before the provider's Retry-After (or the back-off) and its jitter have
// passed; one whose provider account refused (a spend limit) or that
// refused the request itself is never tried again for the request. Each
// attempt reaches the provider once: the upstream http.Client does not
// retry (Go's transport resends a request on a kept-alive connection that
// failed only when none of it was written — the provider saw nothing — or
// when it is idempotent — GET, HEAD, or one carrying an Idempotency-Key
// header — which the edge's POSTs never are; TestUpstreamClientDoesNotRetry),
// and no SDK sits in between.

// The broker's refusal codes the edge acts on.
const (
	codeRetryBudget    = "retry_budget"
	codeNonRetryable   = "non_retryable"
	codeProviderPaused = "provider_paused"
	codeDeadline       = "deadline"
)

// failclass's classes are switchboardv1.RefusalReason's numbers, so the
// conversions below are casts; these fail to compile if either renumbers.
var (
	_ = [1]int{}[switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY-switchboardv1.RefusalReason(failclass.RetryableCapacity)]
	_ = [1]int{}[switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD-switchboardv1.RefusalReason(failclass.RetryableOverload)]
	_ = [1]int{}[switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY-switchboardv1.RefusalReason(failclass.NonRetryablePolicy)]
	_ = [1]int{}[switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST-switchboardv1.RefusalReason(failclass.NonRetryableRequest)]
	_ = [1]int{}[switchboardv1.RefusalReason_REFUSAL_REASON_DEADLINE-switchboardv1.RefusalReason(failclass.Deadline)]
)

// attemptNo is what a Reserve says of its place in the logical request:
// its attempt number (1 for the first call, 0 for a hedge leg, which the
// hedge budget pays for and the retry budget does not count) and how the
// previous attempt failed.
type attemptNo struct {
	n    int32
	prev failclass.Class
	// again is set for an endpoint this request called already: its
	// reservation needs an idempotency key of its own.
	again bool
}

// hedgeAttempt is a hedge leg's: not a retry.
var hedgeAttempt = attemptNo{}

// key is the Reserve's idempotency key: the request and endpoint, as
// Decide's own reservation on an endpoint is keyed, and the attempt number
// too for an endpoint tried again, whose first reservation was closed.
func (a attemptNo) key(requestID, endpointID string) string {
	if a.again {
		return reservation.KeyAgain(requestID, endpointID, a.n)
	}
	return reservation.Key(requestID, endpointID)
}

// calls is how many provider calls the request made, hedge legs apart.
func (s *serving) calls() int {
	n := 0
	for _, l := range s.legs {
		if !l.hedge {
			n++
		}
	}
	return n
}

// nextAttempt is the attempt a call to ep would be.
func (s *serving) nextAttempt(ep *switchboardv1.Endpoint) attemptNo {
	a := attemptNo{n: int32(s.calls() + 1)}
	if s.lastFailed != nil {
		a.prev = s.lastFailed.Result.Class()
	}
	for _, l := range s.legs {
		if l.Endpoint.GetId() == ep.GetId() {
			a.again = true
		}
	}
	return a
}

// stops reports whether a refusal ends the logical request: its retry
// budget is spent, or its last failure was its own.
func stops(ref *switchboardv1.Refusal) bool {
	c := ref.GetCode()
	return c == codeRetryBudget || c == codeNonRetryable
}

// retryHeader is the response header counting the request's retries: the
// provider calls it made beyond the first, hedge legs apart.
const retryHeader = "X-Switchboard-Retries"

// markRetries sets retryHeader on the answer, before it is written.
func (s *serving) markRetries() {
	if s.w != nil {
		s.w.Header().Set(retryHeader, strconv.Itoa(max(s.calls()-1, 0)))
	}
}

// sameAgain lists the endpoints of the plan that may be tried again for
// this request once the broker admits them: those whose last call failed
// with a rate limit or an overload, or that the broker refused for a pause
// or capacity that comes back. An endpoint whose provider account refused
// (a spend limit), or that refused the request itself, is not among them.
func (s *serving) sameAgain(plan []*switchboardv1.Endpoint) []*switchboardv1.Endpoint {
	last := map[string]bool{}
	for _, a := range s.attempts {
		switch {
		case a.leg != nil:
			last[a.leg.Endpoint.GetId()] = a.leg.Result.Class().SameEndpoint()
		case a.skip != nil && !a.skip.hedge:
			last[a.skip.ep.GetId()] = a.skip.capacity && a.skip.retryAfter > 0 &&
				a.skip.reason != switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY
		}
	}
	var out []*switchboardv1.Endpoint
	for _, ep := range plan {
		if last[ep.GetId()] {
			out = append(out, ep)
		}
	}
	return out
}

// retrySame retries, once all of the plan was tried, the endpoints that
// may be tried again: each is reserved as the next attempt, and called
// when the broker admits it. When the broker refuses them all for a pause
// (or capacity), the request waits for the soonest to come back, if that
// is within RetryWait of now and before the request's own deadline, and
// tries again; a refusal that stops the request (its retry budget spent),
// MaxAttempts calls or no endpoint left ends it with the last failure.
// This is how a request whose model forbids fallbacks is retried on its
// one endpoint after its Retry-After, and how any request rides out a
// short pause of every endpoint it may use.
func (s *serving) retrySame(ctx context.Context, plan []*switchboardv1.Endpoint) error {
	d := s.d
	// Every endpoint of the plan was tried and no two failed the request
	// the same way: what is held was the endpoints' own failure, whose
	// pauses must hold back a retry on the same endpoint.
	s.charge()
	if s.call.Admission == nil || d.opts.Broker == nil || d.opts.RetryWait <= 0 || s.lastFailed == nil {
		return s.failure()
	}
	until := time.Now().Add(d.opts.RetryWait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
		until = dl
	}
	// Each round calls an endpoint or waits once; the waits are bounded too,
	// so a capacity that comes back in dribbles cannot fill the request's
	// record with refusals.
	for waits := 0; len(s.legs) < d.opts.MaxAttempts && waits <= d.opts.MaxAttempts; {
		eps := s.sameAgain(plan)
		if len(eps) == 0 {
			break
		}
		soonest := time.Duration(-1)
		called := false
		for _, ep := range eps {
			id, sk := s.reservation(ctx, ep, false)
			if sk != nil {
				if s.skipped(sk) {
					return s.failure()
				}
				if sk.capacity && sk.retryAfter > 0 && (soonest < 0 || sk.retryAfter < soonest) {
					soonest = sk.retryAfter
				}
				continue
			}
			winner, losers, err := s.try(ctx, ep, id, nil)
			if err != nil {
				return err
			}
			if winner != nil {
				return s.deliver(ctx, winner, losers)
			}
			called = true
			break
		}
		if called {
			continue
		}
		if soonest < 0 || time.Now().Add(soonest).After(until) {
			break
		}
		waits++
		t := time.NewTimer(soonest)
		select {
		case <-ctx.Done():
			t.Stop()
			return ErrClientGone
		case <-t.C:
		}
	}
	return s.failure()
}

// soonest is how long from now until some endpoint this request tried may
// serve it again: per endpoint, what was said last — the broker's refusal
// (its pause, which includes the provider's Retry-After and its jitter) or
// the provider's own Retry-After — and the soonest of the endpoints; 0
// when nothing said.
func (s *serving) soonest() time.Duration {
	last := map[string]time.Time{}
	for _, a := range s.attempts {
		switch {
		case a.skip != nil:
			var t time.Time
			if a.skip.capacity && a.skip.retryAfter > 0 {
				t = a.skip.at.Add(a.skip.retryAfter)
			}
			last[a.skip.ep.GetId()] = t
		case a.leg != nil:
			var t time.Time
			if r := &a.leg.Result; r.RetryAfter > 0 && r.Class().SameEndpoint() {
				t = r.Start.Add(r.Duration + r.RetryAfter)
			}
			last[a.leg.Endpoint.GetId()] = t
		}
	}
	var at time.Time
	for _, t := range last {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if at.IsZero() {
		return 0
	}
	return max(time.Until(at), time.Nanosecond)
}
