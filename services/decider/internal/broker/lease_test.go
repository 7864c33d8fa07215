package broker

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

// holderModel is a replica holding a lease, as the model sees it: what it
// may still admit by itself and until when.
type holderModel struct {
	avail   float64
	expires time.Time
	renewed int // renewals since the owner's last snapshot
}

// The lease property: one provider bucket of R requests per minute, an owner
// that reserves on it, three replicas that renew leases of it, admit on them
// while their term lasts and sometimes stop renewing (unreachable), owner
// changes (a clean handover, or a crash that restores the last snapshot
// and turns learning mode on) and a moving clock. After every step, what
// was admitted in any interval [t1, t2] — by the owner or on any lease —
// is at most the bucket's limit plus its refill over t2 − t1: leases plus
// the owner's use never exceed the capacity, leases of an owner that
// crashed or of a replica that went silent included.
//
// A crash loses what the old owner did after its last snapshot; as for
// reservations, learning mode bounds that loss only for what one snapshot
// interval holds, so the model crashes only while each replica renewed at
// most once since the snapshot (a renewal every half term, a snapshot every
// second) and the owner reserved nothing since.
func TestPropertyLeasesNeverOverAdmit(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := fakeclock.New(t0)
		capacity := float64(rapid.IntRange(100, 600).Draw(rt, "rpm"))
		burst := float64(rapid.IntRange(0, 50).Draw(rt, "burst"))
		spec := Spec{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitRequests, Window: WindowMinute, Capacity: capacity, Burst: burst}
		cfg := Config{Buckets: []Spec{spec}, Routes: []Route{{EndpointID: endpoint, Model: model, Project: "alpha"}}}
		opts := Options{Now: c.Now, DisableCorrection: true, Rand: func() float64 { return 0.5 }, ManualPump: true,
			LeaseTerm: time.Duration(rapid.IntRange(1, 5).Draw(rt, "term_s")) * time.Second}
		b, err := New(cfg, opts)
		require.NoError(rt, err)
		id := b.tab.Load().buckets[0].id
		require.True(rt, b.Leasable(id))
		limit, rate := capacity+burst, capacity/float64(time.Minute)
		type flow struct {
			at     time.Time
			amount float64
		}
		var flows []flow
		lastSnap := b.Snapshot()
		ownerSince := 0 // owner reservations since the last snapshot
		holders := []*holderModel{{}, {}, {}}
		add := func(n float64) { // flows at one instant are one flow
			if k := len(flows) - 1; k >= 0 && flows[k].at.Equal(c.Now()) {
				flows[k].amount += n
				return
			}
			flows = append(flows, flow{c.Now(), n})
		}
		check := func() {
			for j := range flows {
				sum := 0.0
				for i := j; i >= 0; i-- {
					sum += flows[i].amount
					bound := limit + rate*float64(flows[j].at.Sub(flows[i].at))
					require.LessOrEqual(rt, sum, bound+propEps, "admitted %v in [%v, %v], bound %v", sum, flows[i].at.Sub(t0), flows[j].at.Sub(t0), bound)
				}
			}
		}
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0: // the owner admits requests until it refuses or n are in
				for range rapid.IntRange(1, 400).Draw(rt, "owner_n") {
					r, _, err := b.Reserve(t.Context(), req(one))
					require.NoError(rt, err)
					if r == nil {
						break
					}
					add(1)
					ownerSince++
				}
			case 1: // a replica renews
				h := holders[rapid.IntRange(0, 2).Draw(rt, "renewer")]
				ret := 0.0
				if c.Now().Before(h.expires) {
					ret = h.avail
				}
				g := b.RenewLeases(fmt.Sprint(h), []LeaseAsk{{BucketID: id, Returned: ret, Demand: float64(rapid.IntRange(0, 400).Draw(rt, "demand"))}})
				require.Len(rt, g, 1)
				require.GreaterOrEqual(rt, g[0].Amount, 0.0)
				h.avail, h.expires = g[0].Amount, c.Now().Add(b.LeaseTerm())
				h.renewed++
			case 2: // a replica admits on its lease while its term lasts
				h := holders[rapid.IntRange(0, 2).Draw(rt, "admitter")]
				n := float64(rapid.IntRange(1, 50).Draw(rt, "n"))
				if c.Now().Before(h.expires) {
					n = math.Min(n, math.Floor(h.avail))
					if n > 0 {
						h.avail -= n
						add(n)
					}
				}
			case 3:
				c.Advance(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "ms")) * time.Millisecond)
			case 4: // the owner snapshots
				lastSnap = b.Snapshot()
				ownerSince = 0
				for _, h := range holders {
					h.renewed = 0
				}
			case 5: // a clean handover: the final snapshot, no learning mode
				nb, err := New(cfg, opts)
				require.NoError(rt, err)
				require.NoError(rt, nb.Restore(b.Snapshot(), c.Now()))
				nb.SetConservative(nb.OldLearning(c.Now()))
				b = nb
				lastSnap = b.Snapshot()
			case 6: // a crash: the last snapshot, learning mode
				crashable := ownerSince == 0
				for _, h := range holders {
					crashable = crashable && h.renewed <= 1
				}
				if !crashable {
					continue
				}
				nb, err := New(cfg, opts)
				require.NoError(rt, err)
				require.NoError(rt, nb.Restore(lastSnap, c.Now()))
				nb.SetConservative(nb.LearningUntil(c.Now()))
				b = nb
				for _, h := range holders {
					h.renewed = 0
				}
			}
			check()
			leased := b.Leased()[id]
			require.LessOrEqual(rt, leased, b.opts.LeaseFraction*limit+propEps, "leased past the leasable part")
		}
	})
}

// A bucket's leasable part is split by demand once the replicas want more
// than it holds, and a replica that keeps asking gets what it gave back.
func TestLeasesFairShareByDemand(t *testing.T) {
	b, c := newBroker(t, []Spec{{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitRequests, Window: WindowMinute, Capacity: 1000}},
		func(o *Options) { o.LeaseTerm = 2 * time.Second })
	id := b.tab.Load().buckets[0].id
	// Each wants twice its demand: 100 and 300 fit in the pool of 500.
	require.Equal(t, []LeaseGrant{{id, 100}}, b.RenewLeases("a", []LeaseAsk{{BucketID: id, Demand: 50}}))
	require.Equal(t, []LeaseGrant{{id, 300}}, b.RenewLeases("b", []LeaseAsk{{BucketID: id, Demand: 150}}))
	require.InDelta(t, 600, level(t, b, id), 1e-9)
	// a now wants 600 of a pool of 500 where b wants 300: a gets 500×600/900
	// = 333, less what b holds, 200.
	require.Equal(t, []LeaseGrant{{id, 200}}, b.RenewLeases("a", []LeaseAsk{{BucketID: id, Returned: 100, Demand: 300}}))
	require.InDelta(t, 500, b.Leased()[id], 1e-9)
	// b gives back all it holds and wants less: its share, 500×100/700 = 71.
	require.Equal(t, []LeaseGrant{{id, 71}}, b.RenewLeases("b", []LeaseAsk{{BucketID: id, Returned: 300, Demand: 50}}))
	// A lease not renewed within its term stays consumed.
	c.Advance(3 * time.Second)
	require.Empty(t, b.Leased())
	lvl := level(t, b, id)
	require.Empty(t, b.RenewLeases("c", []LeaseAsk{{BucketID: "nope", Returned: 5}}))
	require.Equal(t, []LeaseGrant{{id, 0}}, b.RenewLeases("a", []LeaseAsk{{BucketID: id, Returned: 200}}), "an expired lease gives nothing back")
	require.InDelta(t, lvl, level(t, b, id), 1e-9)
	// An overrun is charged whatever the lease.
	b.RenewLeases("a", []LeaseAsk{{BucketID: id, Returned: -7}})
	require.InDelta(t, lvl-7, level(t, b, id), 1e-9)
}

// Small buckets, concurrency, daily and ramp buckets are never leased, and
// a request that touches one is not leasable as a whole.
func TestLeasableRule(t *testing.T) {
	b, _ := newBroker(t, []Spec{
		{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitRequests, Window: WindowMinute, Capacity: 100},
		{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 99},
		{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 1000},
		{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitOutputTokens, Window: WindowDay, Capacity: 1e6},
	})
	kinds := map[string]bool{}
	for _, bk := range b.tab.Load().buckets {
		kinds[bk.id] = b.Leasable(bk.id)
	}
	n := 0
	for _, ok := range kinds {
		if ok {
			n++
		}
	}
	require.Equal(t, 1, n, "only the provider's 100 rpm is leasable: %v", kinds)
	r := req(one)
	_, _, _, ok := b.LeasePlan(&r)
	require.False(t, ok)
	g := b.RenewLeases("a", []LeaseAsk{{BucketID: b.tab.Load().buckets[1].id, Demand: 10}})
	for _, x := range g {
		require.True(t, b.Leasable(x.BucketID))
	}
}

// A new owner's learning mode lasts at least the longest lease term.
func TestLearningCoversMaxLeaseTerm(t *testing.T) {
	b, c := newBroker(t, nil, func(o *Options) {
		o.DefaultTTL, o.MaxTTL, o.MaxLeaseTerm = time.Second, time.Second, 30*time.Second
	})
	require.Equal(t, c.Now().Add(30*time.Second), b.LearningUntil(c.Now()))
}

// A replica admits on its leases only what its leases bound: a request
// that charges no bucket at all (a tenant with no limits), or none of its
// leased buckets by a positive amount, goes to the owner, whose state
// bounds the reservations open at once. Before, LeasePlan said yes to a
// request with no bucket, so a non-owner held any number of them.
func TestLeasePlanNeedsABoundingCharge(t *testing.T) {
	unlimited, _ := newBroker(t, nil)
	r := req(one)
	_, _, _, ok := unlimited.LeasePlan(&r)
	require.False(t, ok, "a request that charges no bucket is not admitted on a lease")

	tokens, _ := newBroker(t, []Spec{{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitOutputTokens, Window: WindowMinute, Capacity: 1000}})
	r = req(Demand{Requests: 1})
	_, _, _, ok = tokens.LeasePlan(&r)
	require.False(t, ok, "a request that charges its only leasable bucket nothing is not admitted on a lease")
	r = req(Demand{Requests: 1, OutputTokens: 10})
	_, _, _, ok = tokens.LeasePlan(&r)
	require.True(t, ok, "a positive charge on a leasable bucket is")
}
