package broker

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// maxReq is a reservation request whose every string is as long as the
// broker allows, unique by i.
func maxReq(i int) ReserveRequest {
	pad := func(prefix string, n int) string {
		s := prefix + strconv.Itoa(i) + "-"
		return s + strings.Repeat("x", n-len(s))
	}
	r := req(one)
	r.RequestID = pad("req", validate.MaxIDLen)
	r.IdempotencyKey = pad("key", validate.MaxKeyLen)
	return r
}

// TestStateStaysWithinItsLimit: open reservations with the longest ids and
// keys the broker takes fill its state up to the limit and no further; the
// next is refused (broker_full, retryable), the snapshot stays within the
// limit and restores, and a reservation that ends makes room again.
func TestStateStaysWithinItsLimit(t *testing.T) {
	const limit = 256 << 10
	specs := []Spec{
		{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowDay, Capacity: 1e9},
		{Scope: ScopeAPIKey, Key: keyID, Unit: UnitConcurrentRequests, Capacity: 1e9},
		{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitTotalTokens, Window: WindowMinute, Capacity: 1e12},
	}
	b, _ := newBroker(t, specs, func(o *Options) { o.MaxStateBytes = limit })
	var open []*Reservation
	var ref *Refusal
	for i := 0; ref == nil; i++ {
		require.Less(t, i, limit, "the broker never refused")
		r, rf, err := b.Reserve(t.Context(), maxReq(i))
		require.NoError(t, err)
		if r != nil {
			open = append(open, r)
		}
		ref = rf
	}
	require.Equal(t, CodeStateFull, ref.Code)
	require.Equal(t, ReasonRetryableCapacity, ref.Reason)
	require.NotEmpty(t, open)
	used, room := b.StateBytes()
	require.LessOrEqual(t, used, room)
	t.Logf("%d reservations of %d bytes at most fill %d of %d bytes of room", len(open), MaxEntryBytes(len(open[0].Charges)), used, room)

	snap := b.Snapshot()
	require.LessOrEqual(t, len(snap), limit)
	require.GreaterOrEqual(t, int64(len(snap)), used*3/4, "the bound is not far above what is written")
	nb, _ := newBroker(t, specs, func(o *Options) { o.MaxStateBytes = limit })
	require.NoError(t, nb.Restore(snap, t0))
	require.Equal(t, len(open), nb.Open())

	_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: open[0].ID, Outcome: OutcomeOK})
	require.NoError(t, err)
	r, rf, err := b.Reserve(t.Context(), maxReq(-1))
	require.NoError(t, err)
	require.Nil(t, rf, "a reservation that ended made room")
	require.NotNil(t, r)
}

// TestLongFieldsAreRefused: the broker bounds what it stores itself, not
// only through the gRPC boundary's checks.
func TestLongFieldsAreRefused(t *testing.T) {
	b, _ := newBroker(t, hierarchy())
	r := req(one)
	r.RequestID = strings.Repeat("r", validate.MaxIDLen+1)
	_, _, err := b.Reserve(t.Context(), r)
	require.ErrorIs(t, err, ErrInvalid)
	r = req(one)
	r.IdempotencyKey = strings.Repeat("k", 900<<10)
	_, _, _, err = b.ReserveWait(t.Context(), r)
	require.ErrorIs(t, err, ErrInvalid)
	require.Zero(t, b.Open())
}

// TestNothingIsAdmittedWhileTheStateIsNotDurable: while the owner cannot
// save its state the broker refuses (broker_not_durable) and admits again
// once it can.
func TestNothingIsAdmittedWhileTheStateIsNotDurable(t *testing.T) {
	b, _ := newBroker(t, hierarchy())
	b.SetDurable(false)
	r, ref, err := b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	require.Nil(t, r)
	require.Equal(t, CodeNotDurable, ref.Code)
	require.Zero(t, b.Open())
	b.SetDurable(true)
	r, ref, err = b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	require.Nil(t, ref)
	require.NotNil(t, r)
}
