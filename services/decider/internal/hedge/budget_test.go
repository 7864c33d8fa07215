package hedge

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
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
	require.NoError(t, b.Restore(state(t, "2026-11-30", 1)))
	b.Settle("r1", 0)
	spent, _, _, _ = b.Status()
	require.InDelta(t, 1, spent, 1e-12, "no pending estimate left to settle")
}

// TestPacedBudgetLastsTheDay: a paced budget grants, at time t of the UTC
// day, up to daily × (t + burst) / (24h + burst), so hedges asked for all
// day long are granted in the evening too, not only after midnight. $26 a
// day with a 2-hour burst allows $1 an hour, $2 ahead.
func TestPacedBudgetLastsTheDay(t *testing.T) {
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	now := day
	b := NewPaced(Options{DailyUSD: 26, Burst: 2 * time.Hour, Now: func() time.Time { return now }})

	// At 00:00 the burst alone: $2.
	ok, left, reset := b.Acquire("r1", 1.5)
	require.True(t, ok)
	require.InDelta(t, 24.5, left, 1e-12, "what is left of the day's budget")
	require.Equal(t, day.Add(24*time.Hour), reset)
	ok, _, _ = b.Acquire("r2", 1)
	require.False(t, ok, "$2.5 is past 00:00's allowance of $2")
	ok, _, _ = b.Acquire("r2", 0.5)
	require.True(t, ok, "exactly the allowance")

	// What the quiet hours did not spend waits for the busy ones.
	now = day.Add(10 * time.Hour) // $12
	ok, _, _ = b.Acquire("r3", 10)
	require.True(t, ok)
	ok, _, _ = b.Acquire("r4", 0.01)
	require.False(t, ok, "$12 spent by 10:00")
	now = now.Add(30 * time.Minute)
	ok, _, _ = b.Acquire("r4", 0.5)
	require.True(t, ok, "half an hour later, half an hour's share more")

	// A settled loser that cost less gives the difference back at once.
	b.Settle("r3", 1)
	ok, _, _ = b.Acquire("r5", 9)
	require.True(t, ok)

	// At 23:00, $25: the day's last hour keeps its share.
	now = day.Add(23 * time.Hour)
	spent, _, _, _ := b.Status()
	ok, _, _ = b.Acquire("r6", 25-spent+0.01)
	require.False(t, ok)
	ok, _, _ = b.Acquire("r6", 25-spent)
	require.True(t, ok)
	now = day.Add(24*time.Hour - time.Second)
	ok, _, _ = b.Acquire("r7", 0.99)
	require.True(t, ok, "the last hour's share")

	// A new UTC day starts from the burst again.
	now = day.Add(24*time.Hour + time.Hour)
	ok, _, _ = b.Acquire("r8", 3)
	require.True(t, ok, "01:00 allows (1 + 2) hours' share")
	ok, _, _ = b.Acquire("r9", 0.01)
	require.False(t, ok)
	_, _, granted, refused := b.Status()
	require.EqualValues(t, 8, granted)
	require.EqualValues(t, 4, refused)
}

// TestPacingDefaultsAndUnpaced: Burst defaults to an hour; Unpaced lets a
// day's first hedge spend the whole budget, as New does.
func TestPacingDefaultsAndUnpaced(t *testing.T) {
	midnight := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return midnight }
	paced := NewPaced(Options{DailyUSD: 25, Now: clock})
	ok, _, _ := paced.Acquire("r1", 1.01)
	require.False(t, ok, "the default burst is one hour's share, $1")
	ok, _, _ = paced.Acquire("r1", 1)
	require.True(t, ok)
	for _, b := range []*Budget{NewPaced(Options{DailyUSD: 24, Burst: Unpaced, Now: clock}), NewPaced(Options{DailyUSD: 24, Burst: 48 * time.Hour, Now: clock}), New(24, clock)} {
		ok, _, _ := b.Acquire("r1", 24)
		require.True(t, ok, "unpaced: the whole day's budget at midnight")
	}
}

// TestPacedBudgetSurvivesRestart: pacing reads the restored spend, so a
// new owner grants no more than the old one would have.
func TestPacedBudgetSurvivesRestart(t *testing.T) {
	now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC) // $25 a day: (6 + 1) × $1
	clock := func() time.Time { return now }
	old := NewPaced(Options{DailyUSD: 25, Now: clock})
	ok, _, _ := old.Acquire("r1", 6.5)
	require.True(t, ok)
	data, changed := old.Snapshot()
	require.True(t, changed)

	b := NewPaced(Options{DailyUSD: 25, Now: clock})
	require.NoError(t, b.Restore(data))
	ok, _, _ = b.Acquire("r2", 0.6)
	require.False(t, ok, "$6.5 of $7 spent before the restart")
	b.Settle("r1", 2) // the old owner's estimate, settled by the new one
	ok, _, _ = b.Acquire("r2", 5)
	require.True(t, ok)
}

// TestPendingEstimatesStayWithinTheStateLimit: hedges of requests with the
// longest ids fill the saved state up to its limit and no further; a
// settlement makes room again, and an id longer than allowed is refused.
func TestPendingEstimatesStayWithinTheStateLimit(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	b := New(1e9, func() time.Time { return now })
	id := func(i int) string {
		s := fmt.Sprintf("req-%d-", i)
		return s + strings.Repeat("<", validate.MaxIDLen-len(s)) // '<' is escaped: six bytes in JSON
	}
	granted := 0
	for i := 0; ; i++ {
		require.Less(t, i, MaxStateBytes, "the budget never refused")
		ok, _, _ := b.Acquire(id(i), 0.01)
		if !ok {
			break
		}
		granted++
	}
	require.Positive(t, granted)
	data, _ := b.Snapshot()
	require.LessOrEqual(t, len(data), MaxStateBytes)
	t.Logf("%d pending hedges take %d of %d bytes", granted, len(data), MaxStateBytes)

	b.Settle(id(0), 0)
	ok, _, _ := b.Acquire(id(-1), 0.01)
	require.True(t, ok, "a settlement made room")
	ok, _, _ = b.Acquire(strings.Repeat("r", validate.MaxIDLen+1), 0.01)
	require.False(t, ok)
}

// state is a saved state of day with spent and no pending estimate.
func state(t *testing.T, day string, spent float64) []byte {
	t.Helper()
	data, err := proto.Marshal(&statev1.HedgeBudgetState{Day: day, SpentUsd: spent})
	require.NoError(t, err)
	return data
}

// TestRequestIDNotUTF8Refused: an id the saved state cannot hold (a
// protobuf string is UTF-8) is refused, and the state stays writable.
func TestRequestIDNotUTF8Refused(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := New(5, func() time.Time { return now })
	ok, _, _ := b.Acquire("r\xff", 1)
	require.False(t, ok)
	ok, _, _ = b.Acquire("r1", 1)
	require.True(t, ok)
	data, changed := b.Snapshot()
	require.True(t, changed)
	require.NotEmpty(t, data)
}

// Each grant is settled once, however often its record arrives: a loser
// paid counts as cancelled, a settlement at 0 does not; an unknown id is
// not a settlement.
func TestSettledCountsEachGrantOnce(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := New(1.0, func() time.Time { return now })
	for _, id := range []string{"r1", "r2"} {
		ok, _, _ := b.Acquire(id, 0.1)
		require.True(t, ok)
	}
	b.Settle("r1", 0.05)
	b.Settle("r1", 0.05) // the same record again
	b.Settle("r2", 0)
	b.Settle("unknown", 0.05)
	settled, cancelled := b.Settled()
	require.EqualValues(t, 2, settled)
	require.EqualValues(t, 1, cancelled)
}
