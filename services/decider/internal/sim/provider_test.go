package sim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMedianCurve(t *testing.T) {
	t.Parallel()
	curve := []CurvePoint{{Tokens: 31, TTFT: Duration(1700 * time.Millisecond)}, {Tokens: 105000, TTFT: Duration(15500 * time.Millisecond)}}
	tests := []struct {
		name string
		eff  float64
		want time.Duration
	}{
		{"first point", 31, 1700 * time.Millisecond},
		{"last point", 105000, 15500 * time.Millisecond},
		{"between", (31 + 105000) / 2.0, 8600 * time.Millisecond},
		{"past the last, along the last segment", 105000 + 104969, 29300 * time.Millisecond},
		{"before the first, never below 1ms", -1e9, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, float64(tt.want), median(curve, tt.eff), float64(time.Millisecond))
		})
	}
	require.Equal(t, float64(2*time.Second), median([]CurvePoint{{Tokens: 0, TTFT: Duration(2 * time.Second)}}, 5e5), "one point: flat")
}

func TestSlowEpisodes(t *testing.T) {
	t.Parallel()
	p := newProvider(priced(Provider{Slow: []Episode{
		{From: ClockTime(23 * time.Hour), Duration: Duration(2 * time.Hour), Factor: 2},
		{From: ClockTime(0), Duration: Duration(30 * time.Minute), Factor: 3},
	}}), "p/m")
	day := time.Date(2026, 10, 28, 0, 0, 0, 0, time.UTC)
	require.Equal(t, 6.0, p.slowdown(day.Add(10*time.Minute)), "both episodes, the first from the day before")
	require.Equal(t, 2.0, p.slowdown(day.Add(45*time.Minute)))
	require.Equal(t, 1.0, p.slowdown(day.Add(time.Hour)), "ended at 01:00")
	require.Equal(t, 2.0, p.slowdown(day.Add(23*time.Hour+time.Minute)))
}

func TestCapacitySlidingMinute(t *testing.T) {
	t.Parallel()
	p := newProvider(priced(Provider{Capacity: Capacity{RequestsPerMinute: 2, TokensPerMinute: 1000, RetryAfter: Duration(7 * time.Second)},
		TTFT: TTFTModel{Curve: []CurvePoint{{TTFT: Duration(time.Second)}}}}), "p/m")
	t0 := time.Date(2026, 10, 28, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	require.Equal(t, outcomeOK, p.call(t0, rng, 100, -1, sharedPrefix{}).outcome)
	require.Equal(t, outcomeOK, p.call(t0.Add(time.Second), rng, 100, -1, sharedPrefix{}).outcome)
	a := p.call(t0.Add(2*time.Second), rng, 100, -1, sharedPrefix{})
	require.Equal(t, outcomeRateLimited, a.outcome, "a third request within the minute")
	require.Equal(t, 7*time.Second, a.retryAfter)
	require.Equal(t, outcomeOK, p.call(t0.Add(time.Minute), rng, 100, -1, sharedPrefix{}).outcome, "the first left the window")
	require.Equal(t, outcomeRateLimited, p.call(t0.Add(90*time.Second), rng, 950, -1, sharedPrefix{}).outcome, "with the call at 1:00, over the tokens per minute")
}

func TestPromptCache(t *testing.T) {
	t.Parallel()
	p := newProvider(priced(Provider{Cache: CacheModel{HitRate: 1, Lifetime: Duration(5 * time.Minute)},
		TTFT: TTFTModel{Curve: []CurvePoint{{Tokens: 0, TTFT: Duration(100 * time.Millisecond)}, {Tokens: 100000, TTFT: Duration(10 * time.Second)}}}}), "p/m")
	t0 := time.Date(2026, 10, 28, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	first := p.call(t0, rng, 60000, 7, sharedPrefix{})
	require.Zero(t, first.cached, "nothing cached yet")
	p.warm(7, 60000, t0.Add(first.ttft), sharedPrefix{})
	next := p.call(t0.Add(time.Minute), rng, 70000, 7, sharedPrefix{})
	require.Equal(t, int64(60000), next.cached)
	require.Less(t, next.ttft, first.ttft, "cache reads are free with weight 0")
	require.Zero(t, p.call(t0.Add(time.Minute), rng, 70000, 8, sharedPrefix{}).cached, "another session")
	require.Zero(t, p.call(t0.Add(time.Minute), rng, 70000, -1, sharedPrefix{}).cached, "a one-off request")
	require.Zero(t, p.call(t0.Add(10*time.Minute), rng, 70000, 7, sharedPrefix{}).cached, "expired")

	// A system prompt shared between conversations: read for session 7,
	// it is cached for session 9, which starts with it too, and not for
	// one with another system prompt.
	sys := sharedPrefix{id: 1, tokens: 20000}
	p.warm(7, 65000, t0.Add(11*time.Minute), sys)
	require.Equal(t, int64(20000), p.call(t0.Add(12*time.Minute), rng, 60000, 9, sys).cached)
	require.Zero(t, p.call(t0.Add(12*time.Minute), rng, 60000, 9, sharedPrefix{id: 2, tokens: 20000}).cached)
	require.Equal(t, int64(65000), p.call(t0.Add(12*time.Minute), rng, 70000, 7, sys).cached, "its own earlier turn, the longer")
}

// priced gives cfg the prices every parsed profile has.
func priced(cfg Provider) Provider {
	in, out := 1.0, 2.0
	cfg.Price = Price{Input: &in, Output: &out}
	return cfg
}

func TestScriptedOutage(t *testing.T) {
	t.Parallel()
	p := newProvider(priced(Provider{Errors: Errors{Outages: []Outage{{From: ClockTime(40 * time.Second), Duration: Duration(20 * time.Second)}}},
		TTFT: TTFTModel{Curve: []CurvePoint{{TTFT: Duration(time.Second)}}}}), "p/m")
	t0 := time.Date(2026, 10, 28, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	require.Equal(t, outcomeOK, p.call(t0.Add(39*time.Second), rng, 100, -1, sharedPrefix{}).outcome, "before the outage")
	a := p.call(t0.Add(40*time.Second), rng, 100, -1, sharedPrefix{})
	require.Equal(t, outcomeServerError, a.outcome, "from its start")
	require.Equal(t, 100*time.Millisecond, a.ttft, "refused at once")
	require.Equal(t, outcomeServerError, p.call(t0.Add(59*time.Second), rng, 100, -1, sharedPrefix{}).outcome)
	require.Equal(t, outcomeOK, p.call(t0.Add(60*time.Second), rng, 100, -1, sharedPrefix{}).outcome, "over after its duration")
	require.Equal(t, outcomeServerError, p.call(t0.Add(24*time.Hour+45*time.Second), rng, 100, -1, sharedPrefix{}).outcome, "every day")
}
