package broker

import "time"

// BucketStatus is one bucket as its owner may see it.
type BucketStatus struct {
	// Scope is the bucket's scope: api_key, app or tenant.
	Scope Scope
	// Unit is what it counts.
	Unit Unit
	// Window is its window (none for concurrency and ramp).
	Window Window
	// Rule is how it refills.
	Rule Rule
	// Source is where its limit comes from.
	Source Source
	// Limit is its limit now: capacity + burst, or a ramp's current limit.
	Limit float64
	// Burst is the part of Limit above the steady capacity.
	Burst float64
	// Remaining is what it can admit now.
	Remaining float64
	// Reset is when it is next full (token bucket) or resets (daily, ramp);
	// zero when full or unknown.
	Reset time.Time
}

// Limits returns the caller's own buckets (its API key, its app, its
// tenant) and nothing else: partner and provider buckets are shared, and
// their levels are other tenants' consumption.
func (b *Broker) Limits(id Identity) []BucketStatus {
	t := b.tab.Load()
	var arr [maxStack]*bucket
	bs, _ := t.resolve(&Identity{TenantID: id.TenantID, APIKeyID: id.APIKeyID, App: id.App, Environment: id.Environment}, "", arr[:0])
	bs = sortBuckets(bs)
	now := b.nowNS()
	out := make([]BucketStatus, 0, len(bs))
	for _, bk := range bs {
		if !bk.scope.own() {
			continue
		}
		bk.mu.Lock()
		bk.advance(now)
		s := BucketStatus{Scope: bk.scope, Unit: bk.unit, Window: bk.window, Rule: bk.rule, Source: bk.source,
			Limit: bk.limit(), Burst: bk.p.burst, Remaining: whole(bk.unit, bk.available())}
		if f := bk.full(now); f != 0 {
			s.Reset = time.Unix(0, f).UTC()
		}
		bk.mu.Unlock()
		out = append(out, s)
	}
	return out
}
