package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker/provheaders"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

// A scoped reconcile (a service the catalog does not trust for shared
// provider state) pauses the route for its reservation's tenant only, an
// account's routes too, and its headers' limits teach nothing.
func TestScopedReconcilePausesOnlyItsTenant(t *testing.T) {
	ep := func(key string) catalog.Endpoint { return catalog.Endpoint{Provider: "alpha", APIKeyEnv: key} }
	routes := []Route{
		{EndpointID: "alpha/m1", Model: "m1", Account: Account(ep("KEY_A"))},
		{EndpointID: "alpha/m2", Model: "m2", Account: Account(ep("KEY_A"))},
	}
	const routeReq = "model_route:alpha/m1:requests:minute"
	specs := []Spec{{Scope: ScopeModelRoute, Key: "alpha/m1", Unit: UnitRequests, Window: WindowMinute, Capacity: 600}}
	mine, theirs := who, who
	theirs.TenantID = "globex"
	refusal := func(t *testing.T, b *Broker, id Identity, endpoint string) *Refusal {
		t.Helper()
		_, ref, err := b.Reserve(t.Context(), ReserveRequest{RequestID: "r-" + id.TenantID + endpoint, Identity: id, Model: "m", EndpointID: endpoint, Demand: one})
		require.NoError(t, err)
		return ref
	}
	tests := []struct {
		name string
		req  ReconcileRequest
	}{
		{name: "retry-after on a 429", req: ReconcileRequest{Outcome: OutcomeRateLimited,
			Failure: ReasonNonRetryablePolicy, ProviderErrorCode: "insufficient_quota",
			Headers: []Header{{"retry-after", "590"}, {"x-ratelimit-remaining-requests", "0"}, {"x-ratelimit-limit-tokens", "10"}}}},
		{name: "bare 429s", req: ReconcileRequest{Outcome: OutcomeRateLimited, Failure: ReasonRetryableCapacity}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeclock.New(t0)
			b, err := New(Config{Buckets: specs, Routes: routes}, Options{Now: c.Now, DisableCorrection: true, Rand: func() float64 { return 0.5 }})
			require.NoError(t, err)
			res, _, err := b.Reserve(t.Context(), ReserveRequest{RequestID: "x", Identity: mine, Model: "m1", EndpointID: "alpha/m1", Demand: one})
			require.NoError(t, err)
			rq := tt.req
			rq.ReservationID, rq.Scoped = res.ID, true
			st, err := b.Reconcile(t.Context(), rq)
			require.NoError(t, err)
			require.True(t, st.PausedUntil.After(t0), "the reconciling tenant's pause is reported")

			ref := refusal(t, b, mine, "alpha/m1")
			require.NotNil(t, ref, "the reconciling tenant is paused")
			require.Equal(t, CodeProviderPaused, ref.Code)
			require.Nil(t, refusal(t, b, theirs, "alpha/m1"), "another tenant is not")
			require.Nil(t, refusal(t, b, theirs, "alpha/m2"), "nor on the account's other routes")
			require.Greater(t, level(t, b, routeReq), 590.0, "the headers' remaining 0 lowered nothing")
			require.Nil(t, b.tab.Load().byID["model_route:alpha/m1:total_tokens:minute:learned"], "no limit learned")
			require.Zero(t, b.tab.Load().routes["alpha/m1"].pause.streak.Load(), "the route's back-off is untouched")
			require.Equal(t, int64(1), b.Scoped(), "and counted")
		})
	}

	t.Run("unscoped, every tenant is paused", func(t *testing.T) {
		c := fakeclock.New(t0)
		b, err := New(Config{Buckets: specs, Routes: routes}, Options{Now: c.Now, DisableCorrection: true, Rand: func() float64 { return 0.5 }})
		require.NoError(t, err)
		res, _, err := b.Reserve(t.Context(), ReserveRequest{RequestID: "x", Identity: mine, Model: "m1", EndpointID: "alpha/m1", Demand: one})
		require.NoError(t, err)
		_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Outcome: OutcomeRateLimited, Headers: []Header{{"retry-after", "30"}}})
		require.NoError(t, err)
		require.NotNil(t, refusal(t, b, theirs, "alpha/m1"))
	})
}

// No pause outlasts provheaders.MaxRetryAfter, whatever MaxPause allows.
func TestPauseIsCappedAtMaxRetryAfter(t *testing.T) {
	for _, scoped := range []bool{false, true} {
		b, c := newBroker(t, nil, func(o *Options) { o.MaxPause = 24 * time.Hour })
		res, _, err := b.Reserve(t.Context(), req(one))
		require.NoError(t, err)
		st, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Outcome: OutcomeRateLimited, Scoped: scoped,
			Headers: []Header{{"retry-after", "2592000"}}}) // 30 days
		require.NoError(t, err)
		require.LessOrEqual(t, st.PausedUntil.Sub(t0), provheaders.MaxRetryAfter+time.Second, "scoped %v", scoped)
		require.GreaterOrEqual(t, st.PausedUntil.Sub(t0), provheaders.MaxRetryAfter)
		c.Advance(provheaders.MaxRetryAfter + time.Second)
		_, ref, err := b.Reserve(t.Context(), req(one))
		require.NoError(t, err)
		require.Nil(t, ref, "scoped %v", scoped)
	}
}
