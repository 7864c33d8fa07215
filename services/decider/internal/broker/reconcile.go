package broker

import (
	"context"
	"fmt"
	"time"
)

// ReconcileRequest closes a reservation with what really happened.
type ReconcileRequest struct {
	// ReservationID is the reservation to close.
	ReservationID string
	// Usage is the actual consumption.
	Usage Usage
	// Outcome is how the call ended.
	Outcome Outcome
	// Headers are the provider's rate-limit and Retry-After headers.
	Headers []Header
	// Failure classifies a failed call (pkg/failclass): RETRYABLE_OVERLOAD
	// and RETRYABLE_CAPACITY pause the route with Retry-After or a back-off,
	// NON_RETRYABLE_POLICY pauses it until the provider's reset or for
	// MaxPause. Unspecified for a call that succeeded, or from a caller
	// that does not classify. (Optional)
	Failure RefusalReason
	// ProviderErrorCode is the provider's error code. A NON_RETRYABLE_POLICY
	// failure whose code names the provider account (failclass.IsAccount: a
	// spend limit, billing, a disabled key) pauses every route of that
	// account, not only this one. (Optional)
	ProviderErrorCode string
	// FailureDeferred says the caller does not know yet whether the failure
	// is the endpoint's or the request's: the reservation is settled and its
	// capacity given back, the headers' limits corrected, but nothing is
	// paused. A later Reconcile of the same reservation without it applies
	// the failure's pause, once (see [Broker.Reconcile]). (Optional)
	FailureDeferred bool
	// Allow is the caller's authorisation, checked against the
	// reservation's tenant before anything changes. (Optional) Nil allows
	// every tenant.
	Allow Allow
	// Scoped says the caller may move only what the reservation's tenant
	// sees of the provider: a pause its failure or headers ask for applies
	// to that tenant alone, and its headers' limits and its usage do not
	// teach the route's buckets nor the estimate correction (scope.go).
	// (Optional) Defaults to false: what every tenant sees, as an edge's
	// reconciliation does.
	Scoped bool
}

// Settlement is what Reconcile did.
type Settlement struct {
	// Reservation is the reservation closed.
	Reservation *Reservation
	// Released lists, per bucket charged, what was given back: reserved
	// minus actual, negative for an overrun charged, 0 where a fixed period
	// rolled over since the charge.
	Released []Charge
	// Headers are the provider headers as parsed.
	Headers ProviderHeaders
	// HeaderErr reports malformed headers, which were skipped.
	HeaderErr error
	// PausedUntil is the route's pause after this reconcile; zero if none.
	PausedUntil time.Time
	// Late is set when the reservation had expired: its concurrency was
	// released then, and the other buckets were settled to the actual
	// usage now.
	Late bool
}

// Reconcile replaces a reservation's estimates with the actual usage: every
// bucket gets back what was reserved and not used, or is charged the
// overrun; concurrency is released. The provider's headers then correct the
// route's buckets and may pause it.
//
// A reconcile with FailureDeferred pauses nothing: the broker remembers the
// closed reservation's route (for as long as it remembers closed
// reservations, Options.Tombstone), and one later Reconcile of the same id
// without FailureDeferred applies the failure and headers it carries to that
// route (the pause, and an account's pause) without settling anything again.
//
// A reservation is reconciled once. One that expired recently is still
// reconciled (Settlement.Late): expiry released its concurrency, and its
// other buckets are settled to the actual usage now, so a call that outlived
// its reservation is charged what it used. A second reconcile of the same id
// returns an error matching ErrAlreadyReconciled (and ErrNotFound) and an
// unknown id one matching ErrNotFound; neither changes any bucket. A
// reservation (open or recently closed) of a tenant req.Allow refuses gets
// an error matching ErrForbidden and is left as it was.
func (b *Broker) Reconcile(ctx context.Context, req ReconcileRequest) (*Settlement, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := req.Usage.validate(); err != nil {
		return nil, fmt.Errorf("reconcile %s: %w", req.ReservationID, err)
	}
	si, ok := shardOf(req.ReservationID)
	if !ok {
		return nil, fmt.Errorf("reconcile %q: %w", req.ReservationID, ErrNotFound)
	}
	now := b.nowNS()
	sh := &b.shards[si]
	sh.mu.Lock()
	e := sh.byID[req.ReservationID]
	if e != nil && !req.Allow.allows(e.res.Identity.TenantID) {
		sh.mu.Unlock()
		return nil, fmt.Errorf("reconcile %s: %w", req.ReservationID, ErrForbidden)
	}
	if e != nil && e.expires <= now {
		// Expired but not swept yet: expire it as the sweep would have.
		sh.remove(e)
		b.releaseExpired(sh, e, now)
		e = nil
	}
	if e == nil {
		st, err := b.reconcileClosed(sh, &req, now)
		sh.mu.Unlock()
		if err != nil {
			return nil, err
		}
		st.Headers, st.PausedUntil, st.HeaderErr = b.applyHeaders(st.Reservation, &req, now)
		b.wake() // a late settlement may give capacity back
		return st, nil
	}
	sh.remove(e)
	b.remember(sh, e, now, false)
	if req.FailureDeferred {
		sh.closed[e.res.ID].deferred = e
	}
	st := &Settlement{Reservation: &e.res, Released: make([]Charge, len(e.recs))}
	for i, c := range e.recs {
		delta := c.amount - req.Usage.actual(c.b.unit, c.amount)
		c.b.mu.Lock()
		c.b.advance(now)
		applied := c.b.settle(delta, c.epoch)
		c.b.mu.Unlock()
		st.Released[i] = Charge{BucketID: c.b.id, Scope: c.b.scope, Unit: c.b.unit, Amount: applied}
	}
	sh.mu.Unlock()
	if req.Outcome == OutcomeOK && req.Usage.Reported && !req.Scoped {
		b.observe(e.res.Model, e.res.EndpointID, e.res.Estimate, req.Usage)
	}
	st.Headers, st.PausedUntil, st.HeaderErr = b.applyHeaders(&e.res, &req, now)
	// What was given back (concurrency, unused tokens) may admit queued
	// requests; every lock above is released.
	b.wake()
	return st, nil
}
