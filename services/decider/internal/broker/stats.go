package broker

import (
	"cmp"
	"slices"
	"time"
)

// Read-only views of the broker's state for the decider's metrics and the
// operator's reads. Nothing
// here changes what a bucket admits: a level is brought up to now (refill,
// reset) exactly as Reserve or Limits would before reading it, and a
// reservation is copied, never moved.

// BucketLevel is one bucket's fill at the moment it was read.
type BucketLevel struct {
	// Scope is the bucket's scope.
	Scope Scope
	// Key names the scope instance: the tenant id for a tenant bucket, the
	// endpoint id for a model_route bucket (catalog names, never
	// credentials).
	Key string
	// Unit is what it counts.
	Unit Unit
	// Window is its window (none for concurrency and ramp).
	Window Window
	// Rule is how it refills.
	Rule Rule
	// Source says whether the limit is configured or learned from a
	// provider's headers.
	Source Source
	// Limit is its limit now: capacity + burst, or a ramp's current limit.
	Limit float64
	// Available is what it can still admit now; negative after an overrun.
	// For a concurrency bucket, Limit − Available requests are in flight.
	Available float64
}

// BucketLevels returns the level of every bucket of the given scopes (every
// bucket when none is given), learned buckets included. Each bucket is
// locked on its own while it is read, so the levels are not one consistent
// cut across buckets, which a gauge does not need; Reserve is only ever
// held up by the few nanoseconds of one read.
func (b *Broker) BucketLevels(scopes ...Scope) []BucketLevel {
	var want uint32
	for _, s := range scopes {
		want |= 1 << s
	}
	t := b.tab.Load()
	now := b.nowNS()
	out := make([]BucketLevel, 0, len(t.buckets))
	for _, bk := range t.buckets {
		if want != 0 && want&(1<<bk.scope) == 0 {
			continue
		}
		bk.mu.Lock()
		bk.advance(now)
		l := BucketLevel{Scope: bk.scope, Key: bk.key, Unit: bk.unit, Window: bk.window, Rule: bk.rule, Source: bk.source,
			Limit: bk.limit(), Available: bk.available()}
		bk.mu.Unlock()
		out = append(out, l)
	}
	return out
}

// ReservationInfo is what the metrics of a reconciliation need to know of
// its reservation.
type ReservationInfo struct {
	// Tenant is the tenant billed.
	Tenant string
	// Class is the request's workload class.
	Class WorkloadClass
	// Model is the canonical model id.
	Model string
	// EndpointID is the endpoint (the route).
	EndpointID string
	// Estimate is the demand as the caller estimated it.
	Estimate Demand
	// Demand is what was reserved: the estimate after correction.
	Demand Demand
	// Expired is set for a reservation that expired and is remembered for
	// a late reconciliation.
	Expired bool
}

// ReservationInfo returns what id reserved while it is open, or expired and
// still remembered for a late reconciliation; false for an unknown id and
// one already reconciled.
func (b *Broker) ReservationInfo(id string) (ReservationInfo, bool) {
	si, ok := shardOf(id)
	if !ok {
		return ReservationInfo{}, false
	}
	sh := &b.shards[si]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, expired := sh.byID[id], false
	if e == nil {
		c := sh.closed[id]
		if c == nil || c.tomb == nil {
			return ReservationInfo{}, false
		}
		e, expired = c.tomb, true
	}
	r := &e.res
	return ReservationInfo{Tenant: r.Identity.TenantID, Class: r.Identity.Class, Model: r.Model, EndpointID: r.EndpointID,
		Estimate: r.Estimate, Demand: r.Demand, Expired: expired}, true
}

// OpenDemand returns how many reservations are open and the sum of what
// they reserved (Requests counts each as one at least).
func (b *Broker) OpenDemand() (n int, sum Demand) {
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for _, e := range sh.byID {
			d := e.res.Demand
			sum.InputTokens += d.InputTokens
			sum.OutputTokens += d.OutputTokens
			sum.USD += d.USD
			sum.Requests += max(d.Requests, 1)
		}
		n += len(sh.byID)
		sh.mu.Unlock()
	}
	return n, sum
}

// RoutePause is a route paused at the moment it was read: by a provider's
// Retry-After, an empty limit in its headers or a policy refusal.
type RoutePause struct {
	// EndpointID is the route.
	EndpointID string
	// Tenant is the tenant the pause holds for; "" for every tenant.
	Tenant string
	// Until is when the pause ends.
	Until time.Time
	// Reason is why: what a request refused by the pause is refused as.
	Reason RefusalReason
}

// Pauses returns the routes paused now, for every tenant and for one,
// ordered by route and tenant.
func (b *Broker) Pauses() []RoutePause {
	now := b.nowNS()
	var out []RoutePause
	add := func(endpoint, tenant string, p *pause) {
		if until := p.until.Load(); until > now {
			out = append(out, RoutePause{EndpointID: endpoint, Tenant: tenant, Until: time.Unix(0, until).UTC(), Reason: RefusalReason(p.reason.Load())})
		}
	}
	for id, r := range b.tab.Load().routes {
		add(id, "", r.pause)
	}
	b.paused.Range(func(k, v any) bool {
		tk := k.(tenantPauseKey)
		add(tk.endpoint, tk.tenant, v.(*pause))
		return true
	})
	slices.SortFunc(out, func(x, y RoutePause) int {
		return cmp.Or(cmp.Compare(x.EndpointID, y.EndpointID), cmp.Compare(x.Tenant, y.Tenant))
	})
	return out
}
