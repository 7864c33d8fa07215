package experiment

import (
	"math"
	"slices"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// metric is one reported figure, computed the same way on one block and on
// an arm's blocks pooled; false when the block has no data for it.
type metric struct {
	name, unit string
	of         func(b *block) (float64, bool)
}

func quantileOf(h func(b *block) *hist, q float64) func(b *block) (float64, bool) {
	return func(b *block) (float64, bool) { return h(b).quantile(q) }
}

func perRequest(scale float64, sum func(b *block) float64) func(b *block) (float64, bool) {
	return func(b *block) (float64, bool) {
		if b.requests == 0 {
			return 0, false
		}
		return scale * sum(b) / float64(b.requests), true
	}
}

// metrics are the figures of every arm, in the order reported.
var metrics = []metric{
	{"ttft_p50", "ms", quantileOf(func(b *block) *hist { return &b.ttft }, 0.50)},
	{"ttft_p95", "ms", quantileOf(func(b *block) *hist { return &b.ttft }, 0.95)},
	{"caller_ttft_p50", "ms", quantileOf(func(b *block) *hist { return &b.callerTTFT }, 0.50)},
	{"caller_ttft_p95", "ms", quantileOf(func(b *block) *hist { return &b.callerTTFT }, 0.95)},
	{"throughput_p50", "tokens/s", quantileOf(func(b *block) *hist { return &b.throughput }, 0.50)},
	{"cost_per_1k_requests", "usd", perRequest(1000, func(b *block) float64 { return b.costUSD })},
	{"cost_per_1m_tokens", "usd", func(b *block) (float64, bool) {
		if b.tokens == 0 {
			return 0, false
		}
		return 1e6 * b.costUSD / float64(b.tokens), true
	}},
	{"e2e_p50", "ms", quantileOf(func(b *block) *hist { return &b.e2e }, 0.50)},
	{"e2e_p95", "ms", quantileOf(func(b *block) *hist { return &b.e2e }, 0.95)},
	{"rate_limited_share", "share", perRequest(1, func(b *block) float64 { return float64(b.rateLimited) })},
	{"retry_share", "share", perRequest(1, func(b *block) float64 { return float64(b.retried) })},
	{"failed_attempt_ms", "ms", perRequest(1, func(b *block) float64 { return b.failedMS })},
}

// Report computes the figures of each arm from blocks (merged over the
// replicas). The switchback's unit is the block: each metric is computed
// per block, an arm's estimate is the mean over its blocks with a 95%
// interval from Student's t with blocks-1 degrees of freedom, and the
// difference between the arms uses Welch's t. Requests within one block
// are not independent (they share the block's load and provider state), so
// they are never the unit of an interval.
func (p *Plan) report(blocks map[int]*block) (arms []*switchboardv1.ArmReport, diffs []*switchboardv1.MetricEstimate) {
	idx := make([]int, 0, len(blocks))
	for i := range blocks {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	perArm := [2][][]float64{make([][]float64, len(metrics)), make([][]float64, len(metrics))}
	for a := range 2 {
		pooled := &block{}
		ar := &switchboardv1.ArmReport{Policy: string(p.Arms[a])}
		for _, i := range idx {
			b := blocks[i]
			if p.ArmOf(i) != a {
				continue
			}
			pooled.merge(b)
			if b.requests > 0 {
				ar.Blocks++
			}
			for m, mt := range metrics {
				if v, ok := mt.of(b); ok {
					perArm[a][m] = append(perArm[a][m], v)
				}
			}
		}
		ar.Requests, ar.BurnInRequests = pooled.requests, pooled.burnIn
		for m, mt := range metrics {
			est := meanCI(perArm[a][m])
			est.Name, est.Unit = mt.name, mt.unit
			est.Pooled, _ = mt.of(pooled)
			ar.Metrics = append(ar.Metrics, est)
		}
		arms = append(arms, ar)
	}
	for m, mt := range metrics {
		d := welch(perArm[0][m], perArm[1][m])
		d.Name, d.Unit = mt.name, mt.unit
		diffs = append(diffs, d)
	}
	return arms, diffs
}

// meanCI is the mean of xs with its 95% interval (two values or more).
func meanCI(xs []float64) *switchboardv1.MetricEstimate {
	est := &switchboardv1.MetricEstimate{Blocks: int64(len(xs))}
	if len(xs) == 0 {
		return est
	}
	mean, v := meanVar(xs)
	est.Estimate = mean
	if len(xs) >= 2 {
		half := tQuantile975(float64(len(xs)-1)) * math.Sqrt(v/float64(len(xs)))
		est.CiLow, est.CiHigh, est.HasInterval = mean-half, mean+half, true
	}
	return est
}

// welch is mean(b) − mean(a) with its 95% interval by Welch's t (each arm
// needs two values or more).
func welch(a, b []float64) *switchboardv1.MetricEstimate {
	est := &switchboardv1.MetricEstimate{Blocks: int64(len(a) + len(b))}
	if len(a) == 0 || len(b) == 0 {
		return est
	}
	ma, va := meanVar(a)
	mb, vb := meanVar(b)
	est.Estimate = mb - ma
	if len(a) < 2 || len(b) < 2 {
		return est
	}
	sa, sb := va/float64(len(a)), vb/float64(len(b))
	se := math.Sqrt(sa + sb)
	half := 0.0
	if se > 0 {
		df := (sa + sb) * (sa + sb) / (sa*sa/float64(len(a)-1) + sb*sb/float64(len(b)-1))
		half = tQuantile975(df) * se
	}
	est.CiLow, est.CiHigh, est.HasInterval = est.Estimate-half, est.Estimate+half, true
	return est
}

// meanVar returns the mean and the sample variance (n−1) of xs.
func meanVar(xs []float64) (mean, variance float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		variance += (x - mean) * (x - mean)
	}
	return mean, variance / float64(len(xs)-1)
}

// t975 are the 0.975 quantiles of Student's t for 1 to 30 degrees of freedom.
var t975 = [...]float64{
	12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
}

// tQuantile975 is the 0.975 quantile of Student's t with df degrees of
// freedom (df ≥ 1; Welch's df need not be whole): the table, interpolated,
// up to 30, then the Cornish–Fisher expansion around the normal quantile,
// within 0.001 of the exact value from 30 on.
func tQuantile975(df float64) float64 {
	if df < 1 {
		df = 1
	}
	if df <= float64(len(t975)) {
		lo := int(math.Floor(df))
		if float64(lo) == df || lo >= len(t975) {
			return t975[lo-1]
		}
		f := df - float64(lo)
		return t975[lo-1]*(1-f) + t975[lo]*f
	}
	const z = 1.959964
	z3, z5 := z*z*z, z*z*z*z*z
	return z + (z3+z)/(4*df) + (5*z5+16*z3+3*z)/(96*df*df)
}
