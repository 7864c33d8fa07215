package broker

import (
	"context"
	"fmt"
	"time"
)

// ReserveRequest asks for capacity for one dispatch.
type ReserveRequest struct {
	// RequestID is the request's id, recorded on the reservation.
	RequestID string
	// IdempotencyKey makes a retried Reserve return the same reservation
	// while it lives. Keys are scoped by tenant. (Optional)
	IdempotencyKey string
	// Identity is who the request is for.
	Identity Identity
	// Model is the canonical model id (keys estimate correction).
	Model string
	// EndpointID is the endpoint the dispatch will use.
	EndpointID string
	// Demand is the estimated consumption.
	Demand Demand
	// TTL is how long the reservation lives if never reconciled. (Optional)
	// Defaults to Options.DefaultTTL, capped at Options.MaxTTL.
	TTL time.Duration
	// MaxWait is how long the caller will wait in its class's admission
	// queue ([Broker.ReserveWait]); 0 uses the class's deadline, which also
	// caps it. (Optional)
	MaxWait time.Duration
	// Attempt numbers this dispatch within the logical request RequestID:
	// 0 or 1 for the first, 2 for the first retry. The broker holds the
	// logical request's retry budget. (Optional)
	Attempt int
	// PreviousFailure classifies how the previous attempt failed; a retry
	// after a non-retryable failure is refused. (Optional)
	PreviousFailure RefusalReason

	left time.Duration // what was left of the caller's deadline, 0 for none (retry.go)
}

// Reservation is capacity held for one dispatch. The broker never changes a
// Reservation it returned; callers must not change it either.
type Reservation struct {
	// ID identifies the reservation: unique across owners and unguessable
	// (128 random bits), so only whoever was given it can name it.
	ID string
	// RequestID is the request it is for.
	RequestID string
	// IdempotencyKey is the key it was created with.
	IdempotencyKey string
	// Identity is who it is for.
	Identity Identity
	// Model is the canonical model id.
	Model string
	// EndpointID is the endpoint.
	EndpointID string
	// Estimate is the demand as the caller estimated it.
	Estimate Demand
	// Demand is what was reserved: Estimate with estimate correction applied.
	Demand Demand
	// Charges lists every bucket charged, in the order they were checked.
	Charges []Charge
	// Created is when it was granted.
	Created time.Time
	// Expires is when it is released if not reconciled.
	Expires time.Time
}

// Charge is an amount taken from, or given back to, one bucket.
type Charge struct {
	// BucketID identifies the bucket.
	BucketID string
	// Scope is the bucket's scope.
	Scope Scope
	// Unit is the bucket's unit.
	Unit Unit
	// Amount is what was charged (in a Reservation) or given back (in a
	// Settlement; negative for an overrun charged).
	Amount float64
}

// Reserve reserves the request's demand in every bucket that applies to it,
// or in none: see the package documentation. A refusal is an answer, not an
// error; the error is for a cancelled context or an invalid demand. Exactly
// one of the reservation and the refusal is non-nil when err is nil.
func (b *Broker) Reserve(ctx context.Context, req ReserveRequest) (*Reservation, *Refusal, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if err := req.checkFields(); err != nil {
		return nil, nil, fmt.Errorf("reserve: %w", err)
	}
	if err := req.Demand.validate(); err != nil {
		return nil, nil, fmt.Errorf("reserve %s: %w", req.RequestID, err)
	}
	withDeadline(ctx, &req)
	now := b.nowNS()
	res, ref := b.reserve(&req, now)
	if ref != nil && b.expiryDue(now) {
		// Lazy expiry: a refusal may be caused by abandoned reservations the
		// ticker has not swept yet.
		n := b.expire(now)
		res, ref = b.reserve(&req, now)
		if n > 0 {
			b.wake() // what expiry released may admit queued requests too
		}
	}
	return res, ref, nil
}

// maxStack is how many buckets resolve on the stack; more spill to the heap.
const maxStack = 16

func (b *Broker) reserve(req *ReserveRequest, now int64) (*Reservation, *Refusal) {
	t := b.tab.Load()
	var arr [maxStack]*bucket
	bs, rt := t.resolve(&req.Identity, req.EndpointID, arr[:0])
	bs = sortBuckets(bs)
	est := req.Demand.normalized()
	dem := est
	if !b.opts.DisableCorrection {
		dem = b.Correct(req.Model, req.EndpointID, est)
	}
	// A retry is checked against the logical request's budget first, and
	// counted; the count is given back unless the reservation is granted.
	claim, ref := b.claimRetry(req, now)
	if ref != nil {
		return nil, ref
	}
	if ref := b.durableRefusal(req.Identity.Class); ref != nil {
		b.unclaimRetry(claim)
		ref.finish()
		return nil, ref
	}
	ik, si := b.placement(req)
	ttl := b.grantTTL(req.TTL)
	e := b.newEntry(req, est, dem, len(bs), now, ttl, si)
	e.idem = ik
	e.size = entrySize(e)
	// The entry's place in the snapshot is claimed first and given back
	// unless it is inserted, so concurrent reservations never take the
	// snapshot past its limit between them.
	if ref := b.claimState(e.size, req.Identity.Class); ref != nil {
		b.unclaimRetry(claim)
		ref.finish()
		return nil, ref
	}

	// Lock order: shard, then buckets in canonical order. Holding the shard
	// across the charge makes the charge and the record appear together, for
	// idempotency and for Snapshot's consistent cut.
	sh := &b.shards[si]
	sh.mu.Lock()
	if old := b.replay(sh, ik, now); old != nil {
		sh.mu.Unlock()
		b.stateBytes.Add(-e.size)
		b.unclaimRetry(claim)
		return &old.res, nil
	}
	for _, bk := range bs {
		bk.mu.Lock()
	}
	if ref := b.check(bs, rt, &dem, now, &req.Identity); ref != nil {
		for _, bk := range bs {
			bk.mu.Unlock()
		}
		sh.mu.Unlock()
		b.stateBytes.Add(-e.size)
		b.unclaimRetry(claim)
		deadlineRefusal(req, ref)
		ref.finish()
		return nil, ref
	}
	take(e, bs, &dem)
	b.noteTTL(ttl) // before the insert, so a snapshot holding e knows its TTL
	sh.insert(e)
	sh.mu.Unlock()
	return &e.res, nil
}

// placement picks the shard of a new reservation: spread by sequence
// number, or by idempotency key so a retry finds its first attempt.
func (b *Broker) placement(req *ReserveRequest) (idemKey, int) {
	seq := b.seq.Add(1)
	if req.IdempotencyKey == "" {
		return idemKey{}, int(seq % nShards)
	}
	ik := idemKey{tenant: req.Identity.TenantID, key: req.IdempotencyKey}
	return ik, ik.shard()
}

// grantTTL is the lifetime of a reservation asked for ttl: the default when
// unset, never above MaxTTL.
func (b *Broker) grantTTL(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		ttl = b.opts.DefaultTTL
	}
	return min(ttl, b.opts.MaxTTL)
}

// replay returns the live reservation made with idempotency key ik, nil if
// none; one that expired unswept is expired here, as the sweep would have.
// The shard lock is held.
func (b *Broker) replay(sh *shard, ik idemKey, now int64) *entry {
	if ik.key == "" {
		return nil
	}
	old := sh.idem[ik]
	if old == nil {
		return nil
	}
	if old.expires > now {
		return old
	}
	sh.remove(old)
	b.releaseExpired(sh, old, now)
	return nil
}

// check decides, with every bucket of bs locked, whether dem fits them all:
// nil, or the refusal of the first that does not (narrowest scope first,
// the route's pause, and id's tenant's own, just before its model_route
// buckets).
func (b *Broker) check(bs []*bucket, rt *route, dem *Demand, now int64, id *Identity) *Refusal {
	cls := id.Class
	hold := b.hold(now)
	pauseChecked := rt == nil // the pause sits just before the model_route buckets
	for _, bk := range bs {
		if !pauseChecked && bk.scope >= ScopeModelRoute {
			pauseChecked = true
			if ref := b.pauseRefusal(rt, now, id); ref != nil {
				return ref
			}
		}
		bk.advance(now)
		if a := dem.amount(bk.unit); !bk.fits(a, hold) {
			return b.refusal(bk, a, hold, now, cls)
		}
	}
	if !pauseChecked {
		return b.pauseRefusal(rt, now, id)
	}
	return nil
}

// take charges dem to every bucket of bs, records the charges on e and
// unlocks each bucket once charged.
func take(e *entry, bs []*bucket, dem *Demand) {
	for i, bk := range bs {
		a := dem.amount(bk.unit)
		bk.take(a)
		e.recs[i] = charge{b: bk, amount: a, epoch: bk.epoch}
		e.res.Charges[i] = Charge{BucketID: bk.id, Scope: bk.scope, Unit: bk.unit, Amount: a}
		bk.mu.Unlock()
	}
}

// inline is how many charges an entry holds without a second allocation:
// one bucket per scope plus a few extra units.
const inline = 10

type charge struct {
	b      *bucket
	amount float64
	epoch  int64
}

// entry is a live reservation with its bookkeeping.
type entry struct {
	res     Reservation
	recs    []charge
	expires int64
	ttl     int64 // what Extend extends it by, ns
	heapIdx int
	size    int64 // what it takes in a snapshot, at most (entrySize)
	idem    idemKey
	chArr   [inline]Charge
	recArr  [inline]charge
}

func (b *Broker) newEntry(req *ReserveRequest, est, dem Demand, n int, now int64, ttl time.Duration, si int) *entry {
	e := &entry{expires: now + int64(ttl), ttl: int64(ttl)}
	e.res = Reservation{
		ID: newID(si), RequestID: req.RequestID, IdempotencyKey: req.IdempotencyKey,
		Identity: req.Identity, Model: req.Model, EndpointID: req.EndpointID,
		Estimate: est, Demand: dem,
		Created: time.Unix(0, now).UTC(), Expires: time.Unix(0, e.expires).UTC(),
	}
	if n <= inline {
		e.res.Charges = e.chArr[:n]
		e.recs = e.recArr[:n]
	} else {
		e.res.Charges = make([]Charge, n)
		e.recs = make([]charge, n)
	}
	return e
}
