package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
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

func TestStressQueue(t *testing.T) {
	// Many goroutines ReserveWait for random tenants and classes (some
	// giving up early) and reconcile what they get, while the clock moves
	// and passes run: no bucket is ever overrun, every request gets an
	// answer, and nothing is left queued or held.
	//
	// The workers count what they hold, which is only the broker's count
	// while no reservation expires: the fake clock stops at timeBudget,
	// below the reservations' lifetime ttl, however slowly the workers run
	// (a worker descheduled while the driver spins would otherwise see its
	// reservation expire and its slot given to another, and count both).
	// Past the budget the requests still waiting give up.
	const (
		ttl        = 10 * time.Minute
		timeBudget = 5 * time.Minute
	)
	for _, manual := range []bool{true, false} {
		t.Run(fmt.Sprint("manual pump ", manual), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			const (
				tenants   = 4
				perTenant = 3
				shared    = 6
				rps       = 20
			)
			specs := []Spec{
				{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitConcurrentRequests, Capacity: shared},
				{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowSecond, Capacity: rps},
			}
			for i := range tenants {
				specs = append(specs, Spec{Scope: ScopeTenant, Key: fmt.Sprint("t", i), Unit: UnitConcurrentRequests, Capacity: perTenant})
			}
			b, c := queueBroker(t, specs, []ClassContract{
				{Class: ClassInteractive, MaxWait: 2 * time.Second, MaxDepth: 16, Weight: 3},
				{Class: ClassBackground, MaxWait: 10 * time.Second, MaxDepth: 32, Overload: OverloadFallback, FallbackModel: "m-small"},
			}, []TenantShare{{Tenant: "t0", Weight: 2}, {Tenant: "t1", Burst: 3}}, func(o *Options) {
				o.ManualPump = manual
				o.DefaultTTL, o.MaxTTL = ttl, ttl
			})

			var inFlight [tenants]atomic.Int64
			var total, peak, admitted atomic.Int64
			var peaks [tenants]atomic.Int64
			raise := func(p *atomic.Int64, n int64) {
				for {
					if cur := p.Load(); n <= cur || p.CompareAndSwap(cur, n) {
						return
					}
				}
			}
			var mu sync.Mutex
			var bad []string
			// lowest is the lowest level of the route's requests bucket
			// the driver saw, in millionths.
			var lowest atomic.Int64
			rpsBucket := b.tab.Load().byID["model_route:"+endpoint+":requests:second"]
			require.NotNil(t, rpsBucket)
			stop := make(chan struct{})
			// giveUp ends the requests still waiting once the fake time
			// budget is spent; what they hold they still reconcile.
			waitCtx, giveUp := context.WithCancel(t.Context())
			defer giveUp()
			var driver sync.WaitGroup
			driver.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if c.Now().Sub(t0) < timeBudget {
						c.Advance(50 * time.Millisecond)
					} else {
						giveUp()
					}
					b.Pump(c.Now())
					rpsBucket.mu.Lock()
					lv := int64(math.Floor(rpsBucket.level * 1e6))
					rpsBucket.mu.Unlock()
					if lv < lowest.Load() {
						lowest.Store(lv)
					}
					runtime.Gosched()
				}
			})
			hammer(32, 40, func(w, i int) {
				rng := mrand.New(mrand.NewPCG(uint64(w), uint64(i)))
				tn := rng.IntN(tenants)
				rq := tenantReq(fmt.Sprint("t", tn), endpoint)
				if rng.IntN(2) == 0 {
					rq.Identity.Class = ClassBackground
				}
				ctx := waitCtx
				if rng.IntN(5) == 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					defer cancel()
					time.AfterFunc(time.Duration(rng.IntN(2000))*time.Microsecond, cancel)
				}
				res, ref, _, err := b.ReserveWait(ctx, rq)
				switch {
				case err != nil:
					if !errors.Is(err, context.Canceled) {
						mu.Lock()
						bad = append(bad, err.Error())
						mu.Unlock()
					}
					return
				case res == nil:
					if ref == nil || ref.Code == "" {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("refusal without a code: %+v", ref))
						mu.Unlock()
					}
					return
				}
				admitted.Add(1)
				raise(&peaks[tn], inFlight[tn].Add(1))
				raise(&peak, total.Add(1))
				runtime.Gosched()
				inFlight[tn].Add(-1)
				total.Add(-1)
				if _, err := b.Reconcile(context.WithoutCancel(ctx), ReconcileRequest{ReservationID: res.ID, Outcome: OutcomeOK}); err != nil {
					mu.Lock()
					bad = append(bad, err.Error())
					mu.Unlock()
				}
			})
			close(stop)
			driver.Wait()

			require.Empty(t, bad)
			require.Greater(t, admitted.Load(), int64(rps), "the queue admitted past the first second")
			require.LessOrEqual(t, peak.Load(), int64(shared), "the shared slots")
			for i := range tenants {
				require.LessOrEqual(t, peaks[i].Load(), int64(perTenant), "tenant t%d's slots", i)
			}
			// Requests per second: the bucket started full and refilled
			// at most rps a second since; and no pass saw it below zero.
			require.LessOrEqual(t, float64(admitted.Load()), rps+rps*c.Now().Sub(t0).Seconds()+1e-6)
			require.GreaterOrEqual(t, lowest.Load(), int64(0), "the route's requests bucket never overrun")
			require.Empty(t, b.QueueDepths())
			require.Equal(t, 0, b.Open())
			require.Equal(t, float64(shared), level(t, b, "provider_project:alpha:concurrent_requests"))
			st := b.QueueStats()
			require.Equal(t, st.Queued, st.Admitted+st.Deadline+st.Cancelled+st.Refused, "every queued request left once: %+v", st)
			t.Logf("admitted %d in %s of fake time; queue %+v", admitted.Load(), c.Now().Sub(t0), st)
		})
	}
}
