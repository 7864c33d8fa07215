package broker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

const endpoint2 = "beta/m1"

// interactive is a contract that queues for up to a minute.
var interactive = ClassContract{Class: ClassInteractive, MaxWait: time.Minute, MaxDepth: 100}

// queueBroker builds a broker on a fake clock at t0 with the given class
// contracts and tenant shares; dispatching is left to the test (Pump) and
// to Reconcile, Expire and Reconfigure.
func queueBroker(t testing.TB, specs []Spec, classes []ClassContract, tenants []TenantShare, opts ...func(*Options)) (*Broker, *clock) {
	t.Helper()
	c := fakeclock.New(t0)
	o := Options{Now: c.Now, DisableCorrection: true, Rand: func() float64 { return 0.5 }, ManualPump: true}
	for _, f := range opts {
		f(&o)
	}
	b, err := New(Config{Buckets: specs, Routes: []Route{{EndpointID: endpoint, Model: model}, {EndpointID: endpoint2, Model: model}},
		Classes: classes, Tenants: tenants}, o)
	require.NoError(t, err)
	return b, c
}

// outcome is what one ReserveWait returned.
type outcome struct {
	tag string
	res *Reservation
	ref *Refusal
	dec *QueueDecision
	err error
}

// spawn runs ReserveWait in its own goroutine and sends its outcome on out.
func spawn(ctx context.Context, b *Broker, rq ReserveRequest, tag string, out chan<- outcome) {
	go func() {
		res, ref, dec, err := b.ReserveWait(ctx, rq)
		out <- outcome{tag: tag, res: res, ref: ref, dec: dec, err: err}
	}()
}

// tenantReq is a request of one request for tenant tn, with no other
// identity, so only the tenant's and the route's buckets apply.
func tenantReq(tn string, ep string) ReserveRequest {
	return ReserveRequest{RequestID: "req-" + tn, Identity: Identity{TenantID: tn, Class: ClassInteractive}, Model: model, EndpointID: ep, Demand: one}
}

func depthOf(b *Broker, tn string) int {
	n := 0
	for _, d := range b.QueueDepths() {
		if d.Tenant == tn {
			n += d.Depth
		}
	}
	return n
}

// waitDepth waits until tenant tn has n requests queued.
func waitDepth(t *testing.T, b *Broker, tn string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return depthOf(b, tn) == n }, 10*time.Second, time.Millisecond, "%s queued", tn)
}

// next receives the next outcome, failing the test if none comes.
func next(t *testing.T, out <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-out:
		return o
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no outcome")
		return outcome{}
	}
}

// none checks that no outcome is pending: every goroutine still waits.
func none(t *testing.T, out <-chan outcome) {
	t.Helper()
	select {
	case o := <-out:
		require.FailNow(t, "unexpected outcome", "%+v", o)
	default:
	}
}

// outcomeAfter moves the clock to a second before d from now and pumps: no
// outcome yet; then to d and pumps again, and returns the outcome that came.
func outcomeAfter(t *testing.T, b *Broker, c *clock, out <-chan outcome, d time.Duration) outcome {
	t.Helper()
	c.Advance(d - time.Second)
	b.Pump(c.Now())
	none(t, out)
	c.Advance(time.Second)
	b.Pump(c.Now())
	return next(t, out)
}

func TestQueueDefaultContractRefusesAtOnce(t *testing.T) {
	b, _ := queueBroker(t, []Spec{{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowMinute, Capacity: 1}}, nil, nil)
	rq := tenantReq("a", endpoint)
	rq.Identity.Class = ClassUnspecified
	res, _, dec, err := b.ReserveWait(t.Context(), rq)
	require.NoError(t, err)
	require.NotNil(t, res)
	require.Nil(t, dec)
	res, ref, dec, err := b.ReserveWait(t.Context(), rq)
	require.NoError(t, err)
	require.Nil(t, res)
	require.Nil(t, dec, "no contract: no queue")
	require.Equal(t, CodeRateLimit, ref.Code)
	require.Equal(t, ReasonRetryableCapacity, ref.Reason)
	require.Empty(t, b.QueueDepths())
	require.Equal(t, ClassContract{Class: ClassInteractive}, b.Contract(ClassUnspecified), "unspecified is interactive")
}

func TestQueueAdmitsWhenTheBucketRefills(t *testing.T) {
	b, c := queueBroker(t, []Spec{{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowMinute, Capacity: 1}},
		[]ClassContract{interactive}, nil)
	r0, _, _, err := b.ReserveWait(t.Context(), tenantReq("a", endpoint))
	require.NoError(t, err)
	require.NotNil(t, r0)

	out := make(chan outcome, 1)
	spawn(t.Context(), b, tenantReq("a", endpoint), "a", out)
	waitDepth(t, b, "a", 1)
	require.Equal(t, []QueueDepth{{Class: ClassInteractive, Tenant: "a", Depth: 1}}, b.QueueDepths())
	require.Equal(t, t0.Add(time.Minute), b.NextPump(), "the timer aims at the refill")

	o := outcomeAfter(t, b, c, out, time.Minute)
	require.NoError(t, o.err)
	require.NotNil(t, o.res)
	require.Nil(t, o.ref)
	require.True(t, strings.HasPrefix(o.dec.ID, "q"), o.dec.ID)
	require.Equal(t, QueueDecision{ID: o.dec.ID, Class: ClassInteractive, Position: 0, Waited: time.Minute, EstimatedWait: time.Minute}, *o.dec)
	require.Empty(t, b.QueueDepths())
	require.True(t, b.NextPump().IsZero())
	require.Equal(t, QueueStats{Queued: 1, Admitted: 1}, b.QueueStats())
}

func TestQueueRefusesAtOnce(t *testing.T) {
	short := ClassContract{Class: ClassInteractive, MaxWait: 10 * time.Second, MaxDepth: 10, Overload: OverloadFallback, FallbackModel: "m-small"}
	b, _ := queueBroker(t, []Spec{
		{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowMinute, Capacity: 1},
		{Scope: ScopeTenant, Key: "d", Unit: UnitRequests, Window: WindowDay, Capacity: 1},
		{Scope: ScopeTenant, Key: "big", Unit: UnitInputTokens, Window: WindowMinute, Capacity: 100},
	}, []ClassContract{short}, nil)
	ctx := t.Context()

	t.Run("refill beyond the deadline", func(t *testing.T) {
		_, _, _, err := b.ReserveWait(ctx, tenantReq("a", endpoint))
		require.NoError(t, err)
		res, ref, dec, err := b.ReserveWait(ctx, tenantReq("a", endpoint))
		require.NoError(t, err)
		require.Nil(t, res)
		require.Nil(t, dec, "not queued: the refill is a minute away, the deadline 10 s")
		require.Equal(t, CodeRateLimit, ref.Code)
		require.Equal(t, "m-small", ref.FallbackModel, "the class degrades")
	})
	t.Run("daily quota", func(t *testing.T) {
		_, _, _, err := b.ReserveWait(ctx, tenantReq("d", endpoint2))
		require.NoError(t, err)
		_, ref, dec, err := b.ReserveWait(ctx, tenantReq("d", endpoint2))
		require.NoError(t, err)
		require.Nil(t, dec)
		require.Equal(t, ReasonNonRetryablePolicy, ref.Reason)
		require.Equal(t, CodeDailyQuota, ref.Code)
		require.Empty(t, ref.FallbackModel, "a policy refusal is not an overload")
	})
	t.Run("too large", func(t *testing.T) {
		rq := tenantReq("big", endpoint2)
		rq.Demand = Demand{InputTokens: 101}
		_, ref, dec, err := b.ReserveWait(ctx, rq)
		require.NoError(t, err)
		require.Nil(t, dec)
		require.Equal(t, CodeTooLarge, ref.Code)
	})
	t.Run("caller's own max wait", func(t *testing.T) {
		rq := tenantReq("big", endpoint2)
		rq.Demand = Demand{InputTokens: 100}
		res, _, _, err := b.ReserveWait(ctx, rq)
		require.NoError(t, err)
		require.NotNil(t, res)
		rq.Demand = Demand{InputTokens: 10} // refills in 6 s
		rq.MaxWait = 5 * time.Second
		_, ref, dec, err := b.ReserveWait(ctx, rq)
		require.NoError(t, err)
		require.Nil(t, dec)
		require.Equal(t, CodeRateLimit, ref.Code)
	})
	t.Run("context deadline", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		rq := tenantReq("big", endpoint2)
		rq.Demand = Demand{InputTokens: 10}
		_, ref, dec, err := b.ReserveWait(dctx, rq)
		require.NoError(t, err)
		require.Nil(t, dec, "the context leaves less than the 6 s refill")
		require.Equal(t, CodeRateLimit, ref.Code)
	})
	require.Empty(t, b.QueueDepths())
}

func TestQueueDeadline(t *testing.T) {
	fallback := ClassContract{Class: ClassInteractive, MaxWait: time.Minute, MaxDepth: 10, Overload: OverloadFallback, FallbackModel: "m-small"}
	for _, tt := range []struct {
		name     string
		contract ClassContract
		scope    Scope
		key      string
		fallback string
	}{
		{name: "reject", contract: interactive, scope: ScopeTenant, key: "a"},
		{name: "fallback", contract: fallback, scope: ScopeModelRoute, key: endpoint, fallback: "m-small"},
		// Another model counts against the same limits of the caller's own:
		// it would be refused the same.
		{name: "fallback, the caller's own limit", contract: fallback, scope: ScopeTenant, key: "a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, c := queueBroker(t, []Spec{{Scope: tt.scope, Key: tt.key, Unit: UnitConcurrentRequests, Capacity: 1}}, []ClassContract{tt.contract}, nil)
			held, _, _ := b.Reserve(t.Context(), tenantReq("a", endpoint))
			require.NotNil(t, held)
			out := make(chan outcome, 1)
			spawn(t.Context(), b, tenantReq("a", endpoint), "a", out)
			waitDepth(t, b, "a", 1)
			require.Equal(t, t0.Add(time.Second), b.NextPump(), "a concurrency refusal is polled as well")

			o := outcomeAfter(t, b, c, out, time.Minute)
			require.NoError(t, o.err)
			require.Nil(t, o.res)
			require.Equal(t, ReasonDeadline, o.ref.Reason)
			require.Equal(t, CodeQueueDeadline, o.ref.Code)
			require.Equal(t, tt.scope, o.ref.Scope, "the bucket in the way")
			require.Equal(t, UnitConcurrentRequests, o.ref.Unit)
			require.Equal(t, tt.fallback, o.ref.FallbackModel)
			require.Contains(t, o.ref.Message, "deadline")
			require.Equal(t, time.Minute, o.dec.Waited)
			require.Zero(t, o.dec.EstimatedWait, "a concurrency slot has no known time")
			require.Empty(t, b.QueueDepths())
			require.Equal(t, QueueStats{Queued: 1, Deadline: 1}, b.QueueStats())
			require.Equal(t, 1, b.Open(), "nothing admitted")
		})
	}
}

func TestQueueDepthLimit(t *testing.T) {
	b, c := queueBroker(t, []Spec{{Scope: ScopeTenant, Key: "a", Unit: UnitConcurrentRequests, Capacity: 1}},
		[]ClassContract{{Class: ClassInteractive, MaxWait: time.Minute, MaxDepth: 2}}, nil)
	held, _, _ := b.Reserve(t.Context(), tenantReq("a", endpoint))
	require.NotNil(t, held)
	out := make(chan outcome, 2)
	spawn(t.Context(), b, tenantReq("a", endpoint), "first", out)
	waitDepth(t, b, "a", 1)
	c.Advance(10 * time.Second)
	spawn(t.Context(), b, tenantReq("a", endpoint), "second", out)
	waitDepth(t, b, "a", 2)

	res, ref, dec, err := b.ReserveWait(t.Context(), tenantReq("a", endpoint))
	require.NoError(t, err)
	require.Nil(t, res)
	require.Nil(t, dec)
	require.Equal(t, ReasonRetryableOverload, ref.Reason)
	require.Equal(t, CodeQueueFull, ref.Code)
	require.Equal(t, time.Minute, ref.RetryAfter, "when every request waiting now has left")
	require.Equal(t, c.Now().Add(time.Minute), ref.Reset)
	require.Equal(t, 2, depthOf(b, "a"))

	// Another class has its own queue.
	b2, _ := queueBroker(t, []Spec{{Scope: ScopeTenant, Key: "a", Unit: UnitConcurrentRequests, Capacity: 1}},
		[]ClassContract{{Class: ClassInteractive, MaxWait: time.Minute, MaxDepth: 1}, {Class: ClassBackground, MaxWait: time.Minute, MaxDepth: 1}}, nil)
	_, _, _ = b2.Reserve(t.Context(), tenantReq("a", endpoint))
	spawn(t.Context(), b2, tenantReq("a", endpoint), "i", out)
	waitDepth(t, b2, "a", 1)
	bg := tenantReq("a", endpoint)
	bg.Identity.Class = ClassBackground
	spawn(t.Context(), b2, bg, "b", out)
	waitDepth(t, b2, "a", 2)
	require.Equal(t, []QueueDepth{{Class: ClassInteractive, Tenant: "a", Depth: 1}, {Class: ClassBackground, Tenant: "a", Depth: 1}}, b2.QueueDepths())
	require.Equal(t, QueueStats{Queued: 2, Full: 0}, b2.QueueStats())
	require.Equal(t, uint64(1), b.QueueStats().Full)
}

func TestQueueCancelRemovesTheEntry(t *testing.T) {
	b, _ := queueBroker(t, []Spec{{Scope: ScopeTenant, Key: "a", Unit: UnitConcurrentRequests, Capacity: 1}}, []ClassContract{interactive}, nil)
	held, _, _ := b.Reserve(t.Context(), tenantReq("a", endpoint))
	ctx, cancel := context.WithCancel(t.Context())
	out := make(chan outcome, 1)
	spawn(ctx, b, tenantReq("a", endpoint), "a", out)
	waitDepth(t, b, "a", 1)
	cancel()
	o := next(t, out)
	require.ErrorIs(t, o.err, context.Canceled)
	require.Nil(t, o.res)
	require.Empty(t, b.QueueDepths())
	require.Equal(t, QueueStats{Queued: 1, Cancelled: 1}, b.QueueStats())
	_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: held.ID})
	require.NoError(t, err)
	require.Equal(t, 0, b.Open(), "the freed slot went to nobody")
}

func TestQueueWokenByReconcileExpireAndReconfigure(t *testing.T) {
	spec := []Spec{{Scope: ScopeTenant, Key: "a", Unit: UnitConcurrentRequests, Capacity: 1}}
	t.Run("reconcile", func(t *testing.T) {
		b, _ := queueBroker(t, spec, []ClassContract{interactive}, nil)
		held, _, _ := b.Reserve(t.Context(), tenantReq("a", endpoint))
		out := make(chan outcome, 1)
		spawn(t.Context(), b, tenantReq("a", endpoint), "a", out)
		waitDepth(t, b, "a", 1)
		_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: held.ID})
		require.NoError(t, err)
		o := next(t, out) // no Pump: the reconcile dispatched
		require.NotNil(t, o.res)
		require.Zero(t, o.dec.Waited)
	})
	t.Run("expire", func(t *testing.T) {
		b, c := queueBroker(t, spec, []ClassContract{interactive}, nil)
		rq := tenantReq("a", endpoint)
		rq.TTL = 10 * time.Second
		held, _, _ := b.Reserve(t.Context(), rq)
		require.NotNil(t, held)
		out := make(chan outcome, 1)
		spawn(t.Context(), b, tenantReq("a", endpoint), "a", out)
		waitDepth(t, b, "a", 1)
		c.Advance(10 * time.Second)
		require.Equal(t, 1, b.Expire(c.Now()))
		o := next(t, out)
		require.NotNil(t, o.res)
		require.Equal(t, 10*time.Second, o.dec.Waited)
	})
	t.Run("reconfigure", func(t *testing.T) {
		b, _ := queueBroker(t, spec, []ClassContract{interactive}, nil)
		_, _, _ = b.Reserve(t.Context(), tenantReq("a", endpoint))
		out := make(chan outcome, 1)
		spawn(t.Context(), b, tenantReq("a", endpoint), "a", out)
		waitDepth(t, b, "a", 1)
		// The limit is lifted.
		require.NoError(t, b.Reconfigure(Config{Classes: []ClassContract{interactive}}))
		o := next(t, out)
		require.NotNil(t, o.res)
	})
}

// grants drains n admissions, one per second of a bucket that refills one
// request a second, and returns whose they were, in order.
func grants(t *testing.T, b *Broker, c *clock, out <-chan outcome, n int) []string {
	t.Helper()
	var got []string
	for range n {
		c.Advance(time.Second)
		b.Pump(c.Now())
		o := next(t, out)
		require.NoError(t, o.err)
		require.NotNil(t, o.res, "%+v", o.ref)
		got = append(got, o.tag)
		none(t, out) // one refill, one admission
	}
	return got
}

// perSecond is one request a second on the shared route: the contended
// capacity of the fairness tests.
var perSecond = []Spec{{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowSecond, Capacity: 1}}

func drain(t *testing.T, b *Broker) {
	t.Helper()
	r, _, _ := b.Reserve(t.Context(), tenantReq("drain", endpoint))
	require.NotNil(t, r)
}

func queueN(t *testing.T, b *Broker, tn string, n int, out chan outcome) {
	t.Helper()
	have := depthOf(b, tn)
	for range n {
		spawn(t.Context(), b, tenantReq(tn, endpoint), tn, out)
	}
	waitDepth(t, b, tn, have+n)
}

func count(got []string, tn string) int {
	n := 0
	for _, g := range got {
		if g == tn {
			n++
		}
	}
	return n
}

func TestQueueWeightedShares(t *testing.T) {
	b, c := queueBroker(t, perSecond, []ClassContract{{Class: ClassInteractive, MaxWait: time.Hour, MaxDepth: 1000}},
		[]TenantShare{{Tenant: "a", Weight: 3}, {Tenant: "b", Weight: 1}})
	drain(t, b)
	out := make(chan outcome, 200)
	queueN(t, b, "a", 60, out)
	queueN(t, b, "b", 60, out)
	got := grants(t, b, c, out, 80)
	require.InDelta(t, 60, count(got, "a"), 2, "3:1 of 80 grants: %v", got)
	for i := 0; i+8 <= len(got); i += 8 {
		require.InDelta(t, 6, count(got[i:i+8], "a"), 1, "3:1 in every window of 8: %v", got[i:i+8])
	}
}

func TestQueueClassWeights(t *testing.T) {
	b, c := queueBroker(t, perSecond, []ClassContract{
		{Class: ClassInteractive, MaxWait: time.Hour, MaxDepth: 1000, Weight: 4},
		{Class: ClassBackground, MaxWait: time.Hour, MaxDepth: 1000, Weight: 1},
	}, nil)
	drain(t, b)
	out := make(chan outcome, 100)
	for range 40 {
		spawn(t.Context(), b, tenantReq("a", endpoint), "interactive", out)
		bg := tenantReq("a", endpoint)
		bg.Identity.Class = ClassBackground
		spawn(t.Context(), b, bg, "background", out)
	}
	require.Eventually(t, func() bool { return depthOf(b, "a") == 80 }, 10*time.Second, time.Millisecond)
	got := grants(t, b, c, out, 40)
	require.InDelta(t, 32, count(got, "interactive"), 2, "4:1: %v", got)
}

func TestQueueQuietTenantWaitsAboutOneGrant(t *testing.T) {
	b, c := queueBroker(t, perSecond, []ClassContract{{Class: ClassInteractive, MaxWait: time.Hour, MaxDepth: 1000}}, nil)
	drain(t, b)
	out := make(chan outcome, 200)
	queueN(t, b, "noisy", 100, out)
	require.Equal(t, []string{"noisy", "noisy", "noisy", "noisy", "noisy"}, grants(t, b, c, out, 5), "alone, the noisy tenant gets everything")
	queueN(t, b, "quiet", 1, out)
	got := grants(t, b, c, out, 2)
	require.Contains(t, got, "quiet", "the quiet tenant is admitted within about one grant, ahead of 95 noisy ones: %v", got)
	require.Equal(t, "quiet", got[0])
}

func TestQueueBurstCreditIsBounded(t *testing.T) {
	for _, tt := range []struct {
		burst float64
		run   int // grants in a row the returning tenant may get
	}{{burst: 0, run: 2}, {burst: 3, run: 4}, {burst: 10, run: 11}} {
		t.Run(fmt.Sprint("burst ", tt.burst), func(t *testing.T) {
			b, c := queueBroker(t, perSecond, []ClassContract{{Class: ClassInteractive, MaxWait: time.Hour, MaxDepth: 1000}},
				[]TenantShare{{Tenant: "quiet", Burst: tt.burst}})
			drain(t, b)
			out := make(chan outcome, 200)
			queueN(t, b, "noisy", 90, out)
			queueN(t, b, "quiet", 2, out)
			require.Equal(t, 2, count(grants(t, b, c, out, 6), "quiet"))
			// The quiet tenant stays idle for 40 grants: credit it must not
			// bank beyond its burst.
			require.Equal(t, 40, count(grants(t, b, c, out, 40), "noisy"))
			queueN(t, b, "quiet", 30, out)
			got := grants(t, b, c, out, 30)
			run := 0
			for run < len(got) && got[run] == "quiet" {
				run++
			}
			require.LessOrEqual(t, run, tt.run, "a returning tenant runs ahead by its burst at most: %v", got)
			require.GreaterOrEqual(t, run, 1)
			// Then it alternates with the busy tenant: equal weights.
			rest := got[run:]
			require.InDelta(t, len(rest)/2, count(rest, "quiet"), 1, "%v", got)
		})
	}
}

func TestQueueWorkConserving(t *testing.T) {
	// The light tenant is far over its share (1 of 101), but nobody else
	// waits: every refill is its.
	b, c := queueBroker(t, perSecond, []ClassContract{{Class: ClassInteractive, MaxWait: time.Hour, MaxDepth: 1000}},
		[]TenantShare{{Tenant: "light", Weight: 1}, {Tenant: "heavy", Weight: 100}})
	drain(t, b)
	out := make(chan outcome, 20)
	queueN(t, b, "light", 10, out)
	require.Equal(t, 10, count(grants(t, b, c, out, 10), "light"))
}

func TestQueueHeadOfLine(t *testing.T) {
	t.Run("other tenants are not held up", func(t *testing.T) {
		b, c := queueBroker(t, append([]Spec{{Scope: ScopeTenant, Key: "a", Unit: UnitConcurrentRequests, Capacity: 1}}, perSecond...),
			[]ClassContract{{Class: ClassInteractive, MaxWait: time.Hour, MaxDepth: 100}}, nil)
		rq := tenantReq("a", endpoint2) // holds a's only slot, not the route
		held, _, _ := b.Reserve(t.Context(), rq)
		require.NotNil(t, held)
		drain(t, b)
		out := make(chan outcome, 2)
		queueN(t, b, "a", 1, out) // first in fair order, blocked by its own limit
		queueN(t, b, "b", 1, out)
		c.Advance(time.Second)
		b.Pump(c.Now())
		o := next(t, out)
		require.Equal(t, "b", o.tag, "b's buckets have room")
		require.NotNil(t, o.res)
		require.Equal(t, 1, depthOf(b, "a"))
	})
	t.Run("same tenant, same bucket: FIFO", func(t *testing.T) {
		b, c := queueBroker(t, []Spec{{Scope: ScopeTenant, Key: "a", Unit: UnitInputTokens, Window: WindowMinute, Capacity: 1000}},
			[]ClassContract{interactive}, nil)
		rq := tenantReq("a", endpoint)
		rq.Demand = Demand{InputTokens: 900}
		r, _, _ := b.Reserve(t.Context(), rq)
		require.NotNil(t, r)
		out := make(chan outcome, 2)
		rq.Demand = Demand{InputTokens: 500} // 400 short: 24 s
		spawn(t.Context(), b, rq, "big", out)
		waitDepth(t, b, "a", 1)
		rq.Demand = Demand{InputTokens: 50} // would fit now
		spawn(t.Context(), b, rq, "small", out)
		waitDepth(t, b, "a", 2)
		b.Pump(c.Now())
		none(t, out) // the small one does not take what the big one waits for
		c.Advance(24 * time.Second)
		b.Pump(c.Now())
		require.Equal(t, "big", next(t, out).tag)
		none(t, out)
		c.Advance(3 * time.Second)
		b.Pump(c.Now())
		o := next(t, out)
		require.Equal(t, "small", o.tag)
		require.Equal(t, 1, o.dec.Position, "one of its own tenant's requests was ahead")
	})
	t.Run("same tenant, other bucket: not held up", func(t *testing.T) {
		b, c := queueBroker(t, []Spec{{Scope: ScopeModelRoute, Key: endpoint2, Unit: UnitConcurrentRequests, Capacity: 1}},
			[]ClassContract{interactive}, nil)
		held, _, _ := b.Reserve(t.Context(), tenantReq("other", endpoint2))
		require.NotNil(t, held)
		// The provider asks to pause endpoint for 30 s.
		pr, _, _ := b.Reserve(t.Context(), tenantReq("other", endpoint))
		_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: pr.ID, Outcome: OutcomeRateLimited, Headers: []Header{{Name: "retry-after", Value: "30"}}})
		require.NoError(t, err)
		out := make(chan outcome, 2)
		spawn(t.Context(), b, tenantReq("a", endpoint), "paused", out)
		waitDepth(t, b, "a", 1)
		spawn(t.Context(), b, tenantReq("a", endpoint2), "slot", out)
		waitDepth(t, b, "a", 2)
		_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: held.ID})
		require.NoError(t, err)
		o := next(t, out)
		require.Equal(t, "slot", o.tag, "the head waits for a pause; the next needs another bucket")
		require.Equal(t, 1, o.dec.Position)
		c.Advance(31 * time.Second)
		b.Pump(c.Now())
		require.Equal(t, "paused", next(t, out).tag)
	})
}

func TestQueueEstimatedWaitOnlyWhenEnforceable(t *testing.T) {
	b, c := queueBroker(t, perSecond, []ClassContract{interactive}, nil)
	drain(t, b)
	out := make(chan outcome, 3)
	spawn(t.Context(), b, tenantReq("a", endpoint), "a1", out)
	waitDepth(t, b, "a", 1)
	spawn(t.Context(), b, tenantReq("a", endpoint), "a2", out)
	waitDepth(t, b, "a", 2)
	spawn(t.Context(), b, tenantReq("b", endpoint), "b", out)
	waitDepth(t, b, "b", 1)
	var got []outcome
	for range 3 {
		c.Advance(time.Second)
		b.Pump(c.Now())
		got = append(got, next(t, out))
	}
	for _, o := range got {
		if o.tag == "a1" {
			require.Equal(t, time.Second, o.dec.EstimatedWait, "alone on a refill")
		} else {
			require.Zero(t, o.dec.EstimatedWait, "%s waits behind others: no promise", o.tag)
		}
	}
}

func TestQueueIdempotentReattach(t *testing.T) {
	b, _ := queueBroker(t, []Spec{{Scope: ScopeTenant, Key: "a", Unit: UnitConcurrentRequests, Capacity: 1}}, []ClassContract{interactive}, nil)
	held, _, _ := b.Reserve(t.Context(), tenantReq("a", endpoint))
	out := make(chan outcome, 4)
	ahead := tenantReq("a", endpoint)
	ahead.IdempotencyKey = "ahead"
	spawn(t.Context(), b, ahead, "ahead", out)
	waitDepth(t, b, "a", 1)

	rq := tenantReq("a", endpoint)
	rq.IdempotencyKey = "k"
	first, cancel := context.WithCancel(t.Context())
	spawn(first, b, rq, "first", out)
	waitDepth(t, b, "a", 2)
	spawn(t.Context(), b, rq, "again", out)
	waiters := func() int {
		b.q.mu.Lock()
		defer b.q.mu.Unlock()
		return b.q.idem[idemKey{tenant: "a", key: "k"}].waiters
	}
	require.Eventually(t, func() bool { return waiters() == 2 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 2, depthOf(b, "a"), "joined, not queued again")

	// Another tenant's same key is another request.
	other := tenantReq("b", endpoint)
	other.IdempotencyKey = "k"
	res, _, _, err := b.ReserveWait(t.Context(), other)
	require.NoError(t, err)
	require.NotNil(t, res)

	cancel() // the first caller's RPC broke: the entry stays for the other
	o := next(t, out)
	require.Equal(t, "first", o.tag)
	require.ErrorIs(t, o.err, context.Canceled)
	require.Equal(t, 2, depthOf(b, "a"))

	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: held.ID})
	require.NoError(t, err)
	o = next(t, out)
	require.Equal(t, "ahead", o.tag, "the place was kept")
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: o.res.ID})
	require.NoError(t, err)
	o = next(t, out)
	require.Equal(t, "again", o.tag)
	require.NotNil(t, o.res)
	require.Equal(t, 1, o.dec.Position)

	// Once admitted, the key replays the reservation.
	res, ref, dec, err := b.ReserveWait(t.Context(), rq)
	require.NoError(t, err)
	require.Nil(t, ref)
	require.Nil(t, dec)
	require.Equal(t, o.res.ID, res.ID)
	require.Equal(t, QueueStats{Queued: 2, Admitted: 2}, b.QueueStats())
}

func TestQueueConfigValidation(t *testing.T) {
	for _, cfg := range []Config{
		{Classes: []ClassContract{{Class: ClassBatch, MaxWait: -time.Second}}},
		{Classes: []ClassContract{{Class: ClassBatch, MaxDepth: -1}}},
		{Classes: []ClassContract{{Class: ClassBatch, Weight: -1}}},
		{Classes: []ClassContract{{Class: ClassBatch, Overload: OverloadFallback}}},
		{Classes: []ClassContract{{Class: ClassInteractive}, {Class: ClassUnspecified}}},
		{Tenants: []TenantShare{{Tenant: "a", Burst: -1}}},
		{Tenants: []TenantShare{{Tenant: ""}}},
	} {
		_, err := New(cfg, Options{})
		require.ErrorIs(t, err, ErrInvalid, "%+v", cfg)
		b, err := New(Config{}, Options{})
		require.NoError(t, err)
		require.ErrorIs(t, b.Reconfigure(cfg), ErrInvalid)
	}
}

func TestQueueTimerAdmitsAndStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// The real clock and the broker's own dispatch timer: a bucket of 20 a
	// second refills one request every 50 ms.
	b, err := New(Config{
		Buckets: []Spec{{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowSecond, Capacity: 20}},
		Classes: []ClassContract{{Class: ClassInteractive, MaxWait: 10 * time.Second, MaxDepth: 10}},
	}, Options{})
	require.NoError(t, err)
	for range 20 {
		r, _, _ := b.Reserve(t.Context(), tenantReq("a", endpoint))
		require.NotNil(t, r)
	}
	out := make(chan outcome, 3)
	for range 3 {
		spawn(t.Context(), b, tenantReq("a", endpoint), "a", out)
	}
	for range 3 {
		o := next(t, out)
		require.NoError(t, o.err)
		require.NotNil(t, o.res, "%+v", o.ref)
	}
	require.Empty(t, b.QueueDepths())
	// goleak checks that the timer goroutine ended with the queue.
}

func TestRefusalCodes(t *testing.T) {
	b, _ := queueBroker(t, []Spec{
		{Scope: ScopeTenant, Key: "rate", Unit: UnitRequests, Window: WindowMinute, Capacity: 1},
		{Scope: ScopeTenant, Key: "daily", Unit: UnitRequests, Window: WindowDay, Capacity: 1},
		{Scope: ScopeTenant, Key: "spend", Unit: UnitUSD, Window: WindowHour, Capacity: 1},
		{Scope: ScopeTenant, Key: "dspend", Unit: UnitUSD, Window: WindowDay, Capacity: 1},
		{Scope: ScopeTenant, Key: "cc", Unit: UnitConcurrentRequests, Capacity: 1},
		{Scope: ScopeTenant, Key: "ramp", Unit: UnitRequests, Ramp: &Ramp{MaxIncrease: 0.5, Floor: 1}},
		{Scope: ScopeTenant, Key: "large", Unit: UnitInputTokens, Window: WindowMinute, Capacity: 10},
		{Scope: ScopeModelRoute, Key: endpoint2, Unit: UnitRequests, Window: WindowMinute, Capacity: 1000},
	}, nil, nil)
	// A route paused by the provider.
	pr, _, _ := b.Reserve(t.Context(), tenantReq("other", endpoint2))
	_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: pr.ID, Outcome: OutcomeUpstreamError, Headers: []Header{{Name: "retry-after", Value: "5"}}})
	require.NoError(t, err)
	for _, tt := range []struct {
		tenant, endpoint string
		demand           Demand
		code             string
		reason           RefusalReason
	}{
		{"rate", endpoint, one, CodeRateLimit, ReasonRetryableCapacity},
		{"daily", endpoint, one, CodeDailyQuota, ReasonNonRetryablePolicy},
		{"spend", endpoint, Demand{USD: 0.6}, CodeSpendLimit, ReasonRetryableCapacity},
		{"dspend", endpoint, Demand{USD: 0.6}, CodeSpendLimit, ReasonNonRetryablePolicy},
		{"cc", endpoint, one, CodeConcurrency, ReasonRetryableCapacity},
		{"ramp", endpoint, one, CodeRamp, ReasonRetryableCapacity},
		{"large", endpoint, Demand{InputTokens: 11}, CodeTooLarge, ReasonNonRetryableRequest},
		{"paused", endpoint2, one, CodeProviderPaused, ReasonRetryableOverload},
	} {
		t.Run(tt.code+"/"+tt.tenant, func(t *testing.T) {
			rq := tenantReq(tt.tenant, tt.endpoint)
			rq.Demand = tt.demand
			var ref *Refusal
			for range 2 {
				_, r, err := b.Reserve(t.Context(), rq)
				require.NoError(t, err)
				ref = r
				if ref != nil {
					break
				}
			}
			require.NotNil(t, ref)
			require.Equal(t, tt.code, ref.Code)
			require.Equal(t, tt.reason, ref.Reason)
			require.Equal(t, tt.code, ref.Proto().GetCode())
		})
	}
}

func TestQueueReattachAfterBrokenCall(t *testing.T) {
	spec := []Spec{{Scope: ScopeTenant, Key: "a", Unit: UnitConcurrentRequests, Capacity: 1}}
	grace := func(o *Options) { o.QueueReattach = 5 * time.Second }
	rq := tenantReq("a", endpoint)
	rq.IdempotencyKey = "k"
	queued := func(t *testing.T, b *Broker) (string, *Reservation) {
		held, _, _ := b.Reserve(t.Context(), tenantReq("a", endpoint))
		require.NotNil(t, held)
		ctx, cancel := context.WithCancel(t.Context())
		out := make(chan outcome, 1)
		spawn(ctx, b, rq, "first", out)
		waitDepth(t, b, "a", 1)
		b.q.mu.Lock()
		id := b.q.idem[idemKey{tenant: "a", key: "k"}].decision.ID
		b.q.mu.Unlock()
		cancel()
		require.ErrorIs(t, next(t, out).err, context.Canceled)
		require.Equal(t, 1, depthOf(b, "a"), "the place is kept for a while")
		return id, held
	}
	t.Run("re-attached", func(t *testing.T) {
		b, c := queueBroker(t, spec, []ClassContract{interactive}, nil, grace)
		id, held := queued(t, b)
		_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: held.ID})
		require.NoError(t, err)
		require.Equal(t, 0, b.Open(), "nobody to hand a reservation to: not admitted")
		c.Advance(4 * time.Second)
		b.Pump(c.Now())
		res, ref, dec, err := b.ReserveWait(t.Context(), rq)
		require.NoError(t, err)
		require.NotNil(t, res, "%+v", ref)
		require.Equal(t, id, dec.ID, "the same entry")
		require.Equal(t, 4*time.Second, dec.Waited)
		require.Equal(t, QueueStats{Queued: 1, Admitted: 1}, b.QueueStats())
	})
	t.Run("abandoned", func(t *testing.T) {
		b, c := queueBroker(t, spec, []ClassContract{interactive}, nil, grace)
		queued(t, b)
		require.Equal(t, t0.Add(time.Second), b.NextPump())
		c.Advance(5 * time.Second)
		b.Pump(c.Now())
		require.Empty(t, b.QueueDepths())
		require.Equal(t, QueueStats{Queued: 1, Cancelled: 1}, b.QueueStats())
	})
	t.Run("no key, no grace", func(t *testing.T) {
		b, _ := queueBroker(t, spec, []ClassContract{interactive}, nil, grace)
		_, _, _ = b.Reserve(t.Context(), tenantReq("a", endpoint))
		ctx, cancel := context.WithCancel(t.Context())
		out := make(chan outcome, 1)
		spawn(ctx, b, tenantReq("a", endpoint), "first", out)
		waitDepth(t, b, "a", 1)
		cancel()
		require.ErrorIs(t, next(t, out).err, context.Canceled)
		require.Empty(t, b.QueueDepths(), "nothing could re-attach to it")
	})
}

func TestQueueSurvivesFailover(t *testing.T) {
	specs := []Spec{
		{Scope: ScopeTenant, Key: "a", Unit: UnitConcurrentRequests, Capacity: 1},
		{Scope: ScopeTenant, Key: "b", Unit: UnitConcurrentRequests, Capacity: 1},
	}
	grace := func(o *Options) { o.QueueReattach = 10 * time.Second }
	old, _ := queueBroker(t, specs, []ClassContract{interactive}, nil, grace)
	heldA, _, _ := old.Reserve(t.Context(), tenantReq("a", endpoint))
	heldB, _, _ := old.Reserve(t.Context(), tenantReq("b", endpoint))
	require.NotNil(t, heldA)
	require.NotNil(t, heldB)
	keyed := func(tn, key string) ReserveRequest {
		rq := tenantReq(tn, endpoint)
		rq.IdempotencyKey = key
		return rq
	}
	out := make(chan outcome, 8)
	ctx, callsBreak := context.WithCancel(t.Context())
	spawn(ctx, old, keyed("a", "k1"), "k1", out)
	waitDepth(t, old, "a", 1)
	spawn(ctx, old, tenantReq("a", endpoint), "no key", out)
	waitDepth(t, old, "a", 2)
	spawn(ctx, old, keyed("a", "k2"), "k2", out)
	waitDepth(t, old, "a", 3)
	spawn(ctx, old, keyed("b", "k3"), "k3", out)
	waitDepth(t, old, "b", 1)
	ids := map[string]string{}
	old.q.mu.Lock()
	for ik, e := range old.q.idem {
		ids[ik.key] = e.decision.ID
	}
	old.q.mu.Unlock()
	blob := old.Snapshot()
	callsBreak() // the old owner goes away
	for range 4 {
		require.ErrorIs(t, next(t, out).err, context.Canceled)
	}

	t.Run("without a re-attach window nothing is restored", func(t *testing.T) {
		nb, _ := queueBroker(t, specs, []ClassContract{interactive}, nil)
		require.NoError(t, nb.Restore(blob, t0))
		require.Empty(t, nb.QueueDepths())
	})

	b, c := queueBroker(t, specs, []ClassContract{interactive}, nil, grace)
	c.Advance(2 * time.Second)
	require.NoError(t, b.Restore(blob, c.Now()))
	require.Equal(t, []QueueDepth{{Class: ClassInteractive, Tenant: "a", Depth: 2}, {Class: ClassInteractive, Tenant: "b", Depth: 1}},
		b.QueueDepths(), "the keyed requests")
	require.Equal(t, 2, b.Open(), "and the reservations")

	// The callers retry on the new owner, in another order.
	waiting := func(key, tn string) bool {
		b.q.mu.Lock()
		defer b.q.mu.Unlock()
		e := b.q.idem[idemKey{tenant: tn, key: key}]
		return e != nil && e.waiters == 1
	}
	spawn(t.Context(), b, keyed("a", "k2"), "k2", out)
	require.Eventually(t, func() bool { return waiting("k2", "a") }, 10*time.Second, time.Millisecond)
	_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: heldA.ID})
	require.NoError(t, err)
	b.Pump(c.Now())
	require.Equal(t, 1, b.Open(), "k1 is ahead of k2 and has not re-attached yet: its place is kept...")
	spawn(t.Context(), b, keyed("a", "k1"), "k1", out)
	o := next(t, out) // ...and is taken back when it does
	require.Equal(t, "k1", o.tag)
	require.NotNil(t, o.res)
	require.Equal(t, ids["k1"], o.dec.ID)
	require.Equal(t, 0, o.dec.Position)
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: o.res.ID})
	require.NoError(t, err)
	o = next(t, out)
	require.Equal(t, "k2", o.tag)
	require.Equal(t, ids["k2"], o.dec.ID)
	require.Equal(t, 2, o.dec.Position, "behind k1 and the request without a key")
	require.Equal(t, 2*time.Second, o.dec.Waited)

	// k3's caller never comes back.
	c.Advance(10 * time.Second)
	b.Pump(c.Now())
	require.Empty(t, b.QueueDepths())
	require.Equal(t, QueueStats{Queued: 3, Admitted: 2, Cancelled: 1}, b.QueueStats())
}

// TestCodeOf pins the order in which a refusal's code is derived: its own
// code, then its reason, its bucket and its unit.
func TestCodeOf(t *testing.T) {
	for _, tt := range []struct {
		ref  Refusal
		want string
	}{
		{Refusal{Code: CodeQueueFull, Reason: ReasonRetryableCapacity}, CodeQueueFull},
		{Refusal{Reason: ReasonNonRetryableRequest, Unit: UnitInputTokens}, CodeTooLarge},
		{Refusal{Reason: ReasonNonRetryablePolicy, Unit: UnitRequests}, CodeDailyQuota},
		{Refusal{Reason: ReasonNonRetryablePolicy, Unit: UnitUSD}, CodeSpendLimit},
		{Refusal{Reason: ReasonDeadline}, CodeQueueDeadline},
		{Refusal{Reason: ReasonRetryableOverload, BucketID: "pause:a/m"}, CodeProviderPaused},
		{Refusal{Reason: ReasonRetryableCapacity, BucketID: "pause:a/m"}, CodeProviderPaused},
		{Refusal{Reason: ReasonRetryableCapacity, BucketID: "tenant:t:requests:ramp", Unit: UnitRequests}, CodeRamp},
		{Refusal{Reason: ReasonRetryableCapacity, BucketID: bucketID(ScopeModelRoute, "alpha/m1", UnitRequests, WindowNone, RuleRamp, SourceLearned), Unit: UnitRequests}, CodeRamp},
		{Refusal{Reason: ReasonRetryableCapacity, BucketID: "model_route:alpha/m1:usd:ramp", Unit: UnitUSD}, CodeSpendLimit},
		{Refusal{Reason: ReasonRetryableCapacity, Unit: UnitConcurrentRequests}, CodeConcurrency},
		{Refusal{Reason: ReasonRetryableCapacity, Unit: UnitUSD}, CodeSpendLimit},
		{Refusal{Reason: ReasonRetryableCapacity, Unit: UnitInputTokens}, CodeRateLimit},
		{Refusal{Reason: ReasonNonRetryablePolicy, Unit: UnitConcurrentRequests}, CodeDailyQuota},
		{Refusal{Reason: ReasonDeadline, BucketID: "pause:a/m", Unit: UnitUSD}, CodeQueueDeadline},
		{Refusal{Reason: ReasonRetryableCapacity, BucketID: "pause:a/m", Unit: UnitConcurrentRequests}, CodeProviderPaused},
	} {
		require.Equal(t, tt.want, CodeOf(&tt.ref), "%+v", tt.ref)
	}
}

// TestDegrades pins which refusals may name a fallback model: capacity on
// the provider's side, never the caller's own limits nor a refusal that
// cannot be retried.
func TestDegrades(t *testing.T) {
	for _, tt := range []struct {
		reason RefusalReason
		scope  Scope
		want   bool
	}{
		{ReasonRetryableCapacity, ScopeModelRoute, true},
		{ReasonRetryableOverload, ScopeProviderProject, true},
		{ReasonDeadline, ScopeProviderWorkspace, true},
		{ReasonRetryableCapacity, ScopeUnspecified, true},
		{ReasonRetryableCapacity, ScopeTenant, false},
		{ReasonDeadline, ScopeAPIKey, false},
		{ReasonRetryableOverload, ScopePartner, false},
		{ReasonNonRetryablePolicy, ScopeModelRoute, false},
		{ReasonNonRetryableRequest, ScopeModelRoute, false},
		{ReasonUnspecified, ScopeModelRoute, false},
	} {
		require.Equal(t, tt.want, Degrades(tt.reason, tt.scope), "%v %v", tt.reason, tt.scope)
	}
}
