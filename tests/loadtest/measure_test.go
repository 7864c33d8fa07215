package loadtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLimitBound(t *testing.T) {
	perSecond := limit{unit: "requests", per: "second", capacity: 8, burst: 16}
	require.InDelta(t, 24.0, perSecond.bound(0), 1e-9, "capacity and burst at once")
	require.InDelta(t, 24.0+12, perSecond.bound(1500*time.Millisecond), 1e-9, "plus the refill over the span")
	perMinute := limit{unit: "output_tokens", per: "minute", capacity: 6000}
	require.InDelta(t, 6000.0+100, perMinute.bound(time.Second), 1e-9)
	daily := limit{unit: "requests", per: "day", capacity: 12}
	require.InDelta(t, 12.0, daily.bound(time.Hour), 1e-9, "a daily quota does not refill")
}

func TestDailyResets(t *testing.T) {
	midnight := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	require.Equal(t, 0, dailyResets(midnight.Add(-time.Hour), midnight.Add(-time.Second)))
	require.Equal(t, 1, dailyResets(midnight.Add(-time.Second), midnight))
	require.Equal(t, 1, dailyResets(midnight.Add(-time.Second), midnight.Add(time.Second)))
	require.Equal(t, 0, dailyResets(midnight, midnight.Add(time.Hour)), "a reset at the very start is before the span")
	require.Equal(t, 2, dailyResets(midnight.Add(-time.Second), midnight.Add(24*time.Hour)))
}

func TestOverAdmissionIsCounted(t *testing.T) {
	var sr ScenarioReport
	sr.addLimit("a", "clients", 10, 12)
	sr.addLimit("b", "provider counters", 15, 12.5)
	require.InDelta(t, 2.5, sr.OverAdmission, 1e-9)
	require.Zero(t, sr.Limits[0].Over)
	require.InDelta(t, 2.5, sr.Limits[1].Over, 1e-9)
}

func TestFairShares(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		total                float64
		demand, weight, want []float64
	}{
		{"both want more: by weight", 40, []float64{100, 100}, []float64{3, 1}, []float64{30, 10}},
		{"one wants less than its share: the rest to the other", 40, []float64{5, 100}, []float64{3, 1}, []float64{5, 35}},
		{"nobody wants all of it", 40, []float64{5, 10}, []float64{3, 1}, []float64{5, 10}},
		{"three tenants, one capped", 30, []float64{2, 100, 100}, []float64{1, 1, 2}, []float64{2, 28.0 / 3, 56.0 / 3}},
		{"no demand", 10, []float64{0, 0}, []float64{1, 1}, []float64{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fairShares(tc.total, tc.demand, tc.weight)
			require.InDeltaSlice(t, tc.want, got, 1e-9)
		})
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, percentile(ds, 50))
	require.Equal(t, 99*time.Millisecond, percentile(ds, 99))
	require.Equal(t, 100*time.Millisecond, percentile(ds, 100))
	require.Equal(t, time.Duration(0), percentile(nil, 50))
}

func TestWorstWindow(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	perSecond := limit{unit: "requests", per: "second", capacity: 10}

	// Cumulative provider counters read every 100 ms: 10 in the first
	// 100 ms is the bucket's whole capacity, then a steady 1 per 100 ms.
	var sampled []point
	for i, n := range []int64{0, 10, 11, 12, 13} {
		sampled = append(sampled, point{at: at(100 * i), end: at(100 * i), c: counters{requests: n}})
	}
	w, ok := worstWindow(sampled, perSecond, 0, false)
	require.True(t, ok)
	require.LessOrEqual(t, w.observed, w.bound, "%+v", w)

	// 20 in one 100 ms window is twice what the bucket may ever hold: over,
	// whatever the whole span's total says.
	sampled[1].c.requests, sampled[2].c.requests, sampled[3].c.requests, sampled[4].c.requests = 20, 20, 20, 20
	w, ok = worstWindow(sampled, perSecond, 0, false)
	require.True(t, ok)
	require.InDelta(t, 20.0, w.observed, 1e-9)
	require.InDelta(t, 11.0, w.bound, 1e-9, "10 plus 100 ms of refill")

	// The lag widens every window: what arrived was admitted up to lag before.
	w, _ = worstWindow(sampled, perSecond, time.Second, false)
	require.InDelta(t, 21.0, w.bound, 1e-9)

	// Single events (the activity log): a window from event i to j holds
	// both ends.
	var events []point
	for i := range 12 {
		events = append(events, point{at: at(i), end: at(i), c: counters{requests: int64(i + 1)}})
	}
	w, _ = worstWindow(events, perSecond, 0, true)
	require.InDelta(t, 12.0, w.observed, 1e-9, "12 requests within 11 ms")
	require.Greater(t, w.observed, w.bound)

	_, ok = worstWindow(nil, perSecond, 0, true)
	require.False(t, ok)
}
