package broker

import (
	"math"
	"sync"
	"time"
)

// Quota leases (see the package documentation, "Quota leases"): the owner
// lends a share of a large rolling bucket to a replica for a short term, so
// that replica admits requests on it without asking the owner. A lease is
// taken from the bucket's level when granted, exactly as a reservation's
// charge is, so everything leased out counts against the bucket's capacity
// until it is given back; a lease that is not renewed before its term ends
// stays consumed.

// Lease defaults.
const (
	// DefaultLeaseTerm is how long a lease lasts unless renewed.
	DefaultLeaseTerm = 2 * time.Second
	// DefaultMaxLeaseTerm bounds every lease term an owner may grant; a new
	// owner's learning mode lasts at least that long.
	DefaultMaxLeaseTerm = 10 * time.Second
	// DefaultLeaseMinCapacity is the smallest capacity (per window, in the
	// bucket's unit) of a bucket that is leased.
	DefaultLeaseMinCapacity = 100
)

// LeaseAsk is what a replica says of one bucket when it renews its leases:
// what is left of its lease (negative for an overrun: more was used than
// leased) and what it used of the bucket since its last renewal, admitted
// or forwarded (its demand).
type LeaseAsk struct {
	BucketID string
	Returned float64
	Demand   float64
}

// LeaseGrant is a bucket's new lease: the amount the replica may admit
// locally until the term ends.
type LeaseGrant struct {
	BucketID string
	Amount   float64
}

// lease is what one replica holds of one bucket, on the owner.
type lease struct {
	held     float64 // taken from the bucket's level for the replica
	expires  int64   // Unix ns
	demand   float64 // the replica's last reported demand per renewal
	demandAt int64   // when it was reported, Unix ns
}

// leases is the owner's record of its leases: per replica and bucket. It is
// in memory only; what a lease took is in the bucket's level, and so in the
// snapshot. A new owner does not know the leases of the old one: it gives
// back nothing of them, and they stay consumed.
type leases struct {
	mu sync.Mutex // before any bucket's
	by map[string]map[string]*lease
}

// Leasable reports whether a bucket may be leased: a rolling token bucket
// (per second, minute or hour) of the catalog whose capacity is at least
// Options.LeaseMinCapacity. Concurrency, daily, spend-window and ramp
// buckets, small buckets and limits learned from a provider's headers stay
// with the owner.
func (b *Broker) leasable(bk *bucket) bool {
	return bk.rule == RuleTokenBucket && bk.source == SourceConfigured && bk.p.capacity >= b.opts.LeaseMinCapacity
}

// LeaseTerm is the term of the leases this broker grants.
func (b *Broker) LeaseTerm() time.Duration { return b.opts.LeaseTerm }

// RenewLeases renews the leases of replica holder: for each bucket asked
// for, it gives back what the replica's lease had left (or charges its
// overrun), then grants the replica its share of the bucket's leasable
// part until now + LeaseTerm. The share is split by demand, fair share:
// each replica wants twice what it used since its last renewal (it renews
// every half term); when the replicas together want more than the
// leasable part (LeaseFraction of the bucket's limit), each gets the part
// in proportion to its demand. A grant never takes the bucket below what
// learning mode holds back, nor takes more than the bucket has. A replica
// gives back only what it was leased by this owner and that has not
// expired: the rest stays consumed.
func (b *Broker) RenewLeases(holder string, asks []LeaseAsk) []LeaseGrant {
	now := b.nowNS()
	t := b.tab.Load()
	hold := b.hold(now)
	// What an owner that cannot save its state grants would be unknown to
	// the next one: nothing, as Reserve admits nothing then.
	durable := !b.undurable.Load()
	b.leases.mu.Lock()
	defer b.leases.mu.Unlock()
	b.expireLeasesLocked(now)
	if b.leases.by == nil {
		b.leases.by = map[string]map[string]*lease{}
	}
	mine := b.leases.by[holder]
	if mine == nil {
		mine = map[string]*lease{}
		b.leases.by[holder] = mine
	}
	out := make([]LeaseGrant, 0, len(asks))
	for _, a := range asks {
		bk := t.byID[a.BucketID]
		if bk == nil || math.IsNaN(a.Returned) || math.IsNaN(a.Demand) {
			continue
		}
		l := mine[a.BucketID]
		bk.mu.Lock()
		bk.advance(now)
		if l != nil {
			// What is left of a live lease goes back, never more than it
			// holds; an overrun is charged whatever the lease.
			bk.settle(math.Min(a.Returned, l.held), 0)
			l.held = 0
		} else if a.Returned < 0 {
			bk.settle(math.Min(a.Returned, l.held), 0)
		}
		if !b.leasable(bk) {
			bk.mu.Unlock()
			delete(mine, a.BucketID)
			continue
		}
		if l == nil {
			l = &lease{}
			mine[a.BucketID] = l
		}
		l.demand, l.demandAt = math.Max(0, a.Demand), now
		g := b.share(bk, holder, l, now)
		g = math.Min(g, bk.available()-bk.keep(hold))
		if bk.unit != UnitUSD {
			g = math.Floor(g)
		}
		if !durable {
			g = 0
		}
		if g > 0 {
			bk.take(g)
			l.held = g
		}
		bk.mu.Unlock()
		l.expires = now + int64(b.opts.LeaseTerm)
		out = append(out, LeaseGrant{BucketID: a.BucketID, Amount: math.Max(g, 0)})
	}
	return out
}

// share is what holder may hold of bk: what it wants (twice its demand),
// or its demand's part of the leasable pool when the replicas want more
// than the pool, less what the others hold. leases.mu and bk.mu are held.
func (b *Broker) share(bk *bucket, holder string, l *lease, now int64) float64 {
	pool := b.opts.LeaseFraction * bk.limit()
	want := 2 * l.demand
	var wanted, others float64
	for h, m := range b.leases.by {
		o := m[bk.id]
		if o == nil {
			continue
		}
		if now-o.demandAt <= int64(b.opts.LeaseTerm) {
			wanted += 2 * o.demand
		}
		if h != holder {
			others += o.held
		}
	}
	if wanted > pool && wanted > 0 {
		want = pool * want / wanted
	}
	return math.Max(0, math.Min(want, pool-others))
}

// expireLeasesLocked forgets leases whose term ended: what they took stays
// consumed. leases.mu is held.
func (b *Broker) expireLeasesLocked(now int64) {
	for h, m := range b.leases.by {
		for id, l := range m {
			if l.expires <= now {
				delete(m, id)
			}
		}
		if len(m) == 0 {
			delete(b.leases.by, h)
		}
	}
}

// Leased is what the owner's live leases hold of each bucket, for tests
// and the broker's view.
func (b *Broker) Leased() map[string]float64 {
	now := b.nowNS()
	b.leases.mu.Lock()
	defer b.leases.mu.Unlock()
	b.expireLeasesLocked(now)
	out := map[string]float64{}
	for _, m := range b.leases.by {
		for id, l := range m {
			out[id] += l.held
		}
	}
	return out
}

// LeasePlan is what a replica holding leases needs to admit req locally:
// the charges Reserve would make (the same buckets, the same corrected
// demand), and whether every one of them is leasable. It charges nothing.
// A request on an endpoint the configuration does not name is not
// leasable (its route is the owner's to learn).
func (b *Broker) LeasePlan(req *ReserveRequest) (charges []Charge, dem Demand, est Demand, ok bool) {
	t := b.tab.Load()
	var arr [maxStack]*bucket
	bs, rt := t.resolve(&req.Identity, req.EndpointID, arr[:0])
	bs = sortBuckets(bs)
	est = req.Demand.normalized()
	dem = est
	if !b.opts.DisableCorrection {
		dem = b.Correct(req.Model, req.EndpointID, est)
	}
	// Every bucket leased, and at least one charged a positive amount: the
	// leases then bound what a replica holds open (a request that charges
	// nothing would not be, and is the owner's to count).
	ok = rt != nil
	bounded := false
	charges = make([]Charge, len(bs))
	for i, bk := range bs {
		charges[i] = Charge{BucketID: bk.id, Scope: bk.scope, Unit: bk.unit, Amount: dem.amount(bk.unit)}
		if !b.leasable(bk) {
			ok = false
		}
		bounded = bounded || charges[i].Amount > 0
	}
	return charges, dem, est, ok && bounded
}

// Leasable reports whether the bucket id names a bucket that may be leased.
func (b *Broker) Leasable(id string) bool {
	bk := b.tab.Load().byID[id]
	return bk != nil && b.leasable(bk)
}

// CentralRoutes lists the endpoints a replica holding leases must not
// admit on by itself: those paused now (for every tenant) and those with a
// limit learned from the provider, which only the owner holds.
func (b *Broker) CentralRoutes() []string {
	now := b.nowNS()
	t := b.tab.Load()
	var out []string
	for id, rt := range t.routes {
		central := rt.pause.until.Load() > now
		for _, bk := range rt.buckets {
			central = central || bk.source == SourceLearned
		}
		if central {
			out = append(out, id)
		}
	}
	b.paused.Range(func(k, v any) bool {
		if v.(*pause).until.Load() > now {
			out = append(out, k.(tenantPauseKey).endpoint)
		}
		return true
	})
	return out
}

// Observe folds what a replica holding leases heard from a provider for a
// call it admitted by itself (req's outcome, failure, headers) into the
// route of endpoint: its pause, an account's pause, the limits its headers
// correct, as Reconcile would for a reservation of tenant on that route.
// Nothing is settled: the call's usage was settled against the lease.
func (b *Broker) Observe(endpoint, model, tenant string, req ReconcileRequest) {
	res := Reservation{EndpointID: endpoint, Model: model, Identity: Identity{TenantID: tenant}}
	_, _, _ = b.applyHeaders(&res, &req, b.nowNS())
}
