package stats

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

// fakeClock is an injectable clock, so aging is tested without sleeping.
type fakeClock = fakeclock.Clock

func newClock() *fakeClock { return fakeclock.New(time.Unix(1_800_000_000, 0).UTC()) }

func secs(xs ...float64) []time.Duration {
	out := make([]time.Duration, len(xs))
	for i, x := range xs {
		out[i] = time.Duration(x * float64(time.Second))
	}
	return out
}

func TestWeightedMedian(t *testing.T) {
	p := &New(Config{}).p
	now := int64(1_800_000_000e9)
	at := func(ago time.Duration) int64 { return now - int64(ago) }
	tests := []struct {
		name     string
		samples  []sample // sorted by value
		outliers bool
		want     float64
	}{
		{name: "single", samples: []sample{{at: now, v: 5}}, want: 5},
		{name: "odd count is the middle value", samples: []sample{{at: now, v: 1}, {at: now, v: 2}, {at: now, v: 3}}, want: 2},
		{name: "even count averages the middle pair", samples: []sample{{at: now, v: 1}, {at: now, v: 2}, {at: now, v: 3}, {at: now, v: 4}}, want: 2.5},
		{name: "heavier value wins", samples: []sample{{at: at(10 * time.Minute), v: 1}, {at: at(10 * time.Minute), v: 1}, {at: now, v: 10}}, want: 10},
		{
			// Two samples one half-life old weigh as much as one fresh one:
			// the cumulative weight lands exactly on one half.
			name:    "one half-life halves the weight",
			samples: []sample{{at: at(5 * time.Minute), v: 1}, {at: at(5 * time.Minute), v: 1}, {at: now, v: 10}},
			want:    5.5,
		},
		{
			name:    "without the outlier rule a slow sample counts fully",
			samples: []sample{{at: now, v: 10}, {at: now, v: 10}, {at: now, v: 10}, {at: now, v: 10}, {at: now, v: 10}, {at: now, v: 11}, {at: now, v: 11}, {at: now, v: 11}, {at: now, v: 11}, {at: now, v: 20}},
			want:    10.5,
		},
		{
			name:     "with the outlier rule it counts a quarter",
			samples:  []sample{{at: now, v: 10}, {at: now, v: 10}, {at: now, v: 10}, {at: now, v: 10}, {at: now, v: 10}, {at: now, v: 11}, {at: now, v: 11}, {at: now, v: 11}, {at: now, v: 11}, {at: now, v: 20}},
			outliers: true,
			want:     10,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m medianSeries
			m.init()
			for _, x := range tt.samples {
				m.insert(p, x)
			}
			m.recompute(p, now, tt.outliers)
			got, n := m.pub.load()
			require.Equal(t, len(tt.samples), n)
			require.InDelta(t, tt.want, got, 1e-9)
		})
	}
}

func TestQuantile(t *testing.T) {
	s := []sample{{at: 0, v: 1}, {at: 0, v: 2}, {at: 0, v: 3}, {at: 0, v: 4}, {at: 0, v: 5}, {at: 0, v: 6}, {at: 0, v: 7}, {at: 0, v: 8}, {at: 0, v: 9}, {at: 0, v: 100}}
	// NumPy: np.quantile([1..9, 100], [.25, .75]) == [3.25, 7.75].
	require.InDelta(t, 3.25, quantile(s, 0.25), 1e-12)
	require.InDelta(t, 7.75, quantile(s, 0.75), 1e-12)
	require.Equal(t, 100.0, quantile(s, 1))
	require.Equal(t, 1.0, quantile(s[:1], 0.75))
}

// TestOutlierRule shows the slow-outlier rule at its threshold: with 9
// samples one slow call counts fully and can shift the typical value; from 10
// it counts a quarter, and the typical value is what it would be without it.
func TestOutlierRule(t *testing.T) {
	tests := []struct {
		name     string
		base     []time.Duration // the endpoint's ordinary calls
		extra    time.Duration   // one more call
		wantBase time.Duration   // typical TTFT of base alone
		want     time.Duration   // typical TTFT of base + extra
	}{
		{
			name: "9 samples: the slow call counts fully and shifts the median",
			base: secs(1, 2, 3, 4, 5, 6, 7, 8), extra: 100 * time.Second,
			wantBase: 4500 * time.Millisecond, want: 5 * time.Second,
		},
		{
			name: "10 samples: the slow call counts a quarter and changes nothing",
			base: secs(1, 2, 3, 4, 5, 6, 7, 8, 9), extra: 100 * time.Second,
			wantBase: 5 * time.Second, want: 5 * time.Second,
		},
		{
			name: "10 samples: a full-weight slow call would give 10.5s",
			base: secs(10, 10, 10, 10, 10, 11, 11, 11, 11), extra: 20 * time.Second,
			wantBase: 10 * time.Second, want: 10 * time.Second,
		},
		{
			name: "one very slow call on a good provider is ignored",
			base: secs(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), extra: 60 * time.Second,
			wantBase: time.Second, want: time.Second,
		},
		{
			// Below the lower fence, yet counted fully: a provider that got
			// faster must be seen. A quarter weight would give 11s.
			name: "fast outliers are not down-weighted",
			base: secs(10, 10, 10, 10, 11, 11, 11, 11, 11), extra: time.Second,
			wantBase: 11 * time.Second, want: 10500 * time.Millisecond,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			s := New(Config{Now: clk.Now})
			for _, d := range tt.base {
				s.ObserveTTFT("alpha/m", tokens.BucketUnder8K, d, clk.Now())
			}
			got, n, ok := s.TTFT("alpha/m", tokens.BucketUnder8K)
			require.True(t, ok)
			require.Equal(t, len(tt.base), n)
			require.Equal(t, tt.wantBase, got)

			s.ObserveTTFT("alpha/m", tokens.BucketUnder8K, tt.extra, clk.Now())
			got, n, ok = s.TTFT("alpha/m", tokens.BucketUnder8K)
			require.True(t, ok)
			require.Equal(t, len(tt.base)+1, n)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestOutlierThresholdIsConfigurable(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now, MinSamplesForOutliers: 4, OutlierWeight: 0.5})
	for _, d := range secs(1, 1, 2) {
		s.ObserveTTFT("a/m", 0, d, time.Time{})
	}
	// 4 samples now: 9s is above the fence Q3 + 1.5×IQR = 3.75s + 4.125s and
	// weighs a half, so the cumulative weight (3.5 in all) reaches half at the
	// second 1s sample; at full weight it would land exactly there and give
	// 1.5s.
	s.ObserveTTFT("a/m", 0, 9*time.Second, time.Time{})
	got, _, _ := s.TTFT("a/m", 0)
	require.Equal(t, time.Second, got)
}

// observeEvery records d every step for n steps and returns the typical TTFT
// after each one.
func observeEvery(s *Store, clk *fakeClock, n int, step, d time.Duration) []time.Duration {
	var out []time.Duration
	for range n {
		s.ObserveTTFT("alpha/m", tokens.Bucket32KTo128K, d, clk.Now())
		s.Refresh()
		v, _, _ := s.TTFT("alpha/m", tokens.Bucket32KTo128K)
		out = append(out, v)
		clk.Advance(step)
	}
	return out
}

// firstAtLeast returns the index of the first value ≥ d, or -1.
func firstAtLeast(xs []time.Duration, d time.Duration) int {
	for i, x := range xs {
		if x >= d {
			return i
		}
	}
	return -1
}

func TestDecayFollowsAProviderThatSlowsDown(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	step := 30 * time.Second
	observeEvery(s, clk, 20, step, time.Second) // 10 minutes at 1s

	typical := observeEvery(s, clk, 20, step, 10*time.Second) // then 10s
	// One slow call is not enough (it is even an outlier at first)...
	require.Equal(t, time.Second, typical[0])
	// ...but once the new samples dominate the provider is slow, well within
	// one half-life (5m = 10 steps) of the change, although the window still
	// holds all 20 older 1s samples.
	flip := firstAtLeast(typical, 10*time.Second)
	require.Positive(t, flip)
	require.LessOrEqual(t, time.Duration(flip)*step, DefaultHalfLife)
	for _, v := range typical[flip:] {
		require.Equal(t, 10*time.Second, v)
	}
	t.Logf("slow after %v", time.Duration(flip)*step)
}

func TestDecayFollowsAProviderThatSpeedsUp(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	step := 30 * time.Second
	observeEvery(s, clk, 20, step, 10*time.Second)

	typical := observeEvery(s, clk, 20, step, time.Second)
	require.Equal(t, 10*time.Second, typical[0])
	flip := -1
	for i, v := range typical {
		if v == time.Second {
			flip = i
			break
		}
	}
	require.Positive(t, flip)
	require.LessOrEqual(t, time.Duration(flip)*step, DefaultHalfLife)
	t.Logf("fast after %v", time.Duration(flip)*step)
}

func TestWindowDropsOldSamples(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	for range 5 {
		s.ObserveTTFT("a/m", 0, 10*time.Second, clk.Now())
	}
	clk.Advance(10 * time.Minute)
	s.ObserveTTFT("a/m", 0, time.Second, clk.Now())

	got, n, ok := s.TTFT("a/m", 0)
	require.True(t, ok)
	require.Equal(t, 6, n)
	require.Equal(t, 10*time.Second, got, "five samples two half-lives old (5×¼) still outweigh one fresh one")

	// The old samples leave the window 15 minutes after they were taken;
	// Refresh notices without any new observation.
	clk.Advance(5*time.Minute - time.Nanosecond)
	s.Refresh()
	_, n, _ = s.TTFT("a/m", 0)
	require.Equal(t, 6, n, "still inside the window")
	clk.Advance(time.Nanosecond)
	s.Refresh()
	got, n, ok = s.TTFT("a/m", 0)
	require.True(t, ok)
	require.Equal(t, 1, n)
	require.Equal(t, time.Second, got)

	clk.Advance(DefaultWindow)
	s.Refresh()
	got, n, ok = s.TTFT("a/m", 0)
	require.False(t, ok)
	require.Zero(t, n)
	require.Zero(t, got)

	// An observation already outside the window is not stored.
	s.ObserveTTFT("a/m", 0, time.Second, clk.Now().Add(-DefaultWindow))
	_, _, ok = s.TTFT("a/m", 0)
	require.False(t, ok)
}

func TestTimestamps(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	// A sample from an edge whose clock is an hour ahead weighs as a fresh
	// one, not 2^12 times more.
	s.ObserveTTFT("a/m", 0, 10*time.Second, clk.Now().Add(time.Hour))
	s.ObserveTTFT("a/m", 0, time.Second, clk.Now())
	got, _, _ := s.TTFT("a/m", 0)
	require.Equal(t, 5500*time.Millisecond, got)

	// The zero time means now.
	s.ObserveThroughput("a/m", 50, time.Time{})
	clk.Advance(DefaultWindow - time.Second)
	s.Refresh()
	_, n, _ := s.Throughput("a/m")
	require.Equal(t, 1, n)
}

func TestBucketsAreIndependent(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	for range 3 {
		s.ObserveTTFT("alpha/m", tokens.BucketOf(100), 1700*time.Millisecond, clk.Now())
	}
	s.ObserveTTFT("alpha/m", tokens.BucketOf(105_000), 15500*time.Millisecond, clk.Now())

	tests := []struct {
		name    string
		bucket  tokens.Bucket
		want    time.Duration
		samples int
		ok      bool
	}{
		{name: "<8k", bucket: tokens.BucketUnder8K, want: 1700 * time.Millisecond, samples: 3, ok: true},
		{name: "8k-32k", bucket: tokens.Bucket8KTo32K},
		{name: "32k-128k", bucket: tokens.Bucket32KTo128K, want: 15500 * time.Millisecond, samples: 1, ok: true},
		{name: ">128k", bucket: tokens.BucketOver128K},
		{name: "unknown bucket", bucket: tokens.NumBuckets},
		{name: "negative bucket", bucket: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, n, ok := s.TTFT("alpha/m", tt.bucket)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.samples, n)
			require.Equal(t, tt.want, got)
		})
	}
	_, _, ok := s.TTFT("beta/m", tokens.BucketUnder8K)
	require.False(t, ok, "endpoints are independent too")
}

func TestForget(t *testing.T) {
	s := New(Config{})
	for _, id := range []string{"alpha/m", "beta/m"} {
		s.ObserveTTFT(id, 0, time.Second, time.Time{})
		s.ObserveThroughput(id, 80, time.Time{})
		s.ObserveCache(id, 1000, 500, time.Time{})
	}
	s.ObserveOutput("m", 300, time.Time{})
	s.Forget("alpha/m")
	s.Forget("gamma/m") // unknown: no-op

	_, _, ok := s.TTFT("alpha/m", 0)
	require.False(t, ok)
	_, _, ok = s.Throughput("alpha/m")
	require.False(t, ok)
	_, _, ok = s.CacheHitRate("alpha/m")
	require.False(t, ok)
	_, _, ok = s.TTFT("beta/m", 0)
	require.True(t, ok)
	_, _, ok = s.TypicalOutput("m")
	require.True(t, ok, "a model's series outlive its endpoints")
	require.NotContains(t, string(s.Snapshot()["m"]), "alpha/m")
}

func TestHandles(t *testing.T) {
	s := New(Config{})
	e := s.Endpoint("alpha/m")
	m := s.Model("m")
	require.Same(t, e, s.Endpoint("alpha/m"))
	require.Equal(t, "alpha/m", e.ID())
	require.Equal(t, "m", m.ID())
	_, _, ok := e.TTFT(0)
	require.False(t, ok)

	// Observations through the store land in the handle resolved before.
	s.ObserveTTFT("alpha/m", tokens.BucketOver128K, 3*time.Second, time.Time{})
	s.ObserveThroughput("alpha/m", 70, time.Time{})
	s.ObserveCache("alpha/m", 100, 25, time.Time{})
	s.ObserveOutput("m", 42, time.Time{})
	got, n, ok := e.TTFT(tokens.BucketOver128K)
	require.Equal(t, []any{3 * time.Second, 1, true}, []any{got, n, ok})
	tps, _, _ := e.Throughput()
	require.Equal(t, 70.0, tps)
	rate, _, _ := e.CacheHitRate()
	require.Equal(t, 0.25, rate)
	out, _, _ := m.TypicalOutput()
	require.Equal(t, int64(42), out)

	// A forgotten handle reads as empty; the id starts afresh.
	s.Forget("alpha/m")
	_, _, ok = e.TTFT(tokens.BucketOver128K)
	require.False(t, ok)
	_, _, ok = e.CacheHitRate()
	require.False(t, ok)
	require.NotSame(t, e, s.Endpoint("alpha/m"))

	var none *Endpoint
	_, _, ok = none.TTFT(0)
	require.False(t, ok)
	_, _, ok = none.Throughput()
	require.False(t, ok)
	_, _, ok = none.CacheHitRate()
	require.False(t, ok)
	var noModel *Model
	_, _, ok = noModel.TypicalOutput()
	require.False(t, ok)
}

func TestThroughputCacheAndOutput(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	tests := []struct {
		name    string
		observe func()
		read    func() (float64, int, bool)
		want    float64
		samples int
		ok      bool
	}{
		{
			name: "throughput is a median",
			observe: func() {
				for _, x := range []float64{40, 50, 60, 1} {
					s.ObserveThroughput("t/m", x, clk.Now())
				}
			},
			read: func() (float64, int, bool) { return s.Throughput("t/m") },
			want: 45, samples: 4, ok: true,
		},
		{
			name: "cache rate weighs calls by prompt size",
			observe: func() {
				s.ObserveCache("c/m", 100_000, 90_000, clk.Now())
				s.ObserveCache("c/m", 1_000, 0, clk.Now())
				s.ObserveCache("c/m", 9_000, 10_000, clk.Now()) // more cached than prompt: counts as all cached
			},
			read: func() (float64, int, bool) { return s.CacheHitRate("c/m") },
			want: 99_000.0 / 110_000, samples: 3, ok: true,
		},
		{
			name: "cache rate decays",
			observe: func() {
				s.ObserveCache("d/m", 1000, 0, clk.Now().Add(-5*time.Minute))
				s.ObserveCache("d/m", 1000, 1000, clk.Now())
			},
			read: func() (float64, int, bool) { return s.CacheHitRate("d/m") },
			want: 1 / 1.5, samples: 2, ok: true,
		},
		{
			name: "typical output is a median rounded to a token",
			observe: func() {
				for _, x := range []int64{100, 201, 5000, 0} {
					s.ObserveOutput("o", x, clk.Now())
				}
			},
			read: func() (float64, int, bool) {
				n, c, ok := s.TypicalOutput("o")
				return float64(n), c, ok
			},
			want: 151, samples: 4, ok: true, // (100+201)/2 = 150.5
		},
		{
			name:    "unknown series",
			observe: func() {},
			read:    func() (float64, int, bool) { return s.CacheHitRate("nobody/m") },
		},
		{
			name:    "unknown model",
			observe: func() {},
			read: func() (float64, int, bool) {
				n, c, ok := s.TypicalOutput("nobody")
				return float64(n), c, ok
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.observe()
			got, n, ok := tt.read()
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.samples, n)
			require.InDelta(t, tt.want, got, 1e-9)
		})
	}
}

func TestRejectsInvalidObservations(t *testing.T) {
	s := New(Config{})
	s.ObserveTTFT("", 0, time.Second, time.Time{})
	s.ObserveTTFT("a/m", 0, -time.Second, time.Time{})
	s.ObserveTTFT("a/m", tokens.NumBuckets, time.Second, time.Time{})
	s.ObserveThroughput("a/m", 0, time.Time{})
	s.ObserveThroughput("a/m", -1, time.Time{})
	s.ObserveThroughput("a/m", nan(), time.Time{})
	s.ObserveThroughput("a/m", inf(), time.Time{})
	s.ObserveCache("a/m", 0, 0, time.Time{})
	s.ObserveCache("a/m", 10, -1, time.Time{})
	s.ObserveOutput("m", -1, time.Time{})
	s.ObserveOutput("", 1, time.Time{})
	require.Equal(t, uint64(11), s.Rejected())
	require.Empty(t, s.Snapshot(), "nothing was created")
}

func TestMaxSamplesEvictsTheOldest(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now, MaxSamples: 4})
	for _, d := range secs(9, 9, 1, 1, 1) { // the first 9s is evicted
		s.ObserveTTFT("a/m", 0, d, clk.Now())
		clk.Advance(time.Second)
	}
	got, n, _ := s.TTFT("a/m", 0)
	require.Equal(t, 4, n)
	require.Equal(t, time.Second, got)

	// A sample older than all four is not stored: the newer ones matter more.
	s.ObserveTTFT("a/m", 0, 100*time.Second, clk.Now().Add(-time.Minute))
	got, n, _ = s.TTFT("a/m", 0)
	require.Equal(t, 4, n)
	require.Equal(t, time.Second, got)

	e := s.lookup("a/m")
	require.LessOrEqual(t, cap(e.ttft[0].samples), 4, "buffers never grow past MaxSamples")
}

func TestConfigDefaults(t *testing.T) {
	s := New(Config{OutlierWeight: 3, MaxSamples: 1 << 20})
	require.Equal(t, params{
		window:        int64(DefaultWindow),
		halfLife:      float64(DefaultHalfLife),
		epoch:         rebaseHalfLives * int64(DefaultHalfLife),
		maxSamples:    maxMaxSamples,
		minOutliers:   DefaultMinSamplesForOutliers,
		outlierWeight: DefaultOutlierWeight,
	}, s.p)
}

func TestModelOf(t *testing.T) {
	tests := []struct{ name, id, want string }{
		{name: "provider and vendor/model", id: "alpha/deepseek/deepseek-v4.1-flash", want: "deepseek/deepseek-v4.1-flash"},
		{name: "provider and model", id: "alpha/m", want: "m"},
		{name: "no slash", id: "m", want: "m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, ModelOf(tt.id))
		})
	}
}

// TestReadsDoNotAllocate pins the hot-path promise that benchmarks report.
func TestReadsDoNotAllocate(t *testing.T) {
	s := New(Config{})
	id := string([]byte("alpha/deepseek/deepseek-v4.1-flash")) // not a constant
	s.ObserveTTFT(id, tokens.Bucket32KTo128K, time.Second, time.Time{})
	s.ObserveThroughput(id, 50, time.Time{})
	s.ObserveCache(id, 100, 50, time.Time{})
	s.ObserveOutput("deepseek/deepseek-v4.1-flash", 200, time.Time{})
	s.From("edge").In("eu-west").ObserveTTFT(id, tokens.Bucket32KTo128K, time.Second, time.Time{})
	region := string([]byte("eu-west"))
	allocs := testing.AllocsPerRun(100, func() {
		s.Endpoint(id).TTFTIn(s.Region(region), tokens.Bucket32KTo128K)
		s.Endpoint(id).TTFTIn(s.Region("nowhere"), tokens.Bucket32KTo128K)
		s.TTFT(id, tokens.Bucket32KTo128K)
		s.TTFT("missing/m", tokens.BucketUnder8K)
		s.Throughput(id)
		s.CacheHitRate(id)
		s.TypicalOutput("deepseek/deepseek-v4.1-flash")
		s.Endpoint(id).TTFT(tokens.Bucket32KTo128K)
	})
	require.Zero(t, allocs)
	allocs = testing.AllocsPerRun(100, func() {
		s.ObserveTTFT(id, tokens.Bucket32KTo128K, time.Second, time.Time{})
	})
	require.Zero(t, allocs, "a full series observes without allocating")
}

// TestConcurrentUse runs writers, readers, Refresh, Snapshot and Forget at
// once; run with -race. Every published summary must be one the samples
// could produce: a TTFT between the fastest and slowest ever observed.
func TestConcurrentUse(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now, MaxSamples: 16})
	ids := []string{"a/m1", "b/m1", "c/m2", "d/m2"}
	const (
		writers = 8
		readers = 8
		rounds  = 2000
	)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				id := ids[(w+i)%len(ids)]
				b := tokens.Bucket(i % tokens.NumBuckets)
				s.From("edge").In(fmt.Sprintf("r%d", w%3)).ObserveTTFT(id, b, time.Duration(1+i%10)*time.Second, clk.Now())
				s.ObserveThroughput(id, float64(10+i%7), time.Time{})
				s.ObserveCache(id, 1000, int64(i%1001), time.Time{})
				s.ObserveOutput(ModelOf(id), int64(i%500), time.Time{})
			}
		})
	}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	for r := range readers {
		bg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := ids[(r+i)%len(ids)]
				if v, n, ok := s.TTFT(id, tokens.Bucket(i%tokens.NumBuckets)); ok {
					if v < time.Second || v > 10*time.Second || n < 1 || n > 16 {
						t.Errorf("TTFT(%s) = %v, %d", id, v, n)
						return
					}
				}
				if v, n, ok := s.TTFTIn(id, s.Region(fmt.Sprintf("r%d", i%3)), tokens.Bucket(i%tokens.NumBuckets)); ok {
					if v < time.Second || v > 10*time.Second || n < 1 || n > 16 {
						t.Errorf("TTFTIn(%s) = %v, %d", id, v, n)
						return
					}
				}
				if v, _, ok := s.CacheHitRate(id); ok && (v < 0 || v > 1) {
					t.Errorf("CacheHitRate(%s) = %v", id, v)
					return
				}
				s.Throughput(id)
				s.TypicalOutput(ModelOf(id))
			}
		})
	}
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			clk.Advance(50 * time.Millisecond)
			s.Refresh()
			snap := s.Snapshot()
			if err := New(Config{Now: clk.Now}).Restore(snap); err != nil {
				t.Errorf("restore a live snapshot: %v", err)
				return
			}
			s.Forget("d/m2")
		}
	})
	wg.Wait()
	close(stop)
	bg.Wait()
	_, n, ok := s.TTFT("a/m1", 0)
	require.True(t, ok)
	require.LessOrEqual(t, n, 16)
}
