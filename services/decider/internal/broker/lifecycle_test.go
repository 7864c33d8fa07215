package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var lifecycleSpecs = []Spec{
	{Scope: ScopeTenant, Key: tenant, Unit: UnitUSD, Window: WindowDay, Capacity: 1},
	{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 1},
}

const (
	usdBucket = "tenant:acme:usd:day"
	ccBucket  = "tenant:acme:concurrent_requests"
)

// A stream that outlives its reservation's TTL keeps its concurrency slot
// while its edge declares it, and its final reconcile charges what it used.
func TestExtendKeepsALongCallsReservation(t *testing.T) {
	b, c := newBroker(t, lifecycleSpecs)
	r, _, err := b.Reserve(t.Context(), req(Demand{USD: 0.1}))
	require.NoError(t, err)
	for range 10 { // 10 minutes of a 2-minute TTL, declared every 40s
		for range 3 {
			c.Advance(40 * time.Second)
			n, err := b.Extend(t.Context(), []string{r.ID, "nope", "r000000000000ff0000000000000001"}, nil)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Zero(t, b.Expire(c.Now()))
		}
	}
	n, ref, _ := reserveN(t, b, 1, Demand{USD: 0.01})
	require.Zero(t, n, "the slot is still held")
	require.Equal(t, ScopeTenant, ref.Scope)

	st, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Usage: Usage{CostUSD: 0.7}, Outcome: OutcomeOK})
	require.NoError(t, err)
	require.False(t, st.Late)
	require.InDelta(t, 0.3, level(t, b, usdBucket), 1e-9, "the overrun is charged")
	require.Equal(t, 1.0, level(t, b, ccBucket))
}

// Without declarations a reservation expires; its late reconcile is still
// charged, once, and a declaration of it then changes nothing.
func TestExpiredReservationIsChargedLate(t *testing.T) {
	b, c := newBroker(t, lifecycleSpecs)
	r, _, err := b.Reserve(t.Context(), req(Demand{USD: 0.1}))
	require.NoError(t, err)
	c.Advance(3 * time.Minute)
	require.Equal(t, 1, b.Expire(c.Now()))
	require.Equal(t, 1.0, level(t, b, ccBucket), "expiry released the slot")
	require.InDelta(t, 0.9, level(t, b, usdBucket), 1e-9, "expiry keeps the estimate as spent")
	n, err := b.Extend(t.Context(), []string{r.ID}, nil)
	require.NoError(t, err)
	require.Zero(t, n, "an expired reservation is not revived")

	for i := range 3 {
		st, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Usage: Usage{CostUSD: 0.5}, Outcome: OutcomeOK})
		if i == 0 {
			require.NoError(t, err)
			require.True(t, st.Late)
		} else {
			require.ErrorIs(t, err, ErrAlreadyReconciled, "applied once")
		}
		require.InDelta(t, 0.5, level(t, b, usdBucket), 1e-9, "the real spend, not the estimate")
		require.Equal(t, 1.0, level(t, b, ccBucket), "the slot is not released twice")
	}

	// Past the tombstone's life the id is simply unknown.
	r2, _, err := b.Reserve(t.Context(), req(Demand{USD: 0.1}))
	require.NoError(t, err)
	c.Advance(3 * time.Minute)
	b.Expire(c.Now())
	c.Advance(b.opts.Tombstone)
	b.Expire(c.Now())
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r2.ID, Usage: Usage{CostUSD: 0.5}})
	require.ErrorIs(t, err, ErrNotFound)
	require.NotErrorIs(t, err, ErrAlreadyReconciled)
}

// A reservation restored from a snapshot is reconciled once on the new
// owner, keeps its TTL for Extend, and a restored one that expired on the
// way is charged late.
func TestRestoredReservationsReconcileOnce(t *testing.T) {
	old, c := newBroker(t, lifecycleSpecs)
	r, _, err := old.Reserve(t.Context(), req(Demand{USD: 0.1}))
	require.NoError(t, err)
	snap := old.Snapshot()

	nb, _ := newBroker(t, lifecycleSpecs, func(o *Options) { o.Now = c.Now })
	require.NoError(t, nb.Restore(snap, c.Now()))
	c.Advance(100 * time.Second)
	n, err := nb.Extend(t.Context(), []string{r.ID}, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	c.Advance(100 * time.Second) // past the original expiry, within the extension
	require.Zero(t, nb.Expire(c.Now()))
	_, err = nb.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Usage: Usage{CostUSD: 0.2}})
	require.NoError(t, err)
	_, err = nb.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Usage: Usage{CostUSD: 0.2}})
	require.ErrorIs(t, err, ErrAlreadyReconciled)
	require.InDelta(t, 0.8, level(t, nb, usdBucket), 1e-9)
	require.Equal(t, 1.0, level(t, nb, ccBucket))
}

// Extend moves an open reservation's expiry while snapshots are taken: the
// race detector must find nothing, and a snapshot holds a consistent expiry.
func TestExtendWhileSnapshotting(t *testing.T) {
	b, c := newBroker(t, lifecycleSpecs[:1])
	var ids []string
	for range 8 {
		r, _, err := b.Reserve(t.Context(), req(Demand{USD: 0.01}))
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	done := make(chan error, 1)
	go func() {
		for range 200 {
			c.Advance(time.Millisecond)
			if n, err := b.Extend(t.Context(), ids, nil); err != nil || n != len(ids) {
				done <- fmt.Errorf("extend: %d of %d, %v", n, len(ids), err)
				return
			}
		}
		done <- nil
	}()
	for range 50 {
		nb, _ := newBroker(t, lifecycleSpecs[:1], func(o *Options) { o.Now = c.Now })
		require.NoError(t, nb.Restore(b.Snapshot(), c.Now()))
		require.Equal(t, len(ids), nb.Open())
	}
	require.NoError(t, <-done)
}
