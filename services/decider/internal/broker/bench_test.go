package broker

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// benchBroker has one bucket in each of the 7 scopes (plus a concurrency and
// a daily spend bucket on each tenant) for tenants tenants, all too large to
// refuse, on the real clock, with estimate correction on: the hot path as
// the decider runs it.
func benchBroker(b *testing.B, tenants int) *Broker {
	b.Helper()
	specs := benchSpecs(tenants)
	br, err := New(Config{Buckets: specs, Routes: []Route{{EndpointID: endpoint, Model: model}}}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	return br
}

// benchSpecs is benchBroker's buckets.
func benchSpecs(tenants int) []Spec {
	const huge = 1e15
	specs := []Spec{
		{Scope: ScopeProviderWorkspace, Key: "alpha", Unit: UnitOutputTokens, Window: WindowMinute, Capacity: huge},
		{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitInputTokens, Window: WindowMinute, Capacity: huge},
		{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowMinute, Capacity: huge},
	}
	for i := range tenants {
		tn := benchIdentity(i)
		specs = append(specs,
			Spec{Scope: ScopeAPIKey, Key: tn.APIKeyID, Unit: UnitRequests, Window: WindowSecond, Capacity: huge},
			Spec{Scope: ScopeApp, Key: tn.TenantID + "/chat/prod", Unit: UnitTotalTokens, Window: WindowMinute, Capacity: huge},
			Spec{Scope: ScopeTenant, Key: tn.TenantID, Unit: UnitInputTokens, Window: WindowMinute, Capacity: huge},
			Spec{Scope: ScopeTenant, Key: tn.TenantID, Unit: UnitConcurrentRequests, Capacity: huge},
			Spec{Scope: ScopeTenant, Key: tn.TenantID, Unit: UnitUSD, Window: WindowDay, Capacity: huge},
			Spec{Scope: ScopePartner, Key: tn.Partner, Unit: UnitConcurrentRequests, Capacity: huge},
		)
	}
	return specs
}

func benchIdentity(i int) Identity {
	return Identity{TenantID: fmt.Sprint("tenant-", i), APIKeyID: fmt.Sprint("key-", i), App: "chat", Environment: "prod", Partner: fmt.Sprint("partner-", i), Class: ClassInteractive}
}

// BenchmarkReserveReconcile measures one Reserve plus its Reconcile through
// 9 buckets in 7 scopes: serially, and in parallel with every goroutine on
// the same buckets (hot) or on its own tenant sharing only the provider
// buckets (spread).
func BenchmarkReserveReconcile(b *testing.B) {
	usage := Usage{InputTokens: 900, OutputTokens: 300, CostUSD: 0.0004, Reported: true}
	demand := Demand{InputTokens: 1000, OutputTokens: 500, USD: 0.0005}
	pair := func(b *testing.B, br *Broker, id Identity) {
		rq := ReserveRequest{RequestID: "req", Identity: id, Model: model, EndpointID: endpoint, Demand: demand}
		r, ref, err := br.Reserve(b.Context(), rq)
		if err != nil || ref != nil {
			b.Fatal(err, ref)
		}
		if _, err := br.Reconcile(b.Context(), ReconcileRequest{ReservationID: r.ID, Usage: usage, Outcome: OutcomeOK}); err != nil {
			b.Fatal(err)
		}
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	}
	b.Run("serial", func(b *testing.B) {
		br := benchBroker(b, 1)
		id := benchIdentity(0)
		b.ReportAllocs()
		for b.Loop() {
			pair(b, br, id)
		}
		report(b)
	})
	b.Run("parallel-hot", func(b *testing.B) {
		br := benchBroker(b, 1)
		id := benchIdentity(0)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				pair(b, br, id)
			}
		})
		report(b)
	})
	b.Run("parallel-spread", func(b *testing.B) {
		const tenants = 64
		br := benchBroker(b, tenants)
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			id := benchIdentity(int(next.Add(1)) % tenants)
			for pb.Next() {
				pair(b, br, id)
			}
		})
		report(b)
	})
}

// BenchmarkRefusal measures a refused Reserve (a full hot bucket), the path
// a saturated tenant hammers.
func BenchmarkRefusal(b *testing.B) {
	br, _ := newBroker(b, []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowDay, Capacity: 1}})
	if r, _, _ := br.Reserve(b.Context(), req(one)); r == nil {
		b.Fatal("first reservation refused")
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ref, _ := br.Reserve(b.Context(), req(one)); ref == nil {
			b.Fatal("admitted")
		}
	}
}

// BenchmarkSnapshot measures a snapshot with 10k open reservations.
func BenchmarkSnapshot(b *testing.B) {
	br := benchBroker(b, 1)
	id := benchIdentity(0)
	for range 10000 {
		if _, _, err := br.Reserve(b.Context(), ReserveRequest{Identity: id, EndpointID: endpoint, Demand: Demand{InputTokens: 10}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	var size int
	for b.Loop() {
		size = len(br.Snapshot())
	}
	b.ReportMetric(float64(size), "bytes")
}

// BenchmarkNewID measures making one reservation id (128 bits from
// crypto/rand), the part of Reserve that ids added.
func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = newID(7)
		}
	})
}

// BenchmarkReserveWaitUncontended compares Reserve with ReserveWait, each
// followed by its Reconcile, on the same buckets with room and nothing
// queued, for a class whose contract queues: the difference is what the
// queue adds to an admission that does not wait.
func BenchmarkReserveWaitUncontended(b *testing.B) {
	demand := Demand{InputTokens: 1000, OutputTokens: 500, USD: 0.0005}
	usage := Usage{InputTokens: 900, OutputTokens: 300, CostUSD: 0.0004, Reported: true}
	for _, wait := range []bool{false, true} {
		name := "Reserve"
		if wait {
			name = "ReserveWait"
		}
		b.Run(name, func(b *testing.B) {
			br := benchBroker(b, 1)
			cfg := Config{Classes: []ClassContract{{Class: ClassInteractive, MaxWait: time.Second, MaxDepth: 100}}}
			cfg.Buckets = benchSpecs(1)
			cfg.Routes = []Route{{EndpointID: endpoint, Model: model}}
			if err := br.Reconfigure(cfg); err != nil {
				b.Fatal(err)
			}
			rq := ReserveRequest{RequestID: "req", Identity: benchIdentity(0), Model: model, EndpointID: endpoint, Demand: demand}
			b.ReportAllocs()
			for b.Loop() {
				var r *Reservation
				var ref *Refusal
				var err error
				if wait {
					r, ref, _, err = br.ReserveWait(b.Context(), rq)
				} else {
					r, ref, err = br.Reserve(b.Context(), rq)
				}
				if err != nil || ref != nil {
					b.Fatal(err, ref)
				}
				if _, err := br.Reconcile(b.Context(), ReconcileRequest{ReservationID: r.ID, Usage: usage, Outcome: OutcomeOK}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQueuePass measures one dispatch pass (what every Reconcile and
// Expire runs while requests wait) over 100 tenants with 10 requests each
// queued on a shared bucket that has no room: each tenant's head is tried
// and refused, and its other requests skipped as needing the same bucket.
func BenchmarkQueuePass(b *testing.B) {
	br, c := queueBroker(b, []Spec{{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowHour, Capacity: 1}},
		[]ClassContract{{Class: ClassInteractive, MaxWait: time.Hour, MaxDepth: 10000}}, nil)
	if r, _, _ := br.Reserve(b.Context(), tenantReq("drain", endpoint)); r == nil {
		b.Fatal("not reserved")
	}
	ctx, cancel := context.WithCancel(b.Context())
	out := make(chan outcome, 1000)
	for i := range 100 {
		for range 10 {
			spawn(ctx, br, tenantReq(fmt.Sprint("t", i), endpoint), "", out)
		}
	}
	for br.q.n.Load() < 1000 {
		runtime.Gosched()
	}
	b.ReportAllocs()
	for b.Loop() {
		br.Pump(c.Now())
	}
	b.StopTimer()
	cancel()
	for range 1000 {
		<-out
	}
}

// BenchmarkRetry measures a retry's Reserve plus its Reconcile, against
// the first attempt's: a retry also checks and counts the logical request's
// budget (a first attempt skips that and leaves no state).
func BenchmarkRetry(b *testing.B) {
	usage := Usage{InputTokens: 900, OutputTokens: 300, CostUSD: 0.0004, Reported: true}
	demand := Demand{InputTokens: 1000, OutputTokens: 500, USD: 0.0005}
	for _, attempt := range []int{1, 2} {
		b.Run(fmt.Sprint("attempt=", attempt), func(b *testing.B) {
			br := benchBroker(b, 1)
			id := benchIdentity(0)
			ids := make([]string, 1<<16)
			for i := range ids {
				ids[i] = fmt.Sprint("req-", i)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				rq := ReserveRequest{RequestID: ids[i%len(ids)] + fmt.Sprint(i/len(ids)), Identity: id, Model: model,
					EndpointID: endpoint, Demand: demand, Attempt: attempt}
				r, ref, err := br.Reserve(b.Context(), rq)
				if err != nil || ref != nil {
					b.Fatal(err, ref)
				}
				if _, err := br.Reconcile(b.Context(), ReconcileRequest{ReservationID: r.ID, Usage: usage, Outcome: OutcomeOK}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
