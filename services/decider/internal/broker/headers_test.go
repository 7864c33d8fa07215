package broker

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseHeaders(t *testing.T) {
	now := t0
	h := func(kv ...string) []Header {
		var hs []Header
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, Header{Name: kv[i], Value: kv[i+1]})
		}
		return hs
	}
	tests := []struct {
		name    string
		headers []Header
		want    ProviderHeaders
		wantErr []string
	}{
		{name: "openai",
			headers: h("x-ratelimit-limit-requests", "60", "x-ratelimit-limit-tokens", "150000",
				"x-ratelimit-remaining-requests", "59", "x-ratelimit-remaining-tokens", "149984",
				"x-ratelimit-reset-requests", "1s", "x-ratelimit-reset-tokens", "6m0s"),
			want: ProviderHeaders{
				Requests: LimitInfo{Limit: 60, HasLimit: true, Remaining: 59, HasRemaining: true, Reset: now.Add(time.Second)},
				Tokens:   LimitInfo{Limit: 150000, HasLimit: true, Remaining: 149984, HasRemaining: true, Reset: now.Add(6 * time.Minute)},
			}},
		{name: "milliseconds and fractions",
			headers: h("x-ratelimit-reset-requests", "12ms", "x-ratelimit-reset-tokens", "1m30.5s"),
			want: ProviderHeaders{Requests: LimitInfo{Reset: now.Add(12 * time.Millisecond)},
				Tokens: LimitInfo{Reset: now.Add(90*time.Second + 500*time.Millisecond)}}},
		{name: "reset in seconds, epoch seconds and epoch milliseconds",
			headers: h("x-ratelimit-reset-requests", "30", "x-ratelimit-reset-tokens", strconv.FormatInt(now.Add(time.Minute).Unix(), 10),
				"x-ratelimit-reset-input-tokens", strconv.FormatInt(now.Add(2*time.Second).UnixMilli(), 10), "x-ratelimit-reset-output-tokens", "0.25"),
			want: ProviderHeaders{Requests: LimitInfo{Reset: now.Add(30 * time.Second)}, Tokens: LimitInfo{Reset: now.Add(time.Minute)},
				InputTokens: LimitInfo{Reset: now.Add(2 * time.Second)}, OutputTokens: LimitInfo{Reset: now.Add(250 * time.Millisecond)}}},
		{name: "anthropic",
			headers: h("anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49",
				"anthropic-ratelimit-requests-reset", now.Add(time.Second).Format(time.RFC3339),
				"anthropic-ratelimit-input-tokens-limit", "40000", "anthropic-ratelimit-input-tokens-remaining", "39000",
				"anthropic-ratelimit-output-tokens-remaining", "8000",
				"anthropic-ratelimit-tokens-reset", now.Add(1500*time.Millisecond).Format(time.RFC3339Nano)),
			want: ProviderHeaders{
				Requests:     LimitInfo{Limit: 50, HasLimit: true, Remaining: 49, HasRemaining: true, Reset: now.Add(time.Second)},
				InputTokens:  LimitInfo{Limit: 40000, HasLimit: true, Remaining: 39000, HasRemaining: true},
				OutputTokens: LimitInfo{Remaining: 8000, HasRemaining: true},
				Tokens:       LimitInfo{Reset: now.Add(1500 * time.Millisecond)},
			}},
		{name: "names in any case, values with spaces",
			headers: h("X-RateLimit-Remaining-Requests", " 7 ", "Retry-After", "20"),
			want:    ProviderHeaders{Requests: LimitInfo{Remaining: 7, HasRemaining: true}, RetryAfter: now.Add(20 * time.Second)}},
		{name: "retry-after as an HTTP date",
			headers: h("retry-after", now.Add(90*time.Second).Format(http.TimeFormat)),
			want:    ProviderHeaders{RetryAfter: now.Add(90 * time.Second)}},
		{name: "retry-after-ms wins over retry-after",
			headers: h("retry-after-ms", "1500", "retry-after", "2"),
			want:    ProviderHeaders{RetryAfter: now.Add(1500 * time.Millisecond)}},
		{name: "a time in the past is now",
			headers: h("retry-after", now.Add(-time.Hour).Format(http.TimeFormat), "anthropic-ratelimit-requests-reset", now.Add(-time.Minute).Format(time.RFC3339)),
			want:    ProviderHeaders{RetryAfter: now, Requests: LimitInfo{Reset: now}}},
		{name: "unrelated headers are ignored",
			headers: h("content-type", "application/json", "x-ratelimit-limit-bananas", "5", "x-ratelimit-frobnicate-requests", "1", "anthropic-ratelimit-x", "1")},
		{name: "malformed values are skipped, the rest kept",
			headers: h("x-ratelimit-remaining-requests", "-1", "x-ratelimit-limit-requests", "abc", "x-ratelimit-remaining-tokens", "NaN",
				"x-ratelimit-limit-tokens", "Inf", "x-ratelimit-reset-requests", "soon", "x-ratelimit-reset-tokens", "-3s",
				"retry-after", "-5", "retry-after-ms", "lots", "anthropic-ratelimit-requests-reset", "2099-13-45",
				"x-ratelimit-reset-input-tokens", "", "x-ratelimit-limit-output-tokens", "1e300",
				"x-ratelimit-reset-output-tokens", "100000000h", "x-ratelimit-remaining-input-tokens", "12"),
			want: ProviderHeaders{InputTokens: LimitInfo{Remaining: 12, HasRemaining: true}},
			wantErr: []string{"x-ratelimit-remaining-requests", "x-ratelimit-limit-requests", "x-ratelimit-remaining-tokens",
				"x-ratelimit-limit-tokens", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens", "header retry-after:",
				"retry-after-ms", "anthropic-ratelimit-requests-reset", "x-ratelimit-reset-input-tokens", "x-ratelimit-limit-output-tokens",
				"x-ratelimit-reset-output-tokens"}},
		{name: "too far ahead",
			headers: h("retry-after", "99999999999"),
			wantErr: []string{"out of range"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHeaders(tt.headers, now)
			require.Equal(t, tt.want, got)
			if len(tt.wantErr) == 0 {
				require.NoError(t, err)
				return
			}
			for _, w := range tt.wantErr {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestHeadersCorrectBuckets(t *testing.T) {
	specs := []Spec{
		{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowMinute, Capacity: 600},
		{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitInputTokens, Window: WindowMinute, Capacity: 1000000},
		{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 1000},
	}
	const (
		routeReq = "model_route:alpha/m1:requests:minute"
		project  = "provider_project:alpha:input_tokens:minute"
		learned  = "model_route:alpha/m1:total_tokens:minute:learned"
	)
	tests := []struct {
		name    string
		headers []Header
		levels  map[string]float64
		source  Source
	}{
		{name: "a lower remaining lowers our level",
			headers: []Header{{"x-ratelimit-remaining-requests", "10"}, {"x-ratelimit-remaining-input-tokens", "5000"}},
			levels:  map[string]float64{routeReq: 10, project: 5000, "tenant:acme:requests:minute": 999}},
		{name: "a higher remaining never raises it, nor a higher limit the configured capacity",
			headers: []Header{{"x-ratelimit-remaining-requests", "100000"}, {"x-ratelimit-limit-requests", "100000"}},
			levels:  map[string]float64{routeReq: 599}},
		{name: "a limit we had not configured is learned",
			headers: []Header{{"x-ratelimit-limit-tokens", "150000"}, {"x-ratelimit-remaining-tokens", "1000"}},
			levels:  map[string]float64{learned: 1000, routeReq: 599}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := newBroker(t, specs)
			res, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 100}))
			require.NoError(t, err)
			st, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Usage: Usage{InputTokens: 100}, Outcome: OutcomeOK, Headers: tt.headers})
			require.NoError(t, err)
			require.NoError(t, st.HeaderErr)
			for id, want := range tt.levels {
				require.Equal(t, want, level(t, b, id), id)
			}
		})
	}

	t.Run("a learned bucket is charged and follows the provider's limit", func(t *testing.T) {
		b, c := newBroker(t, specs)
		res, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 100}))
		require.NoError(t, err)
		_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Headers: []Header{{"x-ratelimit-limit-tokens", "1000"}}})
		require.NoError(t, err)
		bk := b.tab.Load().byID[learned]
		require.Equal(t, SourceLearned, bk.source)
		res, _, err = b.Reserve(t.Context(), req(Demand{InputTokens: 300, OutputTokens: 200}))
		require.NoError(t, err)
		require.Contains(t, chargedIDs(res), learned)
		require.Equal(t, 500.0, level(t, b, learned))
		_, ref, err := b.Reserve(t.Context(), req(Demand{InputTokens: 600}))
		require.NoError(t, err)
		require.NotNil(t, ref)
		require.Equal(t, ScopeModelRoute, ref.Scope)
		require.Zero(t, ref.Limit, "a provider bucket shows no figures")

		_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Usage: Usage{InputTokens: 300, OutputTokens: 200},
			Headers: []Header{{"x-ratelimit-limit-tokens", "400"}}})
		require.NoError(t, err)
		require.Equal(t, 400.0, level(t, b, learned), "clamped to the new limit")
		c.Advance(time.Hour)
		require.Equal(t, 400.0, level(t, b, learned))
	})
}

func chargedIDs(r *Reservation) []string {
	var ids []string
	for _, c := range r.Charges {
		ids = append(ids, c.BucketID)
	}
	return ids
}

func TestPause(t *testing.T) {
	tests := []struct {
		name     string
		outcomes []Outcome // one reconcile per outcome, all with headers
		headers  []Header
		endpoint string
		pause    time.Duration // expected pause after the last reconcile (jitter included: Rand is 0.5)
		reason   RefusalReason
	}{
		{name: "retry-after on a 429 pauses the route, with jitter", outcomes: []Outcome{OutcomeRateLimited},
			headers: []Header{{"retry-after", "20"}}, pause: 20*time.Second + 500*time.Millisecond, reason: ReasonRetryableCapacity},
		{name: "retry-after on a 503 is overload", outcomes: []Outcome{OutcomeUpstreamError},
			headers: []Header{{"retry-after-ms", "400"}}, pause: 400*time.Millisecond + 20*time.Millisecond, reason: ReasonRetryableOverload},
		{name: "a bogus retry-after is capped at MaxPause", outcomes: []Outcome{OutcomeRateLimited},
			headers: []Header{{"retry-after", "86400"}}, pause: 10*time.Minute + 500*time.Millisecond, reason: ReasonRetryableCapacity},
		{name: "nothing left until the reset", outcomes: []Outcome{OutcomeOK},
			headers: []Header{{"x-ratelimit-remaining-requests", "0"}, {"x-ratelimit-reset-requests", "30s"}}, pause: 30*time.Second + 500*time.Millisecond, reason: ReasonRetryableCapacity},
		{name: "bare 429s back off exponentially", outcomes: []Outcome{OutcomeRateLimited, OutcomeRateLimited, OutcomeRateLimited},
			pause: 4*time.Second + 200*time.Millisecond, reason: ReasonRetryableCapacity},
		{name: "a success resets the back-off", outcomes: []Outcome{OutcomeRateLimited, OutcomeRateLimited, OutcomeOK, OutcomeRateLimited},
			pause: time.Second + 50*time.Millisecond, reason: ReasonRetryableCapacity},
		{name: "an endpoint the configuration does not name can be paused too", outcomes: []Outcome{OutcomeRateLimited},
			endpoint: "gamma/m9", headers: []Header{{"retry-after", "5"}}, pause: 5*time.Second + 250*time.Millisecond, reason: ReasonRetryableCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := newBroker(t, []Spec{{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowMinute, Capacity: 600}})
			rq := req(one)
			if tt.endpoint != "" {
				rq.EndpointID = tt.endpoint
			}
			var st *Settlement
			var last time.Time // when the last reconcile happened
			for _, o := range tt.outcomes {
				res, ref, err := b.Reserve(t.Context(), rq)
				require.NoError(t, err)
				if ref != nil { // paused by the previous 429: wait it out
					c.Set(ref.Reset)
					res, _, err = b.Reserve(t.Context(), rq)
					require.NoError(t, err)
				}
				last = c.Now()
				st, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Outcome: o, Headers: tt.headers})
				require.NoError(t, err)
			}
			require.Equal(t, last.Add(tt.pause), st.PausedUntil)
			_, ref, err := b.Reserve(t.Context(), rq)
			require.NoError(t, err)
			require.NotNil(t, ref)
			require.Equal(t, tt.reason, ref.Reason)
			require.Equal(t, ScopeModelRoute, ref.Scope)
			require.Equal(t, tt.pause, ref.RetryAfter)
			require.Contains(t, ref.Message, "provider capacity")
			other := rq
			other.EndpointID = "beta/m1"
			_, ref, err = b.Reserve(t.Context(), other)
			require.NoError(t, err)
			require.Nil(t, ref, "other routes are not paused")
			c.Set(last.Add(tt.pause))
			_, ref, err = b.Reserve(t.Context(), rq)
			require.NoError(t, err)
			require.Nil(t, ref, "the pause ends")
		})
	}

	t.Run("jitter stays within bounds", func(t *testing.T) {
		for _, r := range []float64{0, 0.999999} {
			b, _ := newBroker(t, nil, func(o *Options) { o.Rand = func() float64 { return r } })
			res, _, err := b.Reserve(t.Context(), req(one))
			require.NoError(t, err)
			st, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Outcome: OutcomeRateLimited, Headers: []Header{{"retry-after", "60"}}})
			require.NoError(t, err)
			require.GreaterOrEqual(t, st.PausedUntil.Sub(t0), time.Minute, "retry-after is a lower bound")
			require.LessOrEqual(t, st.PausedUntil.Sub(t0), time.Minute+time.Second)
		}
	})
}
