package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	require.Zero(t, percentile(nil, 50))
	one := []time.Duration{7}
	require.Equal(t, time.Duration(7), percentile(one, 50))
	require.Equal(t, time.Duration(7), percentile(one, 99))

	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, time.Duration(i))
	}
	// Nearest rank: the smallest value with at least p% of values at or below it.
	require.Equal(t, time.Duration(50), percentile(hundred, 50))
	require.Equal(t, time.Duration(99), percentile(hundred, 99))
	require.Equal(t, time.Duration(100), percentile(hundred, 100))
	require.Equal(t, time.Duration(1), percentile(hundred, 0.5))

	ten := hundred[:10]
	require.Equal(t, time.Duration(5), percentile(ten, 50))
	require.Equal(t, time.Duration(10), percentile(ten, 99), "with few values p99 is the largest")
}

func TestSpread(t *testing.T) {
	require.Equal(t, spread{}, spreadOf(nil))
	require.Equal(t, spread{Med: 2, Min: 1, Max: 9, N: 3}, spreadOf([]float64{9, 1, 2}))
	require.Equal(t, spread{Med: 2.5, Min: 1, Max: 9, N: 4}, spreadOf([]float64{9, 1, 2, 3}))

	require.Equal(t, "–", spread{}.format("%.1f"))
	require.Equal(t, "3.0", spreadOf([]float64{3}).format("%.1f"), "one round: no range")
	require.Equal(t, "2 [1–9]", spreadOf([]float64{9, 1, 2}).format("%.0f"))
	require.Equal(t, "+0.25 [-0.10–+0.40]", spreadOf([]float64{0.25, -0.1, 0.4}).signed())
	require.Equal(t, "0.38x [0.35x–0.41x]", spreadOf([]float64{0.41, 0.35, 0.38}).format("%.2fx"))
}

func TestPairwise(t *testing.T) {
	require.Equal(t, []float64{0.5, 2}, pairwise([]float64{1, 4, 9}, []float64{2, 2}, ratio), "rounds pair up; extras are ignored")
	require.Equal(t, []float64{0}, pairwise([]float64{1}, []float64{0}, ratio), "no division by zero")
	require.Equal(t, []float64{-1, 2}, pairwise([]float64{1, 4}, []float64{2, 2}, minus))
}

// samples builds one round's sample per rps value, with every latency and
// time to first chunk equal to lat and the CPU given per process in total.
func samples(lat time.Duration, cpu map[string]time.Duration, rpss ...float64) []sample {
	var out []sample
	for _, r := range rpss {
		s := sample{ok: int(r), elapsed: time.Second, cpu: cpu}
		for range int(r) {
			s.latencies = append(s.latencies, lat)
			s.ttfc = append(s.ttfc, lat/2)
		}
		out = append(out, s)
	}
	return out
}

func TestRows(t *testing.T) {
	by := map[string][]sample{
		direct:      samples(time.Millisecond, map[string]time.Duration{"upstream": 100 * time.Millisecond}, 1000, 1000),
		proxy:       samples(2*time.Millisecond, map[string]time.Duration{"proxy": 250 * time.Millisecond}, 500, 400),
		switchboard: samples(4*time.Millisecond, map[string]time.Duration{"edge": 200 * time.Millisecond, "decider": 100 * time.Millisecond}, 200, 200),
	}
	rs := rows(load{conc: 64, stream: true}, by)
	require.Len(t, rs, 3)
	require.Equal(t, []string{direct, proxy, switchboard}, []string{rs[0].target, rs[1].target, rs[2].target})
	for _, r := range rs {
		require.Equal(t, "c=64 streaming", r.load)
	}

	px, sb := rs[1], rs[2]
	require.Equal(t, spread{Med: 1, Min: 1, Max: 1, N: 2}, px.vsProxy)
	require.Equal(t, spread{Med: 0.45, Min: 0.4, Max: 0.5, N: 2}, sb.vsProxy, "round by round: 200/500 and 200/400")
	require.InDelta(t, 3, sb.addP50.Med, 1e-9, "4 ms against direct's 1 ms")
	require.InDelta(t, 1.5, sb.addTTFC.Med, 1e-9)
	require.InDelta(t, 1, px.addP99.Med, 1e-9)

	// CPU per request: 200 ms over 200 requests is 1000 µs; over 400, 500.
	require.Equal(t, spread{Med: 1000, Min: 1000, Max: 1000, N: 2}, sb.cpu["edge"])
	require.Equal(t, spread{Med: 500, Min: 500, Max: 500, N: 2}, sb.cpu["decider"])
	require.Equal(t, spread{Med: 1500, Min: 1500, Max: 1500, N: 2}, sb.cpuTotal)
	require.Equal(t, spread{Med: 562.5, Min: 500, Max: 625, N: 2}, px.cpuTotal)

	delete(by, proxy)
	rs = rows(load{conc: 1}, by)
	require.Len(t, rs, 2, "a target not run has no row")
	require.Zero(t, rs[1].vsProxy.N, "no proxy, no ratio")
}
