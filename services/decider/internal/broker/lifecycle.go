package broker

import (
	"context"
	"fmt"
	"math"
)

// ErrAlreadyReconciled wraps ErrNotFound for a reservation this broker
// reconciled recently: a reconciliation delivered twice (an edge resends
// what it did not see acknowledged) is applied once.
var ErrAlreadyReconciled = fmt.Errorf("reservation already reconciled: %w", ErrNotFound)

// closed is what a shard remembers of a reservation that is no longer open:
// when it was closed and, for one that expired, its entry, so a late
// reconciliation still charges the real usage.
type closed struct {
	id     string
	tenant string
	at     int64
	tomb   *entry // nil once reconciled
	// deferred is the reservation of a reconcile whose failure was
	// deferred (ReconcileRequest.FailureDeferred), until a later reconcile
	// applies it; nil otherwise.
	deferred *entry
}

// maxClosedPerShard bounds the closed reservations each shard remembers:
// past it the oldest are forgotten first, whatever their age.
const maxClosedPerShard = 512

// remember records that e closed at now: reconciled (tomb false) or
// expired with its charges kept (tomb true). The shard lock is held.
func (b *Broker) remember(s *shard, e *entry, now int64, tomb bool) {
	c := &closed{id: e.res.ID, tenant: e.res.Identity.TenantID, at: now}
	if tomb {
		c.tomb = e
	}
	if old := s.closed[c.id]; old != nil {
		old.tomb = nil // superseded: the queue's old item is skipped when it is pruned
	}
	s.closed[c.id] = c
	s.closedQ = append(s.closedQ, c)
	b.pruneClosed(s, now)
}

// pruneClosed forgets closed reservations older than Options.Tombstone, and
// the oldest beyond maxClosedPerShard. The shard lock is held.
func (b *Broker) pruneClosed(s *shard, now int64) {
	keep := int64(b.opts.Tombstone)
	n := 0
	for n < len(s.closedQ) {
		c := s.closedQ[n]
		if now-c.at < keep && len(s.closedQ)-n <= maxClosedPerShard {
			break
		}
		if s.closed[c.id] == c {
			delete(s.closed, c.id)
		}
		n++
	}
	if n > 0 {
		clear(s.closedQ[:n])
		s.closedQ = s.closedQ[n:]
	}
	if len(s.closedQ) == 0 {
		s.closedQ = nil
		s.firstClosed.Store(math.MaxInt64)
	} else {
		s.firstClosed.Store(s.closedQ[0].at)
	}
}

// reconcileClosed handles a reconciliation of an id that is not open. For a
// reservation that expired, the usage is charged as it would have been:
// each bucket whose charge expiry kept (or gave back, where it refunds)
// is settled to the actual amount; concurrency, released by expiry, is not
// touched. The tombstone is then consumed, so this happens once. The shard
// lock is held; it returns the settlement, or an error matching ErrNotFound.
func (b *Broker) reconcileClosed(s *shard, req *ReconcileRequest, now int64) (*Settlement, error) {
	c := s.closed[req.ReservationID]
	switch {
	case c == nil:
		return nil, fmt.Errorf("reconcile %s: %w", req.ReservationID, ErrNotFound)
	case !req.Allow.allows(c.tenant):
		return nil, fmt.Errorf("reconcile %s: %w", req.ReservationID, ErrForbidden)
	case c.tomb == nil && c.deferred != nil && !req.FailureDeferred:
		// The failure the first reconcile deferred is applied now, once;
		// the buckets were settled then.
		e := c.deferred
		c.deferred = nil
		return &Settlement{Reservation: &e.res}, nil
	case c.tomb == nil:
		return nil, fmt.Errorf("reconcile %s: %w", req.ReservationID, ErrAlreadyReconciled)
	}
	e := c.tomb
	st := &Settlement{Reservation: &e.res, Released: make([]Charge, len(e.recs)), Late: true}
	for i, ch := range e.recs {
		applied := 0.0
		if ch.b.rule != RuleConcurrency {
			delta := ch.amount - req.Usage.actual(ch.b.unit, ch.amount)
			if b.refunds(ch.b) {
				delta = -req.Usage.actual(ch.b.unit, ch.amount)
			}
			ch.b.mu.Lock()
			ch.b.advance(now)
			applied = ch.b.settle(delta, ch.epoch)
			ch.b.mu.Unlock()
		}
		st.Released[i] = Charge{BucketID: ch.b.id, Scope: ch.b.scope, Unit: ch.b.unit, Amount: applied}
	}
	b.remember(s, e, now, false)
	if req.FailureDeferred {
		s.closed[e.res.ID].deferred = e
	}
	return st, nil
}

// Extend keeps the open reservations named by ids alive: each one's expiry
// becomes now plus its time to live, if that is later than it was. An edge
// declares the reservations of its calls in flight regularly, so a stream
// that outlives a reservation's TTL keeps its concurrency slot and is
// reconciled, not expired. Unknown, reconciled and expired ids are skipped.
// It returns how many reservations were extended. When allow refuses the
// tenant of any open reservation among ids, it extends none and returns an
// error matching ErrForbidden; a nil allow allows every tenant.
func (b *Broker) Extend(ctx context.Context, ids []string, allow Allow) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if allow != nil {
		// All or nothing: check every id first. A reservation's tenant never
		// changes, so the check still holds when the second pass extends.
		for _, id := range ids {
			si, ok := shardOf(id)
			if !ok {
				continue
			}
			sh := &b.shards[si]
			sh.mu.Lock()
			e := sh.byID[id]
			ok = e == nil || allow(e.res.Identity.TenantID)
			sh.mu.Unlock()
			if !ok {
				return 0, fmt.Errorf("extend %s: %w", id, ErrForbidden)
			}
		}
	}
	now := b.nowNS()
	n := 0
	for _, id := range ids {
		si, ok := shardOf(id)
		if !ok {
			continue
		}
		sh := &b.shards[si]
		sh.mu.Lock()
		if e := sh.byID[id]; e != nil && e.expires > now {
			if exp := now + e.ttl; exp > e.expires {
				e.expires = exp
				sh.down(e.heapIdx)
				sh.next.Store(sh.heap[0].expires)
			}
			n++
		}
		sh.mu.Unlock()
	}
	return n, nil
}

// ttlOf is a restored reservation's time to live, for Extend: the time it
// was granted for, within (0, MaxTTL].
func (b *Broker) ttlOf(created, expires int64) int64 {
	ttl := expires - created
	if ttl <= 0 || ttl > int64(b.opts.MaxTTL) {
		ttl = int64(b.opts.DefaultTTL)
	}
	return ttl
}
