package stats

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// One reporter flooding a series with fast samples cannot set its figure
// alone: with three or more reporters it holds a third of the weight at
// most, so the typical value stays among the others'; with two, half; a
// sole reporter is taken as it is.
func TestReporterShareIsBounded(t *testing.T) {
	const ep = "alpha/m1"
	honest, fake := 800*time.Millisecond, 33*time.Millisecond
	tests := []struct {
		name   string
		honest []string // reporters of 3 honest samples each
		flood  int      // fake samples from "mallory"
		want   func(t *testing.T, got time.Duration)
	}{
		{name: "three reporters: the flood holds a third", honest: []string{"edge-1", "edge-2"}, flood: 200,
			want: func(t *testing.T, got time.Duration) { require.Equal(t, honest, got) }},
		{name: "two reporters: neither decides alone", honest: []string{"edge-1"}, flood: 200,
			want: func(t *testing.T, got time.Duration) {
				require.Greater(t, got, fake, "the flood does not set the figure")
				require.Less(t, got, honest, "nor does the other reporter")
			}},
		{name: "a sole reporter is taken as it is", flood: 20,
			want: func(t *testing.T, got time.Duration) { require.Equal(t, fake, got) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			s := New(Config{Now: clk.Now})
			for _, r := range tt.honest {
				for range 3 {
					s.From(r).ObserveTTFT(ep, 0, honest, time.Time{})
					s.From(r).ObserveThroughput(ep, 80, time.Time{})
					s.From(r).ObserveCache(ep, 1000, 0, time.Time{})
				}
			}
			m := s.From("mallory")
			for range tt.flood {
				m.ObserveTTFT(ep, 0, fake, time.Time{})
				m.ObserveThroughput(ep, 5000, time.Time{})
				m.ObserveCache(ep, 100_000, 100_000, time.Time{})
			}
			got, n, ok := s.TTFT(ep, 0)
			require.True(t, ok)
			require.LessOrEqual(t, n, DefaultMaxSamples)
			tt.want(t, got)
			tps, _, _ := s.Throughput(ep)
			rate, _, _ := s.CacheHitRate(ep)
			if len(tt.honest) >= 2 {
				require.Equal(t, 80.0, tps, "throughput is bounded the same way")
				// The flood's prompt tokens weigh a third: 1/3 cached.
				require.InDelta(t, 1.0/3, rate, 1e-9, "and the cache rate, by prompt tokens")
			}
		})
	}
}

// A full series makes room with the oldest sample of the reporter holding
// the most, so a flood evicts its own samples, not the others'.
func TestFloodEvictsItsOwnSamples(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now, MaxSamples: 8})
	for i := range 3 {
		s.From(fmt.Sprintf("edge-%d", i)).ObserveTTFT("a/m", 0, time.Second, time.Time{})
		clk.Advance(time.Second)
	}
	for range 100 {
		s.From("mallory").ObserveTTFT("a/m", 0, time.Millisecond, time.Time{})
		clk.Advance(time.Second)
	}
	e := s.Endpoint("a/m")
	e.ttft[0].mu.Lock()
	defer e.ttft[0].mu.Unlock()
	n := map[uint32]int{}
	for _, x := range e.ttft[0].samples {
		n[x.src]++
	}
	require.Len(t, e.ttft[0].samples, 8)
	require.Equal(t, 5, n[s.srcs.id("mallory")], "the flood keeps the rest")
	for i := range 3 {
		require.Equal(t, 1, n[s.srcs.id(fmt.Sprintf("edge-%d", i))])
	}
}

// The shares survive a snapshot: the restored store reads the same.
func TestSnapshotKeepsReporters(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	for i, r := range []string{"edge-1", "edge-2", "mallory", "mallory", "mallory", "mallory"} {
		s.From(r).ObserveTTFT("a/m", 0, time.Duration(i+1)*100*time.Millisecond, time.Time{})
		s.From(r).ObserveCache("a/m", int64(100*(i+1)), int64(10*i), time.Time{})
	}
	dst := New(Config{Now: clk.Now})
	dst.From("other") // indices differ between the stores
	require.NoError(t, dst.Restore(s.Snapshot()))
	v1, n1, _ := s.TTFT("a/m", 0)
	v2, n2, _ := dst.TTFT("a/m", 0)
	require.Equal(t, []any{v1, n1}, []any{v2, n2})
	r1, _, _ := s.CacheHitRate("a/m")
	r2, _, _ := dst.CacheHitRate("a/m")
	require.InDelta(t, r1, r2, 1e-12)
	require.Equal(t, s.Snapshot(), dst.Snapshot(), "and encode to the same bytes")
}

func TestSharesCap(t *testing.T) {
	tests := []struct {
		name string
		w    []float64
		want []float64 // weights after the cap
	}{
		{name: "one", w: []float64{5}, want: []float64{5}},
		{name: "balanced three", w: []float64{1, 1, 1}, want: []float64{1, 1, 1}},
		{name: "two: the heavier is lowered to the other", w: []float64{100, 3}, want: []float64{3, 3}},
		{name: "three: a third", w: []float64{100, 3, 3}, want: []float64{3, 3, 3}},
		{name: "four: a third", w: []float64{100, 2, 2, 2}, want: []float64{3, 2, 2, 2}},
		{name: "two heavy", w: []float64{100, 100, 1, 1}, want: []float64{2, 2, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sh shares
			for i, w := range tt.w {
				sh.add(uint32(i), w)
			}
			sh.cap()
			var total float64
			for i, w := range tt.want {
				got := tt.w[i] * sh.factorOf(uint32(i))
				require.InDelta(t, w, got, 1e-9, "reporter %d", i)
				total += got
			}
			for i := range tt.w {
				if len(tt.w) > 1 {
					require.LessOrEqual(t, tt.w[i]*sh.factorOf(uint32(i))/total, max(MaxShare, 1/float64(len(tt.w)))+1e-9)
				}
			}
		})
	}
}
