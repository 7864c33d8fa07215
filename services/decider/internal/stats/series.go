package stats

import (
	"math"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
)

// params are the normalised settings every series needs, in the units the
// arithmetic uses.
type params struct {
	window        int64 // ns
	halfLife      float64
	epoch         int64 // ns, rebaseHalfLives half-lives: see refFor
	maxSamples    int
	minOutliers   int
	outlierWeight float64
}

// published is a summary (a value and the number of samples behind it)
// behind a sequence lock. Writers are serialised by their series' mutex;
// readers retry while a write is in flight. Two atomics instead of an
// atomic.Pointer to an immutable summary so that a write does not allocate
// either; the sequence number keeps the value and the count from two
// different writes apart (a stale count of 0 next to a fresh value would make
// an endpoint look infinitely fast for one Decide).
type published struct {
	seq atomic.Uint64 // odd while a write is in progress
	val atomic.Uint64 // math.Float64bits of the value
	n   atomic.Int64  // samples behind val; 0 means no summary
}

// store publishes v and n. The caller holds the series' mutex.
func (p *published) store(v float64, n int) {
	p.seq.Add(1)
	p.val.Store(math.Float64bits(v))
	p.n.Store(int64(n))
	p.seq.Add(1)
}

// load returns the last published value and count.
func (p *published) load() (float64, int) {
	for i := 0; ; i++ {
		s := p.seq.Load()
		if s&1 == 0 {
			v, n := p.val.Load(), p.n.Load()
			if p.seq.Load() == s {
				return math.Float64frombits(v), int(n)
			}
		}
		// A writer was preempted inside its three stores; let it finish
		// rather than burn the CPU it needs.
		if i >= 4 {
			runtime.Gosched()
		}
	}
}

// rebaseHalfLives is how far, in half-lives, a series' newest sample may get
// ahead of its reference time before the stored weights are recomputed
// against a newer one: weights stay below 2^64, far from overflow, and
// about 64 half-lives of steady traffic pass between two rebases.
const rebaseHalfLives = 64

// epochOf returns the spacing of reference times for halfLife (ns).
func epochOf(halfLife float64) int64 {
	return int64(min(rebaseHalfLives*halfLife, 1<<62))
}

// refFor returns the reference time of a series whose newest sample is at
// newest: newest rounded toward zero to a multiple of the epoch. It depends
// on the newest sample alone, so that a series restored from a snapshot
// stores the very same weights, and publishes the very same values, as the
// series it was taken from.
func (p *params) refFor(newest int64) int64 { return newest - newest%p.epoch }

// weight returns the decay weight of a sample taken at at, relative to the
// reference time ref: 2^((at-ref)/HalfLife). Weights relative to any common
// reference give the same median and the same ratio (the common factor
// cancels), so a series computes each weight once, when the sample arrives,
// and again only when its reference moves (see refFor).
func (p *params) weight(at, ref int64) float64 {
	return math.Exp2(float64(at-ref) / p.halfLife)
}

// sample is one observation: its time (Unix ns), its value, its decay
// weight relative to its series' reference time and its reporter (sources).
type sample struct {
	at  int64
	v   float64
	w   float64
	src uint32
}

// medianSeries keeps the samples of one series sorted by value, ties in
// arrival order, so that a recomputation is one linear pass with no sorting
// and no scratch buffer.
type medianSeries struct {
	mu      sync.Mutex
	samples []sample // ascending v; no sample older than the window at the last recompute
	ref     int64    // reference time of the samples' weights: refFor(newest sample)
	pub     published
	// expires is when the oldest sample leaves the window (Unix ns), the only
	// moment the summary can change without a new sample; MaxInt64 when empty.
	expires atomic.Int64
	sh      shares // scratch of insert and recompute
}

func (m *medianSeries) init() { m.expires.Store(math.MaxInt64) }

// observe adds x and republishes the summary.
func (m *medianSeries) observe(p *params, x sample, now int64, outliers bool) {
	m.mu.Lock()
	m.insert(p, x)
	m.recompute(p, now, outliers)
	m.mu.Unlock()
}

// refresh republishes the summary if a sample has left the window since.
func (m *medianSeries) refresh(p *params, now int64, outliers bool) {
	if m.expires.Load() > now {
		return
	}
	m.mu.Lock()
	m.recompute(p, now, outliers)
	m.mu.Unlock()
}

// insert adds x at its place in value order, evicting the oldest sample when
// the series is full, and computes its weight. The caller holds m.mu.
func (m *medianSeries) insert(p *params, x sample) {
	if len(m.samples) >= p.maxSamples {
		// The oldest sample of the reporter holding the most makes room.
		src := x.src
		if !oneSource(m.samples, func(x sample) uint32 { return x.src }) || m.samples[0].src != x.src {
			m.sh = m.sh[:0]
			for i := range m.samples {
				m.sh.add(m.samples[i].src, 0)
			}
			src = m.sh.victim(x.src)
		}
		oldest := -1
		for i := range m.samples {
			if m.samples[i].src == src && (oldest < 0 || m.samples[i].at < m.samples[oldest].at) {
				oldest = i
			}
		}
		if oldest < 0 || x.src == src && x.at <= m.samples[oldest].at {
			return // older than everything its reporter keeps: the newer samples matter more
		}
		copy(m.samples[oldest:], m.samples[oldest+1:])
		m.samples = m.samples[:len(m.samples)-1]
	}
	if len(m.samples) == 0 {
		m.ref = p.refFor(x.at)
	} else if ref := p.refFor(x.at); ref > m.ref {
		m.ref = ref
		for i := range m.samples {
			m.samples[i].w = p.weight(m.samples[i].at, ref)
		}
	}
	x.w = p.weight(x.at, m.ref)
	// Upper bound, so that equal values keep their arrival order and a
	// snapshot re-encodes byte for byte after a restore.
	i := sort.Search(len(m.samples), func(i int) bool { return m.samples[i].v > x.v })
	m.samples = growSamples(m.samples, p.maxSamples)
	m.samples = m.samples[:len(m.samples)+1]
	copy(m.samples[i+1:], m.samples[i:])
	m.samples[i] = x
}

// growSamples makes room for one more sample, doubling the buffer but never
// beyond maxSamples, so that a series costs memory in proportion to its use.
func growSamples(s []sample, maxSamples int) []sample {
	if len(s) < cap(s) {
		return s
	}
	n := min(max(2*cap(s), 4), maxSamples)
	out := make([]sample, len(s), n)
	copy(out, s)
	return out
}

// recompute drops the samples that left the window and publishes the
// summary of the rest. The caller holds m.mu.
func (m *medianSeries) recompute(p *params, now int64, outliers bool) {
	cutoff := now - p.window
	// Read-only up to the first expired sample: most recomputations drop
	// nothing, and then write nothing (ratioSeries.recompute does the same;
	// one generic function for both measured twice as slow per observation).
	oldest := int64(math.MaxInt64)
	n := 0
	for n < len(m.samples) && m.samples[n].at > cutoff {
		oldest = min(oldest, m.samples[n].at)
		n++
	}
	if n < len(m.samples) {
		kept := m.samples[:n]
		for _, s := range m.samples[n+1:] {
			if s.at > cutoff {
				kept = append(kept, s)
				oldest = min(oldest, s.at)
			}
		}
		clear(m.samples[len(kept):])
		m.samples = kept
	}
	kept := m.samples
	if len(kept) == 0 {
		m.pub.store(0, 0)
		m.expires.Store(math.MaxInt64)
		return
	}
	v := weightedMedian(kept, p, outliers, &m.sh)
	m.pub.store(v, len(kept))
	m.expires.Store(oldest + p.window)
}

// weightedMedian returns the weighted median of s, which is sorted by value
// and non-empty (see the package documentation for the weights). The decay
// weights are the stored ones; the outlier rule and the reporters' shares
// are applied here, since both move with every sample. sh is scratch.
func weightedMedian(s []sample, p *params, outliers bool, sh *shares) float64 {
	fence := math.Inf(1)
	if outliers && len(s) >= p.minOutliers {
		q1, q3 := quantile(s, 0.25), quantile(s, 0.75)
		fence = q3 + 1.5*(q3-q1)
	}
	base := func(x sample) float64 {
		if x.v > fence {
			return x.w * p.outlierWeight
		}
		return x.w
	}
	weight := base
	if !oneSource(s, func(x sample) uint32 { return x.src }) {
		*sh = (*sh)[:0]
		for _, x := range s {
			sh.add(x.src, base(x))
		}
		sh.cap()
		weight = func(x sample) float64 { return base(x) * sh.factorOf(x.src) }
	}
	var total float64
	for _, x := range s {
		total += weight(x)
	}
	half, tol := total/2, 1e-12*total
	var cum float64
	for i, x := range s {
		cum += weight(x)
		if cum < half-tol {
			continue
		}
		// Exactly half (within rounding, on either side: the weights are
		// relative to a reference time, so an exact half can round a little
		// low as well as a little high): the median sits between this value
		// and the next, as the textbook median of an even count does.
		if cum-half <= tol && i+1 < len(s) {
			return (x.v + s[i+1].v) / 2
		}
		return x.v
	}
	return s[len(s)-1].v // unreachable unless weights are NaN
}

// quantile returns the q-quantile of the values of s (sorted) by linear
// interpolation between order statistics (R's and NumPy's default, "type 7").
func quantile(s []sample, q float64) float64 {
	h := float64(len(s)-1) * q
	lo := int(h)
	if lo+1 >= len(s) {
		return s[lo].v
	}
	return s[lo].v + (h-float64(lo))*(s[lo+1].v-s[lo].v)
}

// ratioSample is one call's contribution to a ratio: its time (Unix ns),
// numerator (cached tokens) and denominator (prompt tokens).
type ratioSample struct {
	at       int64
	num, den float64
	w        float64 // decay weight relative to the series' reference time
	src      uint32  // reporter (sources)
}

// ratioSeries keeps the samples of a decayed ratio Σw·num / Σw·den in arrival
// order (order does not matter to a sum).
type ratioSeries struct {
	mu      sync.Mutex
	samples []ratioSample
	ref     int64     // reference time of the samples' weights: refFor(newest sample)
	pub     published // value is NaN when Σden is 0
	expires atomic.Int64
	sh      shares // scratch of insert and recompute
}

func (r *ratioSeries) init() { r.expires.Store(math.MaxInt64) }

// observe adds x and republishes the ratio.
func (r *ratioSeries) observe(p *params, x ratioSample, now int64) {
	r.mu.Lock()
	r.insert(p, x)
	r.recompute(p, now)
	r.mu.Unlock()
}

// refresh republishes the ratio if a sample has left the window since.
func (r *ratioSeries) refresh(p *params, now int64) {
	if r.expires.Load() > now {
		return
	}
	r.mu.Lock()
	r.recompute(p, now)
	r.mu.Unlock()
}

// insert appends x, evicting the oldest sample when the series is full, and
// computes its weight. The caller holds r.mu.
func (r *ratioSeries) insert(p *params, x ratioSample) {
	if len(r.samples) >= p.maxSamples {
		src := x.src
		if !oneSource(r.samples, func(x ratioSample) uint32 { return x.src }) || r.samples[0].src != x.src {
			r.sh = r.sh[:0]
			for i := range r.samples {
				r.sh.add(r.samples[i].src, 0)
			}
			src = r.sh.victim(x.src)
		}
		oldest := -1
		for i := range r.samples {
			if r.samples[i].src == src && (oldest < 0 || r.samples[i].at < r.samples[oldest].at) {
				oldest = i
			}
		}
		if oldest < 0 || x.src == src && x.at <= r.samples[oldest].at {
			return
		}
		copy(r.samples[oldest:], r.samples[oldest+1:])
		r.samples = r.samples[:len(r.samples)-1]
	}
	if len(r.samples) == 0 {
		r.ref = p.refFor(x.at)
	} else if ref := p.refFor(x.at); ref > r.ref {
		r.ref = ref
		for i := range r.samples {
			r.samples[i].w = p.weight(r.samples[i].at, ref)
		}
	}
	x.w = p.weight(x.at, r.ref)
	if len(r.samples) == cap(r.samples) {
		grown := make([]ratioSample, len(r.samples), min(max(2*cap(r.samples), 4), p.maxSamples))
		copy(grown, r.samples)
		r.samples = grown
	}
	r.samples = append(r.samples, x)
}

// recompute drops the samples that left the window and publishes the ratio
// of the rest. The caller holds r.mu.
func (r *ratioSeries) recompute(p *params, now int64) {
	cutoff := now - p.window
	oldest := int64(math.MaxInt64)
	n := 0
	for n < len(r.samples) && r.samples[n].at > cutoff {
		oldest = min(oldest, r.samples[n].at)
		n++
	}
	if n < len(r.samples) {
		kept := r.samples[:n]
		for _, s := range r.samples[n+1:] {
			if s.at > cutoff {
				kept = append(kept, s)
				oldest = min(oldest, s.at)
			}
		}
		clear(r.samples[len(kept):])
		r.samples = kept
	}
	kept := r.samples
	if len(kept) == 0 {
		r.pub.store(0, 0)
		r.expires.Store(math.MaxInt64)
		return
	}
	// A reporter's share is of the prompt tokens' weight, the ratio's
	// denominator: the weight a call has in the ratio.
	var num, den float64
	if oneSource(kept, func(x ratioSample) uint32 { return x.src }) {
		for _, s := range kept {
			num += s.w * s.num
			den += s.w * s.den
		}
	} else {
		r.sh = r.sh[:0]
		for _, s := range kept {
			r.sh.add(s.src, s.w*s.den)
		}
		r.sh.cap()
		for _, s := range kept {
			f := r.sh.factorOf(s.src)
			num += f * s.w * s.num
			den += f * s.w * s.den
		}
	}
	rate := math.NaN()
	if den > 0 {
		rate = num / den
	}
	r.pub.store(rate, len(kept))
	r.expires.Store(oldest + p.window)
}
