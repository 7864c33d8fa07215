package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBucketLevels(t *testing.T) {
	b, c := newBroker(t, []Spec{
		{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 4},
		{Scope: ScopeTenant, Key: tenant, Unit: UnitUSD, Window: WindowDay, Capacity: 10},
		{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitInputTokens, Window: WindowMinute, Capacity: 600},
		{Scope: ScopeAPIKey, Key: keyID, Unit: UnitRequests, Window: WindowMinute, Capacity: 100},
	})
	r, ref, err := b.Reserve(t.Context(), req(Demand{InputTokens: 300, USD: 2.5}))
	require.NoError(t, err)
	require.Nil(t, ref)

	byKey := func(ls []BucketLevel) map[string]BucketLevel {
		m := map[string]BucketLevel{}
		for _, l := range ls {
			m[l.Scope.String()+":"+l.Key+":"+l.Unit.String()] = l
		}
		return m
	}
	got := byKey(b.BucketLevels(ScopeTenant, ScopeModelRoute))
	require.Len(t, got, 3, "only the scopes asked for")
	require.Equal(t, BucketLevel{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Rule: RuleConcurrency, Limit: 4, Available: 3},
		got["tenant:acme:concurrent_requests"])
	require.Equal(t, BucketLevel{Scope: ScopeTenant, Key: tenant, Unit: UnitUSD, Window: WindowDay, Rule: RuleDailyReset, Limit: 10, Available: 7.5},
		got["tenant:acme:usd"])
	require.InDelta(t, 300, got["model_route:alpha/m1:input_tokens"].Available, 1e-9)

	c.Advance(30 * time.Second)
	got = byKey(b.BucketLevels(ScopeModelRoute))
	require.InDelta(t, 600, got["model_route:alpha/m1:input_tokens"].Available, 1e-9, "refilled as of now: 300 per 30 s")
	require.Len(t, b.BucketLevels(), 4, "no scope: every bucket")

	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Outcome: OutcomeOK, Usage: Usage{InputTokens: 300, CostUSD: 1}})
	require.NoError(t, err)
	got = byKey(b.BucketLevels(ScopeTenant))
	require.Equal(t, 4.0, got["tenant:acme:concurrent_requests"].Available, "the slot is back")
	require.InDelta(t, 9, got["tenant:acme:usd"].Available, 1e-9)
}

func TestReservationInfo(t *testing.T) {
	b, c := newBroker(t, []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 100}})
	r, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 120, OutputTokens: 40}))
	require.NoError(t, err)

	info, ok := b.ReservationInfo(r.ID)
	require.True(t, ok)
	require.Equal(t, ReservationInfo{Tenant: tenant, Class: ClassInteractive, Model: model, EndpointID: endpoint,
		Estimate: Demand{InputTokens: 120, OutputTokens: 40, Requests: 1}, Demand: Demand{InputTokens: 120, OutputTokens: 40, Requests: 1}}, info)

	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Outcome: OutcomeOK})
	require.NoError(t, err)
	_, ok = b.ReservationInfo(r.ID)
	require.False(t, ok, "reconciled: nothing left to report on")

	r2, _, err := b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	c.Advance(3 * time.Minute)
	b.Expire(c.Now())
	info, ok = b.ReservationInfo(r2.ID)
	require.True(t, ok, "expired but remembered for a late reconciliation")
	require.True(t, info.Expired)

	for _, id := range []string{"", "nope", "s00" + "0123456789abcdef0123456789abcdef"} {
		_, ok = b.ReservationInfo(id)
		require.False(t, ok, id)
	}
}
