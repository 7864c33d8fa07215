package hedge

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// notAmounts are what an edge may send that is not an amount of money.
var notAmounts = []float64{math.NaN(), math.Inf(1), math.Inf(-1), -0.01, -5}

func TestAcquireRefusesWhatIsNotAnAmount(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := New(5, func() time.Time { return now })
	for _, v := range notAmounts {
		ok, left, _ := b.Acquire("bad", v)
		require.False(t, ok, "estimate %v", v)
		require.InDelta(t, 5, left, 1e-12, "estimate %v", v)
	}
	// The attack of three $4.90 hedges after a NaN: the first only.
	ok, _, _ := b.Acquire("r1", 4.9)
	require.True(t, ok)
	for _, id := range []string{"r2", "r3"} {
		ok, _, _ := b.Acquire(id, 4.9)
		require.False(t, ok, id)
	}
	spent, _, granted, refused := b.Status()
	require.InDelta(t, 4.9, spent, 1e-12)
	require.Equal(t, int64(1), granted)
	require.Equal(t, int64(len(notAmounts)+2), refused)
	data, _ := b.Snapshot()
	require.NotEmpty(t, data)
}

func TestSettleNeverGivesBackMoreThanWasTaken(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := New(5, func() time.Time { return now })
	ok, _, _ := b.Acquire("r1", 2)
	require.True(t, ok)
	for _, v := range notAmounts {
		b.Settle("r1", v) // not an amount: the estimate stays charged
		spent, _, _, _ := b.Status()
		require.InDelta(t, 2, spent, 1e-12, "settled at %v", v)
	}
	b.Settle("r1", 0) // the call cost nothing: its estimate comes back
	spent, _, _, _ := b.Status()
	require.InDelta(t, 0, spent, 1e-12)
	b.Settle("r1", 0) // settled once only
	b.Settle("never-acquired", 0)
	ok, _, _ = b.Acquire("r2", 1)
	require.True(t, ok)
	b.Settle("r1", 0)
	spent, _, _, _ = b.Status()
	require.InDelta(t, 1, spent, 1e-12, "a second settlement gives nothing back")
}

func TestUnreadableStateCountsTheDayAsSpent(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	for _, data := range []string{"", "{", string(state(t, "2026-11-30", -1)), "2026-11-30", `null`} {
		b := New(5, clock)
		require.Error(t, b.Restore([]byte(data)), "%q", data)
		ok, left, _ := b.Acquire("r1", 0.01)
		require.False(t, ok, "state %q: the day starts again at $5", data)
		require.InDelta(t, 0, left, 1e-12)
		saved, changed := b.Snapshot()
		require.True(t, changed, "the spent day is saved over the bad state")
		b2 := New(5, clock)
		require.NoError(t, b2.Restore(saved))
		ok, _, _ = b2.Acquire("r1", 0.01)
		require.False(t, ok, "and the next owner keeps it")
	}
	// The next UTC day starts afresh.
	b := New(5, clock)
	require.Error(t, b.Restore(nil))
	now = now.Add(12 * time.Hour)
	ok, _, _ := b.Acquire("r1", 1)
	require.True(t, ok)
}

func TestUnwritableBudgetGrantsNothing(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := New(5, func() time.Time { return now })
	b.Durable(false)
	ok, _, _ := b.Acquire("r1", 1)
	require.False(t, ok, "a grant the next owner would not know of")
	b.Durable(true)
	ok, _, _ = b.Acquire("r1", 1)
	require.True(t, ok)
}

func TestDailyThatIsNotAnAmountGrantsNothing(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, d := range notAmounts {
		b := New(d, func() time.Time { return now })
		ok, _, _ := b.Acquire("r1", 0)
		require.False(t, ok, "daily %v", d)
	}
}
