package pricing

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCost(t *testing.T) {
	p := Price{Input: 0.20, CachedInput: 0.07, Output: 0.80}
	tests := []struct {
		name string
		u    Usage
		want float64
	}{
		{"nothing", Usage{}, 0},
		{"uncached input only", Usage{Input: 1_000_000}, 0.20},
		{"cached part at the cached price", Usage{Input: 60_000, CachedInput: 50_000}, (10_000*0.20 + 50_000*0.07) / 1e6},
		{"output", Usage{Output: 500}, 500 * 0.80 / 1e6},
		{"all three", Usage{Input: 1200, CachedInput: 1024, Output: 8}, (176*0.20 + 1024*0.07 + 8*0.80) / 1e6},
		{"cached above input counts as all cached", Usage{Input: 100, CachedInput: 400}, 100 * 0.07 / 1e6},
		{"negative counts are zero", Usage{Input: -5, CachedInput: -1, Output: -9}, 0},
		{"float noise is rounded away", Usage{Input: 21}, 0.0000042},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, Cost(p, tt.u), 1e-15)
		})
	}
	require.Equal(t, 0.0000042, Cost(p, Usage{Input: 21}), "exactly, not 0.0000042000000000000004")
}

func TestCostWithCacheWrites(t *testing.T) {
	// Anthropic's own ratios: 5-minute writes at 1.25x input, 1-hour writes at 2x, reads at 0.1x.
	p := Price{Input: 3, CachedInput: 0.3, CacheWrite: 3.75, CacheWrite1h: 6, Output: 15}
	tests := []struct {
		name string
		u    Usage
		want float64
	}{
		{"5-minute writes at the write price", Usage{Input: 10_000, CacheWrite: 8_000, Output: 100},
			(2_000*3 + 8_000*3.75 + 100*15) / 1e6},
		{"1-hour writes at theirs", Usage{Input: 10_000, CacheWrite1h: 8_000}, (2_000*3 + 8_000*6) / 1e6},
		{"reads, both writes and the rest", Usage{Input: 10_000, CachedInput: 4_000, CacheWrite: 3_000, CacheWrite1h: 2_000, Output: 10},
			(1_000*3 + 4_000*0.3 + 3_000*3.75 + 2_000*6 + 10*15) / 1e6},
		{"writes beyond the uncached input are capped to it", Usage{Input: 1_000, CachedInput: 600, CacheWrite: 300, CacheWrite1h: 900},
			(600*0.3 + 300*3.75 + 100*6) / 1e6},
		{"negative writes are zero", Usage{Input: 1_000, CacheWrite: -5, CacheWrite1h: -7}, 1_000 * 3 / 1e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, Cost(p, tt.u), 1e-12)
		})
	}
}

func TestRequestWrites(t *testing.T) {
	tests := []struct {
		name     string
		r        Request
		w5m, w1h int64
	}{
		{"no breakpoints", Request{InputTokens: 100}, 0, 0},
		{"the prompt up to the breakpoint", Request{InputTokens: 100, CacheBreakpointTokens: 80}, 80, 0},
		{"less what is cached", Request{InputTokens: 100, CachedTokens: 30, CacheBreakpointTokens: 80}, 50, 0},
		{"the 1-hour part first", Request{InputTokens: 100, CacheBreakpointTokens: 80, CacheBreakpoint1hTokens: 50}, 30, 50},
		{"cached beyond the 1-hour part", Request{InputTokens: 100, CachedTokens: 60, CacheBreakpointTokens: 80, CacheBreakpoint1hTokens: 50}, 20, 0},
		{"breakpoints beyond the prompt are the prompt", Request{InputTokens: 100, CacheBreakpointTokens: 900, CacheBreakpoint1hTokens: 700}, 0, 100},
		{"a 1-hour part beyond the whole", Request{InputTokens: 100, CacheBreakpointTokens: 10, CacheBreakpoint1hTokens: 40}, 0, 40},
		{"negative counts are none", Request{InputTokens: 100, CacheBreakpointTokens: -5, CacheBreakpoint1hTokens: -1}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w5m, w1h := tt.r.Writes()
			require.Equal(t, [2]int64{tt.w5m, tt.w1h}, [2]int64{w5m, w1h})
		})
	}
}

func TestEstimateOutput(t *testing.T) {
	p := Price{Input: 1, CachedInput: 0.5, Output: 2}
	tests := []struct {
		name    string
		r       Request
		wantOut int64
	}{
		{"max_tokens wins", Request{MaxOutputTokens: 10, TypicalOutputTokens: 99}, 10},
		{"typical output without max_tokens", Request{TypicalOutputTokens: 99}, 99},
		{"default without either", Request{}, DefaultOutputTokens},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.wantOut, tt.r.OutputTokens())
			r := tt.r
			r.InputTokens, r.CachedTokens = 3000, 1000
			require.Equal(t, Cost(p, Usage{Input: 3000, CachedInput: 1000, Output: tt.wantOut}), Estimate(p, r))
		})
	}
	// A max_tokens near 2^63 prices as a huge number, not a wrapped negative one.
	require.Positive(t, Estimate(p, Request{MaxOutputTokens: math.MaxInt64}))
}

// TestCostProperties checks the rules every caller relies on, over random
// prices and usages: a cost is never negative; more tokens never cost less;
// reading from cache never costs more than uncached input when the cached
// price is the lower one; costs add up across calls (within the rounding);
// and a rounded amount is its own rounding.
func TestCostProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const roundingSlack = 2e-10
	for range 20000 {
		p := Price{Input: rng.Float64() * 20, Output: rng.Float64() * 80}
		p.CachedInput = p.Input * rng.Float64()
		u := Usage{Input: rng.Int64N(300_000), Output: rng.Int64N(40_000)}
		u.CachedInput = rng.Int64N(u.Input + 1)
		c := Cost(p, u)
		require.GreaterOrEqual(t, c, 0.0)
		require.Equal(t, c, Round(c))

		more := u
		switch rng.IntN(3) {
		case 0:
			more.Input += 1 + rng.Int64N(1000)
		case 1:
			more.Output += 1 + rng.Int64N(1000)
		default:
			more.Input++
			more.CachedInput++
		}
		require.GreaterOrEqual(t, Cost(p, more)+roundingSlack, c, "%+v then %+v at %+v", u, more, p)

		cachedMore := u
		cachedMore.CachedInput = min(u.Input, u.CachedInput+1+rng.Int64N(1000))
		require.LessOrEqual(t, Cost(p, cachedMore), c+roundingSlack, "%+v then %+v at %+v", u, cachedMore, p)

		v := Usage{Input: rng.Int64N(300_000), Output: rng.Int64N(40_000)}
		v.CachedInput = rng.Int64N(v.Input + 1)
		sum := Usage{Input: u.Input + v.Input, CachedInput: u.CachedInput + v.CachedInput, Output: u.Output + v.Output}
		require.InDelta(t, Cost(p, u)+Cost(p, v), Cost(p, sum), roundingSlack)
	}
}
