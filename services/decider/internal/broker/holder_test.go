package broker

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// holderPair is an owner's broker and a replica's lease holder on one
// catalog and one fake clock.
func holderPair(t *testing.T, specs []Spec) (*Broker, *Holder, *clock) {
	t.Helper()
	owner, c := newBroker(t, specs)
	replica, err := New(Config{Buckets: specs, Routes: []Route{{EndpointID: endpoint, Model: model, Project: "alpha"}}},
		Options{Now: c.Now, DisableCorrection: true})
	require.NoError(t, err)
	return owner, replica.NewHolder(), c
}

// renew runs one renewal of h on owner.
func renew(owner *Broker, h *Holder, c *clock) []Observation {
	asks, obs := h.Renewal()
	for _, o := range obs {
		owner.Observe(o.Endpoint, o.Model, o.Tenant, o.Req)
	}
	h.Granted(c.Now(), owner.LeaseTerm(), owner.RenewLeases("r1", asks), owner.CentralRoutes(), 1)
	return obs
}

func TestHolderAdmitsOnItsLeaseOnly(t *testing.T) {
	specs := []Spec{
		{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 600},
		{Scope: ScopeTenant, Key: tenant, Unit: UnitInputTokens, Window: WindowMinute, Capacity: 100000},
	}
	owner, h, c := holderPair(t, specs)
	d := Demand{Requests: 1, InputTokens: 100}
	// No lease yet: forwarded, and counted as demand.
	for range 10 {
		_, ok := h.Reserve(req(d))
		require.False(t, ok)
	}
	renew(owner, h, c)
	// Twice the demand: 20 requests and 2000 tokens.
	require.Equal(t, map[string]float64{specs0ID(owner, UnitRequests): 20, specs0ID(owner, UnitInputTokens): 2000}, h.Held())
	var local []*Reservation
	for range 25 {
		if r, ok := h.Reserve(req(d)); ok {
			local = append(local, r)
		}
	}
	require.Len(t, local, 20, "no more than the lease")
	// Unused tokens go back to the lease; an overrun is taken from it.
	st, mine, observe, err := h.Reconcile(ReconcileRequest{ReservationID: local[0].ID, Outcome: OutcomeOK, Usage: Usage{InputTokens: 40}})
	require.NoError(t, err)
	require.True(t, mine)
	require.False(t, observe)
	require.Equal(t, 60.0, st.Released[1].Amount)
	_, _, _, err = h.Reconcile(ReconcileRequest{ReservationID: local[1].ID, Outcome: OutcomeOK, Usage: Usage{InputTokens: 500}})
	require.NoError(t, err)
	require.Equal(t, 60.0-400, h.Held()[specs0ID(owner, UnitInputTokens)])
	// The renewal carries the overrun to the owner's bucket.
	before := level(t, owner, specs0ID(owner, UnitInputTokens))
	renew(owner, h, c)
	require.InDelta(t, before+60-400, level(t, owner, specs0ID(owner, UnitInputTokens))+h.Held()[specs0ID(owner, UnitInputTokens)], 1e-9)
	// A reconciliation of someone else's reservation is not the holder's.
	_, mine, _, err = h.Reconcile(ReconcileRequest{ReservationID: newID(1), Outcome: OutcomeOK})
	require.NoError(t, err)
	require.False(t, mine)
	// Once the term ends without a renewal, nothing is admitted locally.
	c.Advance(owner.LeaseTerm())
	_, ok := h.Reserve(req(d))
	require.False(t, ok)
}

// A failure on a call admitted on a lease is told to the owner, whose
// route pauses; the replica forwards that endpoint meanwhile.
func TestHolderForwardsAndReportsAFailure(t *testing.T) {
	specs := []Spec{{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitRequests, Window: WindowMinute, Capacity: 600}}
	owner, h, c := holderPair(t, specs)
	for range 5 {
		h.Reserve(req(one))
	}
	renew(owner, h, c)
	r, ok := h.Reserve(req(one))
	require.True(t, ok)
	_, _, observe, err := h.Reconcile(ReconcileRequest{ReservationID: r.ID, Outcome: OutcomeRateLimited, Failure: ReasonRetryableCapacity,
		Headers: []Header{{Name: "retry-after", Value: "30"}}})
	require.NoError(t, err)
	require.True(t, observe)
	_, ok = h.Reserve(req(one))
	require.False(t, ok, "the endpoint is forwarded until the owner answers")
	require.Len(t, renew(owner, h, c), 1)
	_, ref, err := owner.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	require.NotNil(t, ref, "the owner paused the route")
	_, ok = h.Reserve(req(one))
	require.False(t, ok, "the owner keeps the paused endpoint central")
}

// Retries and requests touching a concurrency bucket are never admitted on
// a lease.
func TestHolderForwardsRetriesAndSmallBuckets(t *testing.T) {
	specs := []Spec{{Scope: ScopeProviderProject, Key: "alpha", Unit: UnitRequests, Window: WindowMinute, Capacity: 600}}
	owner, h, c := holderPair(t, specs)
	h.Reserve(req(one))
	renew(owner, h, c)
	rr := req(one)
	rr.Attempt = 2
	_, ok := h.Reserve(rr)
	require.False(t, ok)
	_, ok = h.Reserve(req(one))
	require.True(t, ok)

	owner2, h2, c2 := holderPair(t, append(specs, Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 1000}))
	h2.Reserve(req(one))
	renew(owner2, h2, c2)
	_, ok = h2.Reserve(req(one))
	require.False(t, ok)
}

func specs0ID(b *Broker, u Unit) string {
	for _, bk := range b.tab.Load().buckets {
		if bk.unit == u {
			return bk.id
		}
	}
	return ""
}

// The reservations a replica holds on its leases are bounded as the
// owner's open ones are (MaxStateBytes): past that it forwards, and the
// owner answers broker_full. Before, a replica held any number, however
// large its leases.
func TestHolderHoldsNoMoreThanTheOwnersState(t *testing.T) {
	specs := []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowMinute, Capacity: 100000}}
	owner, c := newBroker(t, specs)
	replica, err := New(Config{Buckets: specs, Routes: []Route{{EndpointID: endpoint, Model: model, Project: "alpha"}}},
		Options{Now: c.Now, DisableCorrection: true, MaxStateBytes: holderStateBytes})
	require.NoError(t, err)
	h := replica.NewHolder()
	d := Demand{Requests: 1}
	for range 5000 {
		h.Reserve(req(d))
	}
	renew(owner, h, c)
	require.Greater(t, h.Held()[specs0ID(owner, UnitRequests)], 5000.0, "a lease large enough for all of them")
	var local []*Reservation
	for range 5000 {
		if r, ok := h.Reserve(req(d)); ok {
			local = append(local, r)
		}
	}
	size := reservationSize(identitySize(&local[0].Identity), 1, len(local[0].ID), len(local[0].RequestID), 0, len(model), len(endpoint))
	require.Less(t, len(local), 5000, "the holder stops at its state's bound")
	require.LessOrEqual(t, int64(len(local))*size, int64(holderStateBytes))
	// One ends, one more fits.
	_, mine, _, err := h.Reconcile(ReconcileRequest{ReservationID: local[0].ID, Outcome: OutcomeOK})
	require.NoError(t, err)
	require.True(t, mine)
	_, ok := h.Reserve(req(d))
	require.True(t, ok, "room again once a reservation ends")
}

// holderStateBytes is a state bound small enough that a few hundred
// reservations fill it.
const holderStateBytes = 64 << 10
