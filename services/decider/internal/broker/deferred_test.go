package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

// A failure reconciled as deferred gives the capacity back and pauses
// nothing; the later reconcile that says it was the endpoint's applies the
// pause once, and settles nothing a second time.
func TestDeferredFailurePausesOnlyWhenCharged(t *testing.T) {
	b, _ := newBroker(t, []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 1}})
	r, ref, err := b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	require.Nil(t, ref)
	fail := ReconcileRequest{ReservationID: r.ID, Outcome: OutcomeUpstreamError, Failure: ReasonRetryableOverload, FailureDeferred: true}
	st, err := b.Reconcile(t.Context(), fail)
	require.NoError(t, err)
	require.True(t, st.PausedUntil.IsZero(), "a deferred failure pauses nothing")
	r2, ref, err := b.Reserve(t.Context(), ReserveRequest{RequestID: "req2", Identity: who, Model: model, EndpointID: endpoint, Demand: one})
	require.NoError(t, err)
	require.Nil(t, ref, "the concurrency was given back and the route is not paused")
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r2.ID, Outcome: OutcomeOK})
	require.NoError(t, err)

	// A second deferred reconcile is a replay: nothing happens.
	_, err = b.Reconcile(t.Context(), fail)
	require.ErrorIs(t, err, ErrAlreadyReconciled)

	charge := fail
	charge.FailureDeferred = false
	st, err = b.Reconcile(t.Context(), charge)
	require.NoError(t, err)
	require.False(t, st.PausedUntil.IsZero(), "the endpoint's failure pauses it")
	require.Empty(t, st.Released, "nothing is settled twice")
	_, ref, err = b.Reserve(t.Context(), ReserveRequest{RequestID: "req3", Identity: who, Model: model, EndpointID: endpoint, Demand: one})
	require.NoError(t, err)
	require.NotNil(t, ref)
	require.Equal(t, CodeProviderPaused, ref.Code)

	_, err = b.Reconcile(t.Context(), charge)
	require.ErrorIs(t, err, ErrAlreadyReconciled, "the deferred failure is applied once")
}

// A reservation reconciled without a deferred failure cannot be charged
// again: the second reconcile is refused as before.
func TestChargeWithoutDeferralIsAReplay(t *testing.T) {
	b, _ := newBroker(t, nil)
	r, _, err := b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Outcome: OutcomeUpstreamError})
	require.NoError(t, err)
	st, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Outcome: OutcomeUpstreamError, Failure: ReasonRetryableOverload})
	require.ErrorIs(t, err, ErrAlreadyReconciled)
	require.Nil(t, st)
}

// An account refusal (a policy failure with an account code) pauses every
// route called with that account, whatever the model, and no route of
// another account, even of the same provider; a policy failure without an
// account code pauses its own route only.
func TestAccountRefusalPausesTheAccount(t *testing.T) {
	ep := func(provider, key, project string) catalog.Endpoint {
		return catalog.Endpoint{Provider: provider, APIKeyEnv: key, ProviderProject: project}
	}
	routes := []Route{
		{EndpointID: "alpha/m1", Account: Account(ep("alpha", "KEY_A", ""))},
		{EndpointID: "alpha/m2", Account: Account(ep("alpha", "KEY_A", "alpha"))}, // the default project, spelt out
		{EndpointID: "alpha/m3", Account: Account(ep("alpha", "KEY_B", "team2"))},
		{EndpointID: "beta/m1", Account: Account(ep("beta", "KEY_A", ""))},
	}
	paused := func(b *Broker, ep string) bool {
		_, ref, err := b.Reserve(t.Context(), ReserveRequest{RequestID: "r-" + ep, Identity: who, Model: "m", EndpointID: ep, Demand: one})
		require.NoError(t, err)
		return ref != nil && ref.Code == CodeProviderPaused
	}
	for _, tc := range []struct {
		name, code string
		want       map[string]bool
	}{
		{name: "account code", code: "insufficient_quota", want: map[string]bool{"alpha/m1": true, "alpha/m2": true}},
		{name: "no account code", code: "", want: map[string]bool{"alpha/m1": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeclock.New(t0)
			b, err := New(Config{Routes: routes}, Options{Now: c.Now, DisableCorrection: true, Rand: func() float64 { return 0.5 }})
			require.NoError(t, err)
			r, _, err := b.Reserve(t.Context(), ReserveRequest{RequestID: "x", Identity: who, Model: "m1", EndpointID: "alpha/m1", Demand: one})
			require.NoError(t, err)
			_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Outcome: OutcomeRateLimited,
				Failure: ReasonNonRetryablePolicy, ProviderErrorCode: tc.code})
			require.NoError(t, err)
			for _, rt := range routes {
				require.Equal(t, tc.want[rt.EndpointID], paused(b, rt.EndpointID), rt.EndpointID)
			}
			c.Advance(11 * time.Minute)
			for _, rt := range routes {
				require.False(t, paused(b, rt.EndpointID), "%s: the pause lasts MaxPause at most", rt.EndpointID)
			}
		})
	}
}
