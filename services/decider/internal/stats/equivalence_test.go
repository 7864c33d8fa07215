package stats

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The reference below is the straightforward computation: every sample's
// weight computed afresh at each recomputation, relative to the newest
// sample. The series store each weight once, relative to a reference time
// that moves in steps (see refFor); these tests check that both publish the
// same values.

// refMedian is a median series computed the straightforward way.
type refMedian struct {
	samples []sample // ascending v, ties in arrival order; w unused
	v       float64
	n       int
	expires int64
}

func (m *refMedian) insert(maxSamples int, x sample) {
	x.w = 0
	if len(m.samples) >= maxSamples {
		oldest := 0
		for i := range m.samples {
			if m.samples[i].at < m.samples[oldest].at {
				oldest = i
			}
		}
		if x.at <= m.samples[oldest].at {
			return
		}
		m.samples = append(m.samples[:oldest], m.samples[oldest+1:]...)
	}
	i := sort.Search(len(m.samples), func(i int) bool { return m.samples[i].v > x.v })
	m.samples = append(m.samples, sample{})
	copy(m.samples[i+1:], m.samples[i:])
	m.samples[i] = x
}

func (m *refMedian) recompute(p *params, now int64, outliers bool) {
	cutoff := now - p.window
	kept := m.samples[:0]
	oldest := int64(math.MaxInt64)
	for _, s := range m.samples {
		if s.at > cutoff {
			kept = append(kept, s)
			oldest = min(oldest, s.at)
		}
	}
	m.samples = kept
	if len(kept) == 0 {
		m.v, m.n, m.expires = 0, 0, math.MaxInt64
		return
	}
	m.v, m.n, m.expires = refWeightedMedian(kept, p, outliers), len(kept), oldest+p.window
}

func (m *refMedian) replace(p *params, xs []sample, now int64, outliers bool) {
	m.samples = nil
	for _, x := range xs {
		m.insert(p.maxSamples, x)
	}
	m.recompute(p, now, outliers)
}

// refWeightedMedian is the weighted median with every weight computed
// afresh, relative to the newest sample.
func refWeightedMedian(s []sample, p *params, outliers bool) float64 {
	newest := s[0].at
	for _, x := range s[1:] {
		newest = max(newest, x.at)
	}
	fence := math.Inf(1)
	if outliers && len(s) >= p.minOutliers {
		q1, q3 := quantile(s, 0.25), quantile(s, 0.75)
		fence = q3 + 1.5*(q3-q1)
	}
	weight := func(x sample) float64 {
		w := math.Exp2(float64(x.at-newest) / p.halfLife)
		if x.v > fence {
			w *= p.outlierWeight
		}
		return w
	}
	var total float64
	for _, x := range s {
		total += weight(x)
	}
	half := total / 2
	var cum float64
	for i, x := range s {
		cum += weight(x)
		if cum < half {
			continue
		}
		if cum-half <= 1e-12*total && i+1 < len(s) {
			return (x.v + s[i+1].v) / 2
		}
		return x.v
	}
	return s[len(s)-1].v
}

// refRatio is a ratio series computed the straightforward way.
type refRatio struct {
	samples []ratioSample // arrival order; w unused
	v       float64
	n       int
	expires int64
}

func (r *refRatio) insert(maxSamples int, x ratioSample) {
	x.w = 0
	if len(r.samples) >= maxSamples {
		oldest := 0
		for i := range r.samples {
			if r.samples[i].at < r.samples[oldest].at {
				oldest = i
			}
		}
		if x.at <= r.samples[oldest].at {
			return
		}
		r.samples = append(r.samples[:oldest], r.samples[oldest+1:]...)
	}
	r.samples = append(r.samples, x)
}

func (r *refRatio) recompute(p *params, now int64) {
	cutoff := now - p.window
	kept := r.samples[:0]
	oldest, newest := int64(math.MaxInt64), int64(math.MinInt64)
	for _, s := range r.samples {
		if s.at > cutoff {
			kept = append(kept, s)
			oldest, newest = min(oldest, s.at), max(newest, s.at)
		}
	}
	r.samples = kept
	if len(kept) == 0 {
		r.v, r.n, r.expires = 0, 0, math.MaxInt64
		return
	}
	var num, den float64
	for _, s := range kept {
		w := math.Exp2(float64(s.at-newest) / p.halfLife)
		num += w * s.num
		den += w * s.den
	}
	rate := math.NaN()
	if den > 0 {
		rate = num / den
	}
	r.v, r.n, r.expires = rate, len(kept), oldest+p.window
}

func (r *refRatio) replace(p *params, xs []ratioSample, now int64) {
	r.samples = nil
	for _, x := range xs {
		r.insert(p.maxSamples, x)
	}
	r.recompute(p, now)
}

// equivalence drives a TTFT-like median series (outlier rule on), a
// throughput-like one (off) and a ratio series, each beside its reference,
// through steps random operations drawn from rng, and fails at the first
// published value, sample count or expiry that differs.
type equivalence struct {
	t   testing.TB
	rng *rand.Rand
	p   params
	now int64

	ttft, tput       *medianSeries
	refTTFT, refTput refMedian
	cache            *ratioSeries
	refCache         refRatio
	// past holds times already used, so that samples share times (ties in
	// weight) as probes and bursts of calls do.
	past []int64
	// Counts of what the run exercised, for the tests to check coverage.
	rebases, restores, exactHalves, lowHalves int
}

func newEquivalence(t testing.TB, rng *rand.Rand) *equivalence {
	halfLives := []time.Duration{time.Second, 5 * time.Minute, time.Hour}
	windows := []time.Duration{15 * time.Minute, 3 * time.Minute, 2 * time.Hour}
	cfg := Config{
		HalfLife:              halfLives[rng.IntN(len(halfLives))],
		Window:                windows[rng.IntN(len(windows))],
		MaxSamples:            []int{1, 2, 3, 8, 64}[rng.IntN(5)],
		MinSamplesForOutliers: []int{1, 4, 10}[rng.IntN(3)],
		OutlierWeight:         []float64{0.25, 0.5, 1}[rng.IntN(3)],
	}
	if cfg.Window > 1000*cfg.HalfLife {
		// Beyond about 1000 half-lives the oldest weights underflow, in
		// both computations but not at the same point.
		cfg.Window = 15 * time.Minute
	}
	e := &equivalence{
		t: t, rng: rng, p: New(cfg).p,
		now:  1_800_000_000e9 + rng.Int64N(int64(time.Hour)),
		ttft: new(medianSeries), tput: new(medianSeries), cache: new(ratioSeries),
	}
	e.ttft.init()
	e.tput.init()
	e.cache.init()
	return e
}

// at draws a sample time inside the window.
func (e *equivalence) at() int64 {
	switch k := e.rng.IntN(10); {
	case k < 3:
		return e.now
	case k < 5 && len(e.past) > 0:
		if t := e.past[e.rng.IntN(len(e.past))]; t > e.now-e.p.window {
			return t
		}
		return e.now
	case k < 6:
		// A whole number of half-lives ago: weights in ratios of powers of
		// two, where cumulative weights land on exactly one half.
		if d := int64(e.rng.IntN(4)) * int64(e.p.halfLife); d < e.p.window {
			return e.now - d
		}
		return e.now
	default:
		return e.now - e.rng.Int64N(e.p.window)
	}
}

// value draws a sample value: mostly from a few values, so that ties are
// common, sometimes continuous, sometimes a slow outlier.
func (e *equivalence) value() float64 {
	switch k := e.rng.IntN(10); {
	case k < 6:
		return float64(1+e.rng.IntN(6)) * 100
	case k < 9:
		return 1 + e.rng.Float64()*1000
	default:
		return 1e4 + e.rng.Float64()*1e5
	}
}

func (e *equivalence) step() {
	switch k := e.rng.IntN(100); {
	case k < 60:
		e.now += e.rng.Int64N(int64(2 * time.Second))
	case k < 80:
		e.now += e.rng.Int64N(e.p.window)
	case k < 95:
	default:
		// A long idle gap: the window empties and the next sample's
		// reference time is far from the last one. (The reference time also
		// moves under kept samples whenever the newest crosses a multiple of
		// 64 half-lives, often with a one-second half-life.)
		e.now += int64(float64(rebaseHalfLives+e.rng.IntN(200)) * e.p.halfLife)
	}
	switch k := e.rng.IntN(100); {
	case k < 80:
		at := e.at()
		e.past = append(e.past, at)
		if len(e.past) > 16 {
			e.past = e.past[1:]
		}
		ref, kept := e.ttft.ref, len(e.ttft.samples)
		x := sample{at: at, v: e.value()}
		e.ttft.observe(&e.p, x, e.now, true)
		e.refTTFT.insert(e.p.maxSamples, x)
		e.refTTFT.recompute(&e.p, e.now, true)
		x = sample{at: at, v: e.value()}
		e.tput.observe(&e.p, x, e.now, false)
		e.refTput.insert(e.p.maxSamples, x)
		e.refTput.recompute(&e.p, e.now, false)
		den := float64(1 + e.rng.IntN(5)*1000)
		if e.rng.IntN(2) == 0 {
			den = float64(1 + e.rng.Int64N(200_000))
		}
		c := ratioSample{at: at, num: math.Floor(den * float64(e.rng.IntN(5)) / 4), den: den}
		e.cache.observe(&e.p, c, e.now)
		e.refCache.insert(e.p.maxSamples, c)
		e.refCache.recompute(&e.p, e.now)
		if e.ttft.ref != ref && kept > 0 && len(e.ttft.samples) > 1 {
			e.rebases++ // the reference moved under samples that stay
		}
	case k < 92:
		e.ttft.refresh(&e.p, e.now, true)
		e.tput.refresh(&e.p, e.now, false)
		e.cache.refresh(&e.p, e.now)
		if e.refTTFT.expires <= e.now {
			e.refTTFT.recompute(&e.p, e.now, true)
		}
		if e.refTput.expires <= e.now {
			e.refTput.recompute(&e.p, e.now, false)
		}
		if e.refCache.expires <= e.now {
			e.refCache.recompute(&e.p, e.now)
		}
	case k < 98:
		e.restore()
	default:
		e.ttft.replace(&e.p, nil, e.now, true)
		e.refTTFT.replace(&e.p, nil, e.now, true)
		e.tput.replace(&e.p, nil, e.now, false)
		e.refTput.replace(&e.p, nil, e.now, false)
		e.cache.replace(&e.p, nil, e.now)
		e.refCache.replace(&e.p, nil, e.now)
	}
	e.compare()
}

// restore takes each series through a snapshot into a fresh series, which
// must publish exactly what the original does, and carries on with it.
func (e *equivalence) restore() {
	e.restores++
	cutoff := e.now - e.p.window
	median := func(m *medianSeries, ref *refMedian, outliers bool) *medianSeries {
		m.recompute(&e.p, e.now, outliers)
		ref.recompute(&e.p, e.now, outliers)
		xs, err := decodeSamples(m.encode(cutoff, newSrcTable()), 1, func(float64) bool { return true })
		require.NoError(e.t, err)
		fresh := new(medianSeries)
		fresh.init()
		fresh.replace(&e.p, xs, e.now, outliers)
		v1, n1 := m.pub.load()
		v2, n2 := fresh.pub.load()
		require.Equal(e.t, math.Float64bits(v1), math.Float64bits(v2), "restored median %v, was %v", v2, v1)
		require.Equal(e.t, n1, n2)
		require.Equal(e.t, m.expires.Load(), fresh.expires.Load())
		ref.replace(&e.p, xs, e.now, outliers)
		return fresh
	}
	e.ttft = median(e.ttft, &e.refTTFT, true)
	e.tput = median(e.tput, &e.refTput, false)

	e.cache.recompute(&e.p, e.now)
	e.refCache.recompute(&e.p, e.now)
	xs, err := decodeRatios(e.cache.encode(cutoff, newSrcTable()), 1)
	require.NoError(e.t, err)
	fresh := new(ratioSeries)
	fresh.init()
	fresh.replace(&e.p, xs, e.now)
	v1, n1 := e.cache.pub.load()
	v2, n2 := fresh.pub.load()
	require.Equal(e.t, math.Float64bits(v1), math.Float64bits(v2), "restored ratio %v, was %v", v2, v1)
	require.Equal(e.t, n1, n2)
	e.cache = fresh
	e.refCache.replace(&e.p, xs, e.now)
}

// near reports whether a and b are equal within a relative 1e-9.
func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

// lowHalf reports the one case where the series may answer differently from
// the straightforward computation: a cumulative weight within rounding below
// one half. Both take a cumulative weight within 1e-12 of one half for an
// exact half, but the straightforward computation only above one half; the
// series take it on either side, since their weights round differently. It
// returns the mean that the series then publish.
func lowHalf(s []sample, p *params, outliers bool) (float64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	newest := s[0].at
	for _, x := range s[1:] {
		newest = max(newest, x.at)
	}
	fence := math.Inf(1)
	if outliers && len(s) >= p.minOutliers {
		fence = quantile(s, 0.75) + 1.5*(quantile(s, 0.75)-quantile(s, 0.25))
	}
	ws := make([]float64, len(s))
	var total float64
	for i, x := range s {
		ws[i] = math.Exp2(float64(x.at-newest) / p.halfLife)
		if x.v > fence {
			ws[i] *= p.outlierWeight
		}
		total += ws[i]
	}
	half, tol := total/2, 1e-12*total
	var cum float64
	for i, x := range s[:len(s)-1] {
		cum += ws[i]
		if cum >= half-tol {
			return (x.v + s[i+1].v) / 2, cum < half
		}
	}
	return 0, false
}

func (e *equivalence) compare() {
	e.t.Helper()
	check := func(name string, got float64, n int, expires int64, want float64, wantN int, wantExpires int64) {
		e.t.Helper()
		require.Equal(e.t, wantN, n, "%s: samples", name)
		require.Equal(e.t, wantExpires, expires, "%s: expiry", name)
		if math.IsNaN(want) {
			require.True(e.t, math.IsNaN(got), "%s: got %v, want NaN", name, got)
			return
		}
		require.True(e.t, near(got, want), "%s: got %v, want %v (p=%+v)", name, got, want, e.p)
	}
	median := func(name string, m *medianSeries, ref *refMedian, outliers bool) {
		e.t.Helper()
		v, n := m.pub.load()
		want := ref.v
		if alt, ok := lowHalf(ref.samples, &e.p, outliers); ok && near(v, alt) && !near(v, want) {
			e.lowHalves++
			want = alt
		}
		check(name, v, n, m.expires.Load(), want, ref.n, ref.expires)
		if n >= 2 && v != ref.samples[0].v && v != ref.samples[n-1].v {
			// A published value that is no sample's is the mean of a middle pair.
			for _, x := range ref.samples {
				if x.v == v {
					return
				}
			}
			e.exactHalves++
		}
	}
	median("ttft", e.ttft, &e.refTTFT, true)
	median("throughput", e.tput, &e.refTput, false)
	v, n := e.cache.pub.load()
	check("cache", v, n, e.cache.expires.Load(), e.refCache.v, e.refCache.n, e.refCache.expires)
}

// TestStoredWeightsMatchTheReference feeds random sequences of samples
// (times out of order and shared, tied values, long idle gaps that move the
// reference time, expiry, eviction, snapshot round trips) to the series and
// to the straightforward computation, and compares every published value.
func TestStoredWeightsMatchTheReference(t *testing.T) {
	var rebases, restores, exactHalves, lowHalves int
	for seed := range uint64(150) {
		e := newEquivalence(t, rand.New(rand.NewPCG(seed, 7)))
		for range 400 {
			e.step()
		}
		rebases += e.rebases
		restores += e.restores
		exactHalves += e.exactHalves
		lowHalves += e.lowHalves
	}
	t.Logf("rebases with samples kept: %d, snapshot round trips: %d, exact-half medians: %d, of which half rounded low: %d",
		rebases, restores, exactHalves, lowHalves)
	require.Positive(t, rebases)
	require.Positive(t, restores)
	require.Positive(t, exactHalves)
}

func FuzzStoredWeightsMatchTheReference(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(42), uint64(0))
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		e := newEquivalence(t, rand.New(rand.NewPCG(s1, s2)))
		for range 200 {
			e.step()
		}
	})
}
