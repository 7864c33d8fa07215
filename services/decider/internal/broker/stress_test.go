package broker

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hammer runs workers goroutines of attempts calls to f each, all released
// at once so they really contend.
func hammer(workers, attempts int, f func(w, i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			for i := range attempts {
				f(w, i)
			}
		})
	}
	close(start)
	wg.Wait()
}

func TestStressHotBucket(t *testing.T) {
	tests := []struct {
		name  string
		specs []Spec
		want  int
	}{
		{name: "1000 requests per minute, frozen clock",
			specs: []Spec{{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowMinute, Capacity: 1000}}, want: 1000},
		{name: "1000 per day behind six generous scopes",
			specs: append(hierarchy()[:6:6], Spec{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowDay, Capacity: 1000}), want: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.specs {
				if tt.specs[i].Unit != UnitRequests || tt.specs[i].Scope != ScopeModelRoute {
					tt.specs[i].Capacity = 1e12
				}
			}
			b, _ := newBroker(t, tt.specs)
			var admitted atomic.Int64
			hammer(64, 100, func(int, int) {
				r, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 10, OutputTokens: 10}))
				if err == nil && r != nil {
					admitted.Add(1)
				}
			})
			require.Equal(t, int64(tt.want), admitted.Load(), "exactly the capacity, zero over-admission")
			require.Equal(t, tt.want, b.Open())
		})
	}
}

func TestStressConcurrency(t *testing.T) {
	const limit = 8
	b, c := newBroker(t, []Spec{
		{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: limit},
		{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitInputTokens, Window: WindowMinute, Capacity: 1e9},
	})
	var inFlight, peak, admitted atomic.Int64
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { // snapshots and expiry sweeps race with the traffic
		for {
			select {
			case <-stop:
				return
			default:
				_ = b.Snapshot()
				b.Expire(c.Now())
				runtime.Gosched()
			}
		}
	})
	hammer(64, 200, func(w, i int) {
		r, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 100}))
		if err != nil || r == nil {
			return
		}
		admitted.Add(1)
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		runtime.Gosched()
		inFlight.Add(-1)
		_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Usage: Usage{InputTokens: 50}, Outcome: OutcomeOK})
		if err != nil {
			panic(err)
		}
	})
	close(stop)
	bg.Wait()
	require.LessOrEqual(t, peak.Load(), int64(limit), "never more than the limit in flight")
	require.Greater(t, admitted.Load(), int64(limit), "slots were reused")
	require.Equal(t, float64(limit), level(t, b, "tenant:acme:concurrent_requests"), "every slot back")
	require.Equal(t, 0, b.Open())
}

func TestStressSharedBucketAcrossTenants(t *testing.T) {
	// Two tenants of 300 each share a route of 500: exactly 500 admitted,
	// neither tenant past 300, whatever the interleaving.
	b, _ := newBroker(t, []Spec{
		{Scope: ScopeTenant, Key: "a", Unit: UnitRequests, Window: WindowDay, Capacity: 300},
		{Scope: ScopeTenant, Key: "b", Unit: UnitRequests, Window: WindowDay, Capacity: 300},
		{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitRequests, Window: WindowDay, Capacity: 500},
	})
	var per [2]atomic.Int64
	hammer(64, 40, func(w, _ int) {
		rq := req(one)
		rq.Identity = Identity{TenantID: []string{"a", "b"}[w%2]}
		if r, _, _ := b.Reserve(t.Context(), rq); r != nil {
			per[w%2].Add(1)
		}
	})
	require.Equal(t, int64(500), per[0].Load()+per[1].Load())
	require.LessOrEqual(t, per[0].Load(), int64(300))
	require.LessOrEqual(t, per[1].Load(), int64(300))
}

func TestStressIdempotency(t *testing.T) {
	b, _ := newBroker(t, []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowDay, Capacity: 1000}})
	var mu sync.Mutex
	ids := map[string]map[string]bool{}
	hammer(32, 50, func(w, i int) {
		rq := req(one)
		rq.IdempotencyKey = fmt.Sprint("k", i%10)
		r, _, err := b.Reserve(t.Context(), rq)
		if err != nil || r == nil {
			panic(fmt.Sprint(err))
		}
		mu.Lock()
		if ids[rq.IdempotencyKey] == nil {
			ids[rq.IdempotencyKey] = map[string]bool{}
		}
		ids[rq.IdempotencyKey][r.ID] = true
		mu.Unlock()
	})
	for k, set := range ids {
		require.Len(t, set, 1, "key %s", k)
	}
	require.Equal(t, 990.0, level(t, b, "tenant:acme:requests:day"), "ten keys, ten charges")
}

func TestStressReconcileRace(t *testing.T) {
	// Many goroutines reconcile the same reservations while the clock makes
	// them expire: each is released exactly once.
	b, c := newBroker(t, []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 100}})
	_, _, rs := reserveN(t, b, 100, one)
	require.Len(t, rs, 100)
	var ok atomic.Int64
	hammer(16, 100, func(w, i int) {
		if w == 0 && i == 50 {
			c.Advance(3 * time.Minute)
		}
		if _, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: rs[i].ID}); err == nil {
			ok.Add(1)
		}
	})
	require.LessOrEqual(t, ok.Load(), int64(100))
	b.Expire(c.Now())
	require.Equal(t, 100.0, level(t, b, "tenant:acme:concurrent_requests"))
	require.Equal(t, 0, b.Open())
}
