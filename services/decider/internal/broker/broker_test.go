package broker

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// hierarchy is one bucket per scope, all generous, on the identity `who`
// and the route `endpoint`.
func hierarchy() []Spec {
	return []Spec{
		{Scope: ScopeAPIKey, Key: keyID, Unit: UnitRequests, Window: WindowMinute, Capacity: 100},
		{Scope: ScopeApp, Key: tenant + "/chat/prod", Unit: UnitTotalTokens, Window: WindowMinute, Capacity: 100000},
		{Scope: ScopeTenant, Key: tenant, Unit: UnitInputTokens, Window: WindowMinute, Capacity: 50000},
		{Scope: ScopePartner, Key: "resell", Unit: UnitConcurrentRequests, Capacity: 50},
		{Scope: ScopeProviderWorkspace, Key: "alpha", Unit: UnitOutputTokens, Window: WindowMinute, Capacity: 100000},
		{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitInputTokens, Window: WindowMinute, Capacity: 1000},
		{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowMinute, Capacity: 600},
	}
}

func TestReserveChargesEveryScope(t *testing.T) {
	b, _ := newBroker(t, hierarchy())
	r, ref, err := b.Reserve(t.Context(), req(Demand{InputTokens: 100, OutputTokens: 50, USD: 0.01}))
	require.NoError(t, err)
	require.Nil(t, ref)
	var got []string
	for _, c := range r.Charges {
		got = append(got, c.BucketID+"="+strconv.FormatFloat(c.Amount, 'f', -1, 64))
	}
	require.Equal(t, []string{
		"api_key:key-0123456789ab:requests:minute=1",
		"app:acme/chat/prod:total_tokens:minute=150",
		"tenant:acme:input_tokens:minute=100",
		"partner:resell:concurrent_requests=1",
		"provider_workspace:alpha:output_tokens:minute=50",
		"provider_project:alpha:input_tokens:minute=100",
		"model_route:alpha/m1:requests:minute=1",
	}, got, "narrowest scope first")
	require.Regexp(t, `^s[0-3][0-9a-f][0-9a-f]{32}$`, r.ID, "the shard, then 128 random bits")
	require.Equal(t, t0, r.Created)
	require.Equal(t, t0.Add(2*time.Minute), r.Expires)

	t.Run("an endpoint outside the configuration still charges its provider's shared buckets", func(t *testing.T) {
		rq := req(Demand{InputTokens: 10})
		rq.EndpointID = "alpha/other-model"
		r, _, err := b.Reserve(t.Context(), rq)
		require.NoError(t, err)
		require.Len(t, r.Charges, 6)
		require.Equal(t, "provider_project:alpha:input_tokens:minute", r.Charges[5].BucketID)
	})
}

func nan() float64 { return math.NaN() }

func TestAllOrNothing(t *testing.T) {
	specs := []Spec{
		{Scope: ScopeAPIKey, Key: keyID, Unit: UnitRequests, Window: WindowMinute, Capacity: 100},
		{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 10},
		{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitInputTokens, Window: WindowMinute, Capacity: 1000},
	}
	tests := []struct {
		name   string
		first  Demand // admitted
		second Demand // refused by the third bucket
		reason RefusalReason
	}{
		{name: "third bucket full", first: Demand{InputTokens: 600}, second: Demand{InputTokens: 600}, reason: ReasonRetryableCapacity},
		{name: "third bucket can never hold it", first: Demand{InputTokens: 1}, second: Demand{InputTokens: 5000}, reason: ReasonNonRetryableRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := newBroker(t, specs)
			_, ref, err := b.Reserve(t.Context(), req(tt.first))
			require.NoError(t, err)
			require.Nil(t, ref)
			before := []float64{level(t, b, "api_key:key-0123456789ab:requests:minute"), level(t, b, "tenant:acme:concurrent_requests")}
			require.Equal(t, []float64{99, 9}, before)

			r, ref, err := b.Reserve(t.Context(), req(tt.second))
			require.NoError(t, err)
			require.Nil(t, r)
			require.Equal(t, tt.reason, ref.Reason)
			require.Equal(t, ScopeModelRoute, ref.Scope)
			require.Equal(t, UnitInputTokens, ref.Unit)
			require.Equal(t, "model_route:alpha/m1:input_tokens:minute", ref.BucketID)
			after := []float64{level(t, b, "api_key:key-0123456789ab:requests:minute"), level(t, b, "tenant:acme:concurrent_requests")}
			require.Equal(t, before, after, "the first two buckets are back where they were")
			require.Equal(t, 1, b.Open())
		})
	}
}

func TestIdempotency(t *testing.T) {
	specs := []Spec{
		{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 10},
		{Scope: ScopeTenant, Key: "other", Unit: UnitRequests, Window: WindowMinute, Capacity: 10},
	}
	b, c := newBroker(t, specs)
	rq := req(one)
	rq.IdempotencyKey = "idem-1"
	r1, _, err := b.Reserve(t.Context(), rq)
	require.NoError(t, err)
	r2, _, err := b.Reserve(t.Context(), rq)
	require.NoError(t, err)
	require.Equal(t, r1.ID, r2.ID, "the same reservation")
	require.Equal(t, 9.0, level(t, b, "tenant:acme:requests:minute"), "charged once")

	other := rq
	other.Identity.TenantID = "other"
	r3, _, err := b.Reserve(t.Context(), other)
	require.NoError(t, err)
	require.NotEqual(t, r1.ID, r3.ID, "keys are scoped by tenant")

	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r1.ID, Outcome: OutcomeOK})
	require.NoError(t, err)
	r4, _, err := b.Reserve(t.Context(), rq)
	require.NoError(t, err)
	require.NotEqual(t, r1.ID, r4.ID, "a reconciled reservation is no longer returned")

	c.Advance(3 * time.Minute) // r4 expired, not yet swept
	r5, _, err := b.Reserve(t.Context(), rq)
	require.NoError(t, err)
	require.NotEqual(t, r4.ID, r5.ID, "an expired reservation is no longer returned")
}

func TestExpiry(t *testing.T) {
	specs := []Spec{
		{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 3},
		{Scope: ScopeTenant, Key: tenant, Unit: UnitInputTokens, Window: WindowDay, Capacity: 1000},
	}
	tests := []struct {
		name       string
		refund     bool
		wantTokens float64
	}{
		{name: "concurrency released, tokens kept as consumed", refund: false, wantTokens: 700},
		{name: "RefundOnExpiry gives tokens back too", refund: true, wantTokens: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := newBroker(t, specs, func(o *Options) { o.RefundOnExpiry = tt.refund })
			for _, ttl := range []time.Duration{10 * time.Second, 20 * time.Second, time.Hour} {
				rq := req(Demand{InputTokens: 100})
				rq.TTL = ttl
				_, ref, err := b.Reserve(t.Context(), rq)
				require.NoError(t, err)
				require.Nil(t, ref)
			}
			require.Equal(t, 0, b.Expire(c.Now()))
			c.Advance(15 * time.Second)
			require.Equal(t, 1, b.Expire(c.Now()))
			require.Equal(t, 1.0, level(t, b, "tenant:acme:concurrent_requests"))
			c.Advance(10 * time.Second)
			require.Equal(t, 1, b.Expire(c.Now()))
			c.Advance(15 * time.Minute)
			require.Equal(t, 1, b.Expire(c.Now()), "the 1h TTL is capped at MaxTTL (15m)")
			require.Equal(t, 3.0, level(t, b, "tenant:acme:concurrent_requests"))
			require.Equal(t, tt.wantTokens, level(t, b, "tenant:acme:input_tokens:day"))
			require.Equal(t, 0, b.Open())
		})
	}

	t.Run("lazy: a refusal sweeps expired reservations first", func(t *testing.T) {
		b, c := newBroker(t, specs[:1])
		n, _, _ := reserveN(t, b, 3, one)
		require.Equal(t, 3, n)
		c.Advance(2 * time.Minute)
		n, _, _ = reserveN(t, b, 1, one)
		require.Equal(t, 1, n)
		require.Equal(t, 1, b.Open())
	})
}

// A limit's own refund_on_expiry decides for its buckets, whatever the
// broker's default: here the tenant's daily tokens are refunded and its
// per-minute requests kept, then the other way round; a late
// reconciliation charges each as its rule says.
func TestExpiryRefundPerLimit(t *testing.T) {
	yes, no := true, false
	for _, dflt := range []bool{false, true} {
		t.Run(fmt.Sprintf("default %v", dflt), func(t *testing.T) {
			specs := []Spec{
				{Scope: ScopeTenant, Key: tenant, Unit: UnitInputTokens, Window: WindowDay, Capacity: 1000, RefundOnExpiry: &yes},
				{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowDay, Capacity: 10, RefundOnExpiry: &no},
				{Scope: ScopeTenant, Key: tenant, Unit: UnitOutputTokens, Window: WindowDay, Capacity: 1000},
			}
			b, c := newBroker(t, specs, func(o *Options) { o.RefundOnExpiry = dflt })
			rq := req(Demand{InputTokens: 100, OutputTokens: 50})
			rq.TTL = 10 * time.Second
			r, ref, err := b.Reserve(t.Context(), rq)
			require.NoError(t, err)
			require.Nil(t, ref)
			c.Advance(15 * time.Second)
			require.Equal(t, 1, b.Expire(c.Now()))
			require.Equal(t, 1000.0, level(t, b, "tenant:acme:input_tokens:day"), "refund_on_expiry: true")
			require.Equal(t, 9.0, level(t, b, "tenant:acme:requests:day"), "refund_on_expiry: false")
			wantOut := 950.0
			if dflt {
				wantOut = 1000
			}
			require.Equal(t, wantOut, level(t, b, "tenant:acme:output_tokens:day"), "no setting: the broker's default")

			// The edge was alive after all: its late reconciliation charges
			// what was used, from wherever expiry left each bucket.
			_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Usage: Usage{InputTokens: 80, OutputTokens: 20}})
			require.NoError(t, err)
			require.Equal(t, 920.0, level(t, b, "tenant:acme:input_tokens:day"))
			require.Equal(t, 9.0, level(t, b, "tenant:acme:requests:day"))
			require.Equal(t, 980.0, level(t, b, "tenant:acme:output_tokens:day"))
		})
	}
}

func TestReconcile(t *testing.T) {
	specs := []Spec{
		{Scope: ScopeTenant, Key: tenant, Unit: UnitInputTokens, Window: WindowMinute, Capacity: 1000},
		{Scope: ScopeTenant, Key: tenant, Unit: UnitOutputTokens, Window: WindowDay, Capacity: 1000},
		{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 10},
		{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 5},
	}
	const (
		in  = "tenant:acme:input_tokens:minute"
		out = "tenant:acme:output_tokens:day"
		rq  = "tenant:acme:requests:minute"
		cc  = "tenant:acme:concurrent_requests"
	)
	tests := []struct {
		name     string
		usage    Usage
		advance  time.Duration
		wantErr  error
		released map[string]float64
		levels   map[string]float64
	}{
		{name: "unused estimate is given back", usage: Usage{InputTokens: 200, OutputTokens: 100, Reported: true},
			released: map[string]float64{in: 300, out: 400, rq: 0, cc: 1},
			levels:   map[string]float64{in: 800, out: 900, rq: 9, cc: 5}},
		{name: "an overrun is charged and may push a bucket below zero", usage: Usage{InputTokens: 1500, OutputTokens: 1200},
			released: map[string]float64{in: -1000, out: -700, rq: 0, cc: 1},
			levels:   map[string]float64{in: -500, out: -200, rq: 9, cc: 5}},
		{name: "a daily bucket whose day rolled over is not settled", usage: Usage{InputTokens: 0, OutputTokens: 0}, advance: 12 * time.Hour,
			released: map[string]float64{in: 500, out: 0, rq: 0, cc: 1},
			levels:   map[string]float64{in: 1000, out: 1000, rq: 10, cc: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := newBroker(t, specs, func(o *Options) { o.MaxTTL = 24 * time.Hour })
			r := req(Demand{InputTokens: 500, OutputTokens: 500})
			r.TTL = 24 * time.Hour
			res, _, err := b.Reserve(t.Context(), r)
			require.NoError(t, err)
			c.Advance(tt.advance)
			st, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Usage: tt.usage, Outcome: OutcomeOK})
			require.NoError(t, err)
			got := map[string]float64{}
			for _, ch := range st.Released {
				got[ch.BucketID] = ch.Amount
			}
			require.Equal(t, tt.released, got)
			for id, want := range tt.levels {
				require.InDelta(t, want, level(t, b, id), 1e-9, id)
			}
		})
	}

	t.Run("an overrun refuses until refilled", func(t *testing.T) {
		b, c := newBroker(t, specs[:1])
		res, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 100}))
		require.NoError(t, err)
		_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Usage: Usage{InputTokens: 1600}})
		require.NoError(t, err)
		n, ref, _ := reserveN(t, b, 1, Demand{InputTokens: 1})
		require.Equal(t, 0, n)
		require.InDelta(t, float64(36*time.Second+60*time.Millisecond), float64(ref.RetryAfter), float64(time.Millisecond)) // from -600 to +1 at 1000/min
		c.Advance(37 * time.Second)
		n, _, _ = reserveN(t, b, 1, Demand{InputTokens: 1})
		require.Equal(t, 1, n)
	})

	t.Run("second reconcile, unknown and malformed ids are NotFound and change nothing; an expired one is settled late, once", func(t *testing.T) {
		b, c := newBroker(t, specs)
		res, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 500}))
		require.NoError(t, err)
		_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Usage: Usage{InputTokens: 100}})
		require.NoError(t, err)
		require.Equal(t, 900.0, level(t, b, in))
		_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Usage: Usage{InputTokens: 0}})
		require.ErrorIs(t, err, ErrNotFound)
		require.Equal(t, 900.0, level(t, b, in), "no double release")
		require.Equal(t, 5.0, level(t, b, cc))

		require.ErrorIs(t, err, ErrAlreadyReconciled)

		exp, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 100, OutputTokens: 100}))
		require.NoError(t, err)
		c.Advance(2 * time.Minute)
		require.Equal(t, 1, b.Expire(c.Now()))
		before := level(t, b, out)
		st, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: exp.ID, Usage: Usage{OutputTokens: 250}})
		require.NoError(t, err, "an expired reservation is still reconciled")
		require.True(t, st.Late)
		require.Equal(t, 5.0, level(t, b, cc), "expiry released the slot once")
		require.InDelta(t, before-150, level(t, b, out), 1e-9, "the overrun past the reservation is charged")
		_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: exp.ID, Usage: Usage{OutputTokens: 250}})
		require.ErrorIs(t, err, ErrAlreadyReconciled)
		require.ErrorIs(t, err, ErrNotFound)
		require.Equal(t, 5.0, level(t, b, cc))
		require.InDelta(t, before-150, level(t, b, out), 1e-9, "charged once")

		for _, id := range []string{"", "nope", "r" + strings.Repeat("0", 30), "rzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "r000000000000ff0000000000000001",
			"s00" + strings.Repeat("0", 32), "sff" + strings.Repeat("0", 32), "s0z" + strings.Repeat("0", 32), r2id(exp.ID)} {
			_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: id})
			require.ErrorIs(t, err, ErrNotFound, id)
		}
	})

	t.Run("invalid usage is refused and keeps the reservation", func(t *testing.T) {
		b, _ := newBroker(t, specs)
		res, _, err := b.Reserve(t.Context(), req(one))
		require.NoError(t, err)
		_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Usage: Usage{InputTokens: -1}})
		require.ErrorIs(t, err, ErrInvalid)
		require.Equal(t, 1, b.Open())
	})
}

func TestInvalidReserve(t *testing.T) {
	b, _ := newBroker(t, nil)
	for _, d := range []Demand{{InputTokens: -1}, {OutputTokens: -1}, {Requests: -1}, {USD: -0.1}, {USD: nan()}} {
		_, _, err := b.Reserve(t.Context(), req(d))
		require.ErrorIs(t, err, ErrInvalid)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err := b.Reserve(ctx, req(one))
	require.ErrorIs(t, err, context.Canceled)
	r, ref, err := b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	require.Nil(t, ref)
	require.Empty(t, r.Charges, "no bucket applies: admitted")
}

func TestConservative(t *testing.T) {
	tests := []struct {
		name    string
		spec    Spec
		during  int           // admitted in learning mode
		retry   time.Duration // retry_after of the first refusal in learning mode
		after   int           // admitted once it ended (1 minute later)
		release bool          // reconcile everything before it ends
	}{
		{name: "token bucket: half of 10 per minute", spec: Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 10},
			during: 5, retry: 6 * time.Second, after: 10},
		{name: "concurrency: half of 4 slots", spec: Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 4},
			during: 2, retry: time.Second, after: 4, release: true},
		{name: "daily: half of the day's quota", spec: Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowDay, Capacity: 10},
			during: 5, retry: 12 * time.Hour, after: 5},
		{name: "a concurrency of 1 still admits one", spec: Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 1},
			during: 1, retry: time.Second, after: 1, release: true},
		{name: "1 per minute still admits one", spec: Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 1},
			during: 1, retry: time.Minute, after: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := newBroker(t, []Spec{tt.spec})
			b.SetConservative(t0.Add(time.Minute))
			n, ref, rs := reserveN(t, b, 20, one)
			require.Equal(t, tt.during, n)
			require.Equal(t, 0.0, ref.Remaining)
			require.InDelta(t, float64(tt.retry), float64(ref.RetryAfter), float64(time.Millisecond))
			if tt.release {
				for _, r := range rs {
					_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID})
					require.NoError(t, err)
				}
			}
			c.Advance(time.Minute)
			n, _, _ = reserveN(t, b, 20, one)
			require.Equal(t, tt.after, n)
		})
	}

	t.Run("USD has no unit floor: half of the limit", func(t *testing.T) {
		b, _ := newBroker(t, []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitUSD, Window: WindowDay, Capacity: 1}})
		b.SetConservative(t0.Add(time.Minute))
		n, _, _ := reserveN(t, b, 5, Demand{Requests: 1, USD: 0.3})
		require.Equal(t, 1, n)
	})

	t.Run("a demand that only fits outside learning mode waits for its end", func(t *testing.T) {
		b, _ := newBroker(t, []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 10}})
		b.SetConservative(t0.Add(5 * time.Minute))
		_, ref, _ := reserveN(t, b, 1, Demand{Requests: 8})
		require.Equal(t, ReasonRetryableCapacity, ref.Reason)
		require.Equal(t, 5*time.Minute, ref.RetryAfter)
		b.SetConservative(time.Time{})
		n, _, _ := reserveN(t, b, 1, Demand{Requests: 8})
		require.Equal(t, 1, n)
	})
}

func TestSafeMetadata(t *testing.T) {
	specs := append(hierarchy(), Spec{Scope: ScopeTenant, Key: "other", Unit: UnitRequests, Window: WindowMinute, Capacity: 7})
	b, _ := newBroker(t, specs)
	ls := b.Limits(who)
	var scopes []Scope
	for _, l := range ls {
		scopes = append(scopes, l.Scope)
	}
	require.Equal(t, []Scope{ScopeAPIKey, ScopeApp, ScopeTenant}, scopes, "own buckets only")
	require.Equal(t, 100.0, ls[0].Limit)
	require.Equal(t, 100.0, ls[0].Remaining)

	// The provider project allows 1000 input tokens a minute: another
	// tenant's traffic takes 900 of it.
	otherTenant := req(Demand{InputTokens: 900})
	otherTenant.Identity = Identity{TenantID: "other"}
	_, _, err := b.Reserve(t.Context(), otherTenant)
	require.NoError(t, err)
	_, ref, err := b.Reserve(t.Context(), req(Demand{InputTokens: 200}))
	require.NoError(t, err)
	require.NotNil(t, ref)
	require.Equal(t, ScopeProviderProject, ref.Scope)
	require.Zero(t, ref.Limit)
	require.Zero(t, ref.Remaining)
	require.Contains(t, ref.Message, "provider capacity")
	require.NotContains(t, ref.Message, "900")
	require.NotContains(t, ref.Message, "100")
	p := ref.Proto()
	require.Zero(t, p.GetLimit())
	require.Zero(t, p.GetRemaining())
	require.EqualValues(t, ScopeProviderProject, p.GetScope())
	require.EqualValues(t, ReasonRetryableCapacity, p.GetReason())
	require.EqualValues(t, ClassInteractive, p.GetWorkloadClass())
	require.Equal(t, 6*time.Second, p.GetRetryAfter().AsDuration()) // 100 more tokens at 1000/min

	// The caller's own bucket says its figures.
	_, ref, err = b.Reserve(t.Context(), req(Demand{InputTokens: 60000}))
	require.NoError(t, err)
	require.Equal(t, ScopeTenant, ref.Scope)
	require.Equal(t, ReasonNonRetryableRequest, ref.Reason)
	require.Equal(t, 50000.0, ref.Limit)
	require.Equal(t, "the request needs 60,000 input_tokens, more than the tenant input_tokens limit of 50,000 can ever admit", ref.Message)
	require.Nil(t, ref.Proto().GetResetTime())
}

// TestRefusalMessageFigures: a refusal's message writes its figures as
// people do, with thousands separators, never in exponent form (%g wrote a
// million tokens as 1e+06).
func TestRefusalMessageFigures(t *testing.T) {
	b, _ := newBroker(t, []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitInputTokens, Window: WindowMinute, Capacity: 1_000_000}})
	_, ref, err := b.Reserve(t.Context(), req(Demand{InputTokens: 956_138}))
	require.NoError(t, err)
	require.Nil(t, ref)
	_, ref, err = b.Reserve(t.Context(), req(Demand{InputTokens: 50_000}))
	require.NoError(t, err)
	require.NotNil(t, ref)
	require.Equal(t, 1e6, ref.Limit)
	require.Regexp(t, `^tenant input_tokens limit reached \(43,862 remaining of 1,000,000\); retry after `, ref.Message)
	require.NotContains(t, ref.Message, "e+")
}

func TestReconfigure(t *testing.T) {
	spec := Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 10}
	b, _ := newBroker(t, []Spec{spec})
	n, _, _ := reserveN(t, b, 4, one)
	require.Equal(t, 4, n)

	spec.Capacity = 5
	added := Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 1}
	require.NoError(t, b.Reconfigure(Config{Buckets: []Spec{spec, added}}))
	require.Equal(t, 5.0, level(t, b, "tenant:acme:requests:minute"), "level kept, clamped to the new limit")
	require.Equal(t, 1.0, level(t, b, "tenant:acme:concurrent_requests"), "a new bucket starts full")

	require.NoError(t, b.Reconfigure(Config{Buckets: []Spec{added}}))
	require.Nil(t, b.tab.Load().byID["tenant:acme:requests:minute"], "removed")
	require.ErrorIs(t, b.Reconfigure(Config{Buckets: []Spec{{Scope: ScopeTenant}}}), ErrInvalid)
}

func TestFromCatalog(t *testing.T) {
	keyA, keyB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	yaml := `
models:
  - id: m1
    endpoints:
      - provider: alpha
        base_url: http://127.0.0.1:9101/v1
        price: {input: 0.2, output: 0.8}
        limits:
          - {unit: requests, per: minute, capacity: 600}
          - {unit: input_tokens, per: minute, capacity: 2000000, scope: provider_project}
  - id: m2
    endpoints:
      - provider: alpha
        base_url: http://127.0.0.1:9101/v1
        price: {input: 0.2, output: 0.8}
        limits:
          - {unit: input_tokens, per: minute, capacity: 2000000, scope: provider_project}
      - provider: beta
        base_url: http://127.0.0.1:9102/v1
        price: {input: 0.2, output: 0.8}
tenants:
  - id: acme
    api_keys_sha256: ["` + keyA + `", "` + keyB + `"]
    limits:
      - {unit: input_tokens, per: minute, capacity: 100000}
      - {unit: requests, per: day, capacity: 10000}
      - {unit: concurrent_requests, capacity: 8}
      - {unit: usd, per: day, capacity: 5.0, refund_on_expiry: true}
      - {unit: requests, per: second, capacity: 5, burst: 5, scope: api_key}
`
	c, err := catalog.Parse([]byte(yaml))
	require.NoError(t, err)
	cfg, err := FromCatalog(c)
	require.NoError(t, err)
	b, err := New(cfg, Options{})
	require.NoError(t, err)
	var ids []string
	for _, bk := range b.tab.Load().buckets {
		ids = append(ids, bk.id)
	}
	require.ElementsMatch(t, []string{
		"model_route:alpha/m1:requests:minute",
		"provider_project:alpha:input_tokens:minute",
		"tenant:acme:input_tokens:minute",
		"tenant:acme:requests:day",
		"tenant:acme:concurrent_requests",
		"tenant:acme:usd:day",
		"api_key:" + catalog.KeyID(keyA) + ":requests:second",
		"api_key:" + catalog.KeyID(keyB) + ":requests:second",
	}, ids)
	for _, bk := range b.tab.Load().buckets {
		want := refundDefault
		if bk.id == "tenant:acme:usd:day" {
			want = refundYes
		}
		require.Equal(t, want, bk.p.refund, "refund_on_expiry of %s", bk.id)
	}
	rt := b.tab.Load().routes["alpha/m2"]
	require.Len(t, rt.buckets, 1, "m2 on alpha shares alpha's project bucket")
	require.Len(t, b.tab.Load().routes["beta/m2"].buckets, 0)

	t.Run("conflicting shared limits", func(t *testing.T) {
		// catalog.Parse refuses them with their line; FromCatalog, given
		// them anyway, refuses them too.
		conflict := strings.Replace(yaml, "capacity: 2000000, scope", "capacity: 1000000, scope", 1)
		_, err := catalog.Parse([]byte(conflict))
		require.ErrorContains(t, err, "differs")
		c2, err := catalog.Parse([]byte(yaml))
		require.NoError(t, err)
		c2.Models[0].Endpoints[0].Limits[1].Capacity = 1000000
		_, err = FromCatalog(c2)
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, "differs")
	})
	t.Run("a shared limit with a ramp and a refund rule repeated alike is one bucket", func(t *testing.T) {
		alike := strings.ReplaceAll(yaml, "capacity: 2000000, scope: provider_project}",
			"capacity: 2000000, scope: provider_project, refund_on_expiry: false, ramp: {max_increase: 0.5}}")
		c4, err := catalog.Parse([]byte(alike))
		require.NoError(t, err)
		cfg, err := FromCatalog(c4)
		require.NoError(t, err)
		b, err := New(cfg, Options{})
		require.NoError(t, err)
		var shared []string
		for _, bk := range b.tab.Load().buckets {
			if strings.HasPrefix(bk.id, "provider_project:") {
				shared = append(shared, bk.id)
			}
		}
		require.ElementsMatch(t, []string{"provider_project:alpha:input_tokens:minute", "provider_project:alpha:input_tokens:ramp"}, shared)
	})
	t.Run("an app limit is keyed by tenant and scope_key", func(t *testing.T) {
		c3, err := catalog.Parse([]byte(strings.Replace(yaml, "capacity: 5, burst: 5, scope: api_key", "capacity: 5, scope: app, scope_key: chat/prod", 1)))
		require.NoError(t, err)
		cfg, err := FromCatalog(c3)
		require.NoError(t, err)
		found := false
		for _, s := range cfg.Buckets {
			if s.Scope == ScopeApp {
				require.True(t, strings.HasSuffix(s.Key, "/chat/prod"), s.Key)
				found = true
			}
		}
		require.True(t, found)
	})
}
