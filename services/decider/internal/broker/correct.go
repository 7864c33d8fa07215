package broker

import (
	"math"
	"sync"
	"sync/atomic"
)

// CorrectionOptions tune estimate correction.
type CorrectionOptions struct {
	// Alpha is the EWMA weight of one observation. (Optional) Defaults to 0.1.
	Alpha float64
	// MaxStep is the largest relative change one observation can make to a
	// factor: 0.05 is ±5%. (Optional) Defaults to 0.05.
	MaxStep float64
	// Min and Max bound every factor. (Optional) Default to 0.5 and 2.
	Min, Max float64
}

func (o *CorrectionOptions) defaults() {
	if !(o.Alpha > 0 && o.Alpha <= 1) {
		o.Alpha = 0.1
	}
	if !(o.MaxStep > 0 && o.MaxStep <= 1) {
		o.MaxStep = 0.05
	}
	if !(o.Min > 0) {
		o.Min = 0.5
	}
	if !(o.Max >= o.Min) || math.IsInf(o.Max, 0) {
		o.Max = max(2, o.Min)
	}
}

type corrKey struct{ model, route string }

// correction holds the factors of one (model, route). Reads are lock-free
// (float bits in atomics) because Reserve reads them on every call; the
// rare writers serialise on mu.
type correction struct {
	mu      sync.Mutex
	in, out atomic.Uint64
	usd     atomic.Uint64
	n       atomic.Int64
}

func newCorrection() *correction {
	c := &correction{}
	one := math.Float64bits(1)
	c.in.Store(one)
	c.out.Store(one)
	c.usd.Store(one)
	return c
}

func load(a *atomic.Uint64) float64 { return math.Float64frombits(a.Load()) }

// Factors returns the correction factors of (model, route) for input
// tokens, output tokens and spend, and how many observations trained them.
// Without observations every factor is 1.
func (b *Broker) Factors(model, route string) (in, out, usd float64, n int64) {
	v, ok := b.corr.Load(corrKey{model, route})
	if !ok {
		return 1, 1, 1, 0
	}
	c := v.(*correction)
	return load(&c.in), load(&c.out), load(&c.usd), c.n.Load()
}

// Correct returns d with its input tokens, output tokens and spend
// multiplied by the correction factors learned for (model, route), tokens
// rounded up. Requests are not corrected.
func (b *Broker) Correct(model, route string, d Demand) Demand {
	v, ok := b.corr.Load(corrKey{model, route})
	if !ok {
		return d
	}
	c := v.(*correction)
	d.InputTokens = scaleTokens(d.InputTokens, load(&c.in))
	d.OutputTokens = scaleTokens(d.OutputTokens, load(&c.out))
	d.USD *= load(&c.usd)
	return d
}

func scaleTokens(n int64, f float64) int64 {
	if n == 0 || f == 1 {
		return n
	}
	v := math.Ceil(float64(n) * f)
	if v >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return int64(v)
}

// observe trains the factors of (model, route) with one reconciled call:
// for each dimension with a positive estimate, see step.
func (b *Broker) observe(model, route string, est Demand, u Usage) {
	if est.InputTokens <= 0 && est.OutputTokens <= 0 && est.USD <= 0 {
		return
	}
	k := corrKey{model, route}
	v, ok := b.corr.Load(k)
	if !ok {
		v, _ = b.corr.LoadOrStore(k, newCorrection())
	}
	c := v.(*correction)
	o := &b.opts.Correction
	c.mu.Lock()
	defer c.mu.Unlock()
	if est.InputTokens > 0 {
		c.in.Store(math.Float64bits(o.step(load(&c.in), float64(u.InputTokens)/float64(est.InputTokens))))
	}
	if est.OutputTokens > 0 {
		c.out.Store(math.Float64bits(o.step(load(&c.out), float64(u.OutputTokens)/float64(est.OutputTokens))))
	}
	if est.USD > 0 {
		c.usd.Store(math.Float64bits(o.step(load(&c.usd), u.CostUSD/est.USD)))
	}
	c.n.Add(1)
}

// step is one bounded EWMA update of factor f with the observed ratio r =
// actual / estimate:
//
//	r' = clamp(r, Min, Max)
//	f' = f + Alpha·(r' − f)
//	f' = clamp(f', f·(1−MaxStep), f·(1+MaxStep))
//	f' = clamp(f', Min, Max)
//
// so one odd request moves a factor by at most MaxStep of itself, whatever
// its ratio.
func (o *CorrectionOptions) step(f, r float64) float64 {
	if math.IsNaN(r) {
		return f
	}
	r = clamp(r, o.Min, o.Max)
	n := f + o.Alpha*(r-f)
	n = clamp(n, f*(1-o.MaxStep), f*(1+o.MaxStep))
	return clamp(n, o.Min, o.Max)
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }
