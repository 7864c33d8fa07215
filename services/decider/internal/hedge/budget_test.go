package hedge

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBudget(t *testing.T) {
	now := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)
	b := New(1.0, func() time.Time { return now })

	ok, left, reset := b.Acquire("r1", 0.6)
	require.True(t, ok)
	require.InDelta(t, 0.4, left, 1e-12)
	require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), reset)

	ok, _, _ = b.Acquire("r2", 0.5)
	require.False(t, ok, "would overspend")

	// The cancelled call cost less than estimated: the difference comes back.
	b.Settle("r1", 0.1)
	ok, left, _ = b.Acquire("r2", 0.5)
	require.True(t, ok)
	require.InDelta(t, 0.4, left, 1e-12)
	b.Settle("unknown", 5) // nothing charged for it: ignored
	spent, _, granted, refused := b.Status()
	require.InDelta(t, 0.6, spent, 1e-12)
	require.Equal(t, int64(2), granted)
	require.Equal(t, int64(1), refused)

	// Spent: long requests use one endpoint until the next UTC day.
	ok, _, _ = b.Acquire("r3", 0.5)
	require.False(t, ok)
	now = now.Add(time.Hour) // 00:00 UTC
	ok, left, _ = b.Acquire("r3", 0.5)
	require.True(t, ok, "a new UTC day refills the budget")
	require.InDelta(t, 0.5, left, 1e-12)
	b.Settle("r1", 1) // yesterday's request: not charged today
	spent, _, _, _ = b.Status()
	require.InDelta(t, 0.5, spent, 1e-12)
}

func TestBudgetSurvivesRestart(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	b := New(1.0, clock)
	b.Acquire("r1", 0.7)
	data, changed := b.Snapshot()
	require.True(t, changed)
	_, changed = b.Snapshot()
	require.False(t, changed, "nothing new to save")

	b2 := New(1.0, clock)
	require.NoError(t, b2.Restore(data))
	ok, _, _ := b2.Acquire("r2", 0.5)
	require.False(t, ok, "the restored spend counts")

	now = now.Add(24 * time.Hour)
	b3 := New(1.0, clock)
	require.NoError(t, b3.Restore(data))
	ok, _, _ = b3.Acquire("r2", 0.5)
	require.True(t, ok, "yesterday's spend does not count today")
	require.Error(t, b3.Restore([]byte("{")))
}

func TestBudgetIsAtomic(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := New(10, func() time.Time { return now })
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for i := range 64 {
		wg.Go(func() {
			for j := range 100 {
				if ok, _, _ := b.Acquire(string(rune(i*1000+j)), 0.01); ok {
					mu.Lock()
					granted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1000, granted, "exactly the budget, never more")
}

func TestRestoreCarriesPendingEstimates(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	old := New(5, clock)
	ok, _, _ := old.Acquire("r1", 2)
	require.True(t, ok)
	data, _ := old.Snapshot()

	// The next owner settles what the old one charged.
	b := New(5, clock)
	require.NoError(t, b.Restore(data))
	b.Settle("r1", 0.5)
	spent, _, _, _ := b.Status()
	require.InDelta(t, 0.5, spent, 1e-12)
	b.Settle("r1", 0.5) // twice: nothing more
	spent, _, _, _ = b.Status()
	require.InDelta(t, 0.5, spent, 1e-12)

	// Restoring replaces: an estimate settled elsewhere since is gone.
	require.NoError(t, b.Restore(data))
	spent, _, _, _ = b.Status()
	require.InDelta(t, 2, spent, 1e-12)
	require.NoError(t, b.Restore([]byte(`{"day":"2026-11-30","spent_usd":1}`)))
	b.Settle("r1", 0)
	spent, _, _, _ = b.Status()
	require.InDelta(t, 1, spent, 1e-12, "no pending estimate left to settle")
}
