package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// step is one moment of a bucket scenario: move the clock, try some
// reservations, expect how many are admitted.
type step struct {
	advance  time.Duration
	at       time.Time // absolute, instead of advance
	attempts int
	demand   Demand
	admitted int
	reason   RefusalReason // of the last refusal, when some are refused
	retry    time.Duration // expected retry_after of the last refusal, when > 0
	reset    time.Time     // expected reset of the last refusal, when set
}

func runSteps(t *testing.T, specs []Spec, steps []step, opts ...func(*Options)) *Broker {
	t.Helper()
	b, c := newBroker(t, specs, opts...)
	for i, s := range steps {
		if !s.at.IsZero() {
			c.Set(s.at)
		}
		c.Advance(s.advance)
		d := s.demand
		if d == (Demand{}) {
			d = one
		}
		n, ref, _ := reserveN(t, b, s.attempts, d)
		require.Equal(t, s.admitted, n, "step %d admitted", i)
		if n < s.attempts {
			require.NotNil(t, ref)
			require.Equal(t, s.reason, ref.Reason, "step %d reason: %s", i, ref.Message)
			if s.retry > 0 {
				require.InDelta(t, float64(s.retry), float64(ref.RetryAfter), float64(time.Millisecond), "step %d retry", i)
			}
			if !s.reset.IsZero() {
				require.True(t, s.reset.Equal(ref.Reset), "step %d reset %s, want %s", i, ref.Reset, s.reset)
			}
		}
	}
	return b
}

func TestTokenBucket(t *testing.T) {
	perMinute := func(capacity, burst float64) []Spec {
		return []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: capacity, Burst: burst}}
	}
	tests := []struct {
		name  string
		specs []Spec
		steps []step
	}{
		{name: "a full bucket admits its capacity, then refuses until one unit refilled",
			specs: perMinute(10, 0),
			steps: []step{{attempts: 12, admitted: 10, reason: ReasonRetryableCapacity, retry: 6 * time.Second, reset: t0.Add(6 * time.Second)}}},
		{name: "refill is continuous: half a window gives half the capacity",
			specs: perMinute(10, 0),
			steps: []step{{attempts: 10, admitted: 10}, {advance: 30 * time.Second, attempts: 6, admitted: 5, reason: ReasonRetryableCapacity, retry: 6 * time.Second}}},
		{name: "idle time never refills above capacity",
			specs: perMinute(10, 0),
			steps: []step{{attempts: 1, admitted: 1}, {advance: time.Hour, attempts: 11, admitted: 10, reason: ReasonRetryableCapacity}}},
		{name: "burst admits capacity+burst at once, then the steady rate",
			specs: perMinute(10, 5),
			steps: []step{{attempts: 16, admitted: 15, reason: ReasonRetryableCapacity}, {advance: 6 * time.Second, attempts: 2, admitted: 1, reason: ReasonRetryableCapacity}}},
		{name: "per second",
			specs: []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowSecond, Capacity: 4}},
			steps: []step{{attempts: 5, admitted: 4, reason: ReasonRetryableCapacity, retry: 250 * time.Millisecond}, {advance: 500 * time.Millisecond, attempts: 3, admitted: 2, reason: ReasonRetryableCapacity}}},
		{name: "tokens: a demand above capacity+burst is non-retryable",
			specs: []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitInputTokens, Window: WindowMinute, Capacity: 1000, Burst: 100}},
			steps: []step{{attempts: 1, demand: Demand{InputTokens: 1101}, admitted: 0, reason: ReasonNonRetryableRequest}, {attempts: 1, demand: Demand{InputTokens: 1100}, admitted: 1}}},
		{name: "total tokens count input plus output",
			specs: []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitTotalTokens, Window: WindowHour, Capacity: 1000}},
			steps: []step{{attempts: 3, demand: Demand{InputTokens: 300, OutputTokens: 100}, admitted: 2, reason: ReasonRetryableCapacity, retry: 12 * time.Minute}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, tt.specs, tt.steps)
		})
	}
}

func TestDailyReset(t *testing.T) {
	daily := func(resetAt time.Duration) []Spec {
		return []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowDay, Capacity: 3, ResetAt: resetAt}}
	}
	midnight := time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		specs []Spec
		steps []step
	}{
		{name: "used up until midnight UTC, then full again",
			specs: daily(0),
			steps: []step{
				{at: midnight.Add(-time.Minute), attempts: 4, admitted: 3, reason: ReasonNonRetryablePolicy, retry: time.Minute, reset: midnight},
				{advance: 59 * time.Second, attempts: 1, admitted: 0, reason: ReasonNonRetryablePolicy, retry: time.Second},
				{advance: time.Second, attempts: 4, admitted: 3, reason: ReasonNonRetryablePolicy, retry: 24 * time.Hour},
			}},
		{name: "a provider-defined reset time of 07:00 UTC",
			specs: daily(7 * time.Hour),
			steps: []step{
				{at: midnight.Add(6*time.Hour + 59*time.Minute), attempts: 4, admitted: 3, reason: ReasonNonRetryablePolicy, reset: midnight.Add(7 * time.Hour)},
				{at: midnight.Add(7 * time.Hour), attempts: 3, admitted: 3},
				{at: midnight.Add(24*time.Hour + 6*time.Hour), attempts: 1, admitted: 0, reason: ReasonNonRetryablePolicy, reset: midnight.Add(31 * time.Hour)},
				{at: midnight.Add(31 * time.Hour), attempts: 1, admitted: 1},
			}},
		{name: "no refill within the day",
			specs: daily(0),
			steps: []step{{attempts: 3, admitted: 3}, {advance: 11 * time.Hour, attempts: 1, admitted: 0, reason: ReasonNonRetryablePolicy, retry: time.Hour}}},
		{name: "several idle days reset once",
			specs: daily(0),
			steps: []step{{attempts: 3, admitted: 3}, {advance: 72 * time.Hour, attempts: 4, admitted: 3, reason: ReasonNonRetryablePolicy}}},
		{name: "more than a day's quota is non-retryable",
			specs: daily(0),
			steps: []step{{attempts: 1, demand: Demand{Requests: 4}, admitted: 0, reason: ReasonNonRetryableRequest}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, tt.specs, tt.steps)
		})
	}
}

func TestSpendWindow(t *testing.T) {
	tests := []struct {
		name  string
		spec  Spec
		steps []step
	}{
		{name: "usd per minute refills like a token bucket",
			spec: Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitUSD, Window: WindowMinute, Capacity: 1.0},
			steps: []step{
				{attempts: 4, demand: Demand{USD: 0.3}, admitted: 3, reason: ReasonRetryableCapacity, retry: 12 * time.Second},
				{advance: 12 * time.Second, attempts: 1, demand: Demand{USD: 0.3}, admitted: 1},
			}},
		{name: "usd per day is a daily spend limit",
			spec: Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitUSD, Window: WindowDay, Capacity: 5},
			steps: []step{
				{attempts: 3, demand: Demand{USD: 2}, admitted: 2, reason: ReasonNonRetryablePolicy, retry: 12 * time.Hour},
				{attempts: 1, demand: Demand{USD: 1}, admitted: 1},
				{attempts: 1, demand: Demand{Requests: 1}, admitted: 0, reason: ReasonNonRetryablePolicy}, // no spend estimate cannot slip past a used-up limit
			}},
		{name: "fractional dollars that exactly fill the window are admitted",
			spec:  Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitUSD, Window: WindowHour, Capacity: 0.3},
			steps: []step{{attempts: 4, demand: Demand{USD: 0.1}, admitted: 3, reason: ReasonRetryableCapacity}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, []Spec{tt.spec}, tt.steps)
		})
	}

	t.Run("reconcile gives unused spend back", func(t *testing.T) {
		b, _ := newBroker(t, []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitUSD, Window: WindowDay, Capacity: 1}})
		n, _, rs := reserveN(t, b, 3, Demand{USD: 0.4})
		require.Equal(t, 2, n)
		_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: rs[0].ID, Usage: Usage{CostUSD: 0.1}, Outcome: OutcomeOK})
		require.NoError(t, err)
		require.InDelta(t, 0.5, level(t, b, "tenant:acme:usd:day"), 1e-12)
		n, _, _ = reserveN(t, b, 2, Demand{USD: 0.4})
		require.Equal(t, 1, n)
	})
}

func TestConcurrency(t *testing.T) {
	spec := []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 2}}
	tests := []struct {
		name  string
		close func(t *testing.T, b *Broker, c *clock, r *Reservation)
	}{
		{name: "reconcile releases the slot", close: func(t *testing.T, b *Broker, _ *clock, r *Reservation) {
			_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Outcome: OutcomeOK})
			require.NoError(t, err)
		}},
		{name: "a failed call releases the slot too", close: func(t *testing.T, b *Broker, _ *clock, r *Reservation) {
			_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Outcome: OutcomeConnectError})
			require.NoError(t, err)
		}},
		{name: "expiry releases the slot", close: func(t *testing.T, b *Broker, c *clock, _ *Reservation) {
			c.Advance(2 * time.Minute)
			require.Equal(t, 2, b.Expire(c.Now()))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := newBroker(t, spec)
			n, ref, rs := reserveN(t, b, 3, one)
			require.Equal(t, 2, n)
			require.Equal(t, ReasonRetryableCapacity, ref.Reason)
			require.Equal(t, time.Second, ref.RetryAfter)
			require.True(t, ref.Reset.IsZero(), "a concurrency bucket cannot know when it frees")
			c.Advance(time.Hour - 3*time.Minute) // time alone frees nothing (TTL is 2m, but nobody sweeps)
			require.Equal(t, 0.0, level(t, b, "tenant:acme:concurrent_requests"))
			c.Set(t0)
			tt.close(t, b, c, rs[0])
			n, _, _ = reserveN(t, b, 1, one)
			require.Equal(t, 1, n)
		})
	}
}

func TestRamp(t *testing.T) {
	ramp := []Spec{{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Ramp: &Ramp{MaxIncrease: 0.5, Floor: 10}}}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "the floor from idle, then +50% per minute", steps: []step{
			{attempts: 11, admitted: 10, reason: ReasonRetryableCapacity, retry: time.Minute, reset: t0.Add(time.Minute)},
			{advance: time.Minute, attempts: 16, admitted: 15, reason: ReasonRetryableCapacity},
			{advance: time.Minute, attempts: 23, admitted: 22, reason: ReasonRetryableCapacity}, // 1.5 × 15 = 22.5
			{advance: time.Minute, attempts: 40, admitted: 33, reason: ReasonRetryableCapacity}, // 1.5 × 22 = 33
		}},
		{name: "a quiet minute caps the next one low", steps: []step{
			{attempts: 10, admitted: 10},
			{advance: time.Minute, attempts: 2, admitted: 2},
			{advance: time.Minute, attempts: 11, admitted: 10, reason: ReasonRetryableCapacity}, // max(10, 3)
		}},
		{name: "an idle minute resets to the floor", steps: []step{
			{attempts: 10, admitted: 10},
			{advance: time.Minute, attempts: 15, admitted: 15},
			{advance: 2 * time.Minute, attempts: 11, admitted: 10, reason: ReasonRetryableCapacity},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, ramp, tt.steps)
		})
	}

	t.Run("a window and a ramp make two buckets", func(t *testing.T) {
		b := runSteps(t, []Spec{{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowMinute, Capacity: 100, Ramp: &Ramp{MaxIncrease: 1}}},
			[]step{{attempts: 11, admitted: 10, reason: ReasonRetryableCapacity}}) // floor defaults to capacity/10
		require.Len(t, b.tab.Load().buckets, 2)
		require.Equal(t, 90.0, level(t, b, "model_route:alpha/m1:requests:minute"))
		require.Equal(t, 10.0, level(t, b, "model_route:alpha/m1:requests:ramp"))
	})
}

func TestSpecValidation(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{name: "no key", spec: Spec{Scope: ScopeTenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 1}, want: "needs a key"},
		{name: "bad app key", spec: Spec{Scope: ScopeApp, Key: "chat", Unit: UnitRequests, Window: WindowMinute, Capacity: 1}, want: "<tenant>/<app>"},
		{name: "concurrency with a window", spec: Spec{Scope: ScopeTenant, Key: "a", Unit: UnitConcurrentRequests, Window: WindowMinute, Capacity: 1}, want: "no window"},
		{name: "rate without window", spec: Spec{Scope: ScopeTenant, Key: "a", Unit: UnitRequests, Capacity: 1}, want: "needs a window"},
		{name: "zero capacity", spec: Spec{Scope: ScopeTenant, Key: "a", Unit: UnitRequests, Window: WindowMinute}, want: "capacity"},
		{name: "negative burst", spec: Spec{Scope: ScopeTenant, Key: "a", Unit: UnitRequests, Window: WindowMinute, Capacity: 1, Burst: -1}, want: "burst"},
		{name: "reset time on a minute window", spec: Spec{Scope: ScopeTenant, Key: "a", Unit: UnitRequests, Window: WindowMinute, Capacity: 1, ResetAt: time.Hour}, want: "daily"},
		{name: "reset time past a day", spec: Spec{Scope: ScopeTenant, Key: "a", Unit: UnitRequests, Window: WindowDay, Capacity: 1, ResetAt: 25 * time.Hour}, want: "within one day"},
		{name: "ramp-only without floor", spec: Spec{Scope: ScopeTenant, Key: "a", Unit: UnitRequests, Ramp: &Ramp{MaxIncrease: 0.5}}, want: "floor"},
		{name: "ramp without increase", spec: Spec{Scope: ScopeTenant, Key: "a", Unit: UnitRequests, Ramp: &Ramp{Floor: 1}}, want: "max increase"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{Buckets: []Spec{tt.spec}}, Options{})
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tt.want)
		})
	}
	t.Run("duplicates", func(t *testing.T) {
		s := Spec{Scope: ScopeTenant, Key: "a", Unit: UnitRequests, Window: WindowMinute, Capacity: 1}
		_, err := New(Config{Buckets: []Spec{s, s}}, Options{})
		require.ErrorContains(t, err, "also configured by spec 0")
	})
	t.Run("reset time", func(t *testing.T) {
		d, err := ParseResetAt("07:30")
		require.NoError(t, err)
		require.Equal(t, 7*time.Hour+30*time.Minute, d)
		_, err = ParseResetAt("25:00")
		require.ErrorIs(t, err, ErrInvalid)
	})
}
