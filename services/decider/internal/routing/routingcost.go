package routing

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// CostOptions tune the routing-cost policy (docs/architecture.md,
// "Decisions and their reasons"). The zero value gives the defaults.
type CostOptions struct {
	// Margin: endpoints whose routing cost is within this fraction of the
	// lowest share the traffic fully. A model's catalog setting
	// (routing.competitive_margin) overrides it. (Optional) Defaults to 0.10.
	Margin float64
	// Falloff: beyond the margin, an endpoint's weight is
	// exp(-excess/Falloff), excess being how far, as a fraction of the
	// lowest cost, it lies beyond the margin: 5% beyond weighs 0.37, 20%
	// beyond 0.02. (Optional) Defaults to 0.05.
	Falloff float64
	// Floor is the share of traffic every endpoint keeps (new ones, slow
	// ones, ones flagged for quality), so a change in any of them is seen;
	// at most half the traffic goes to floors. (Optional) Defaults to 0.02;
	// negative disables.
	Floor float64
	// MinSuccess floors the success probability, so an endpoint that fails
	// almost always costs at most 1/MinSuccess attempts rather than
	// infinity (it is excluded by the error guard anyway). (Optional)
	// Defaults to 0.2.
	MinSuccess float64
	// RateLimitPenalty is the waiting a 429 costs: the refusal itself, then
	// a new connection to the next endpoint. (Optional) Defaults to 2s.
	RateLimitPenalty time.Duration
	// PriorCalls is the weight, in calls, of the model's typical rates in
	// an endpoint's own: a new endpoint starts at its peers' median and
	// its own record takes over as calls accumulate; an idle one drifts
	// back to it as its calls age. (Optional) Defaults to 5.
	PriorCalls float64
	// ErrorExcess and ErrorFactor: an endpoint whose error rate is at least
	// ErrorExcess above its peers' median and at least ErrorFactor times
	// it gets no traffic until its rate falls back. (Optional) Default
	// to 0.10 and 3.
	ErrorExcess, ErrorFactor float64
	// QualityExcess: likewise for answers that fail a quality check, with
	// ErrorFactor; such an endpoint gets only its floor (test traffic).
	// (Optional) Defaults to 0.10.
	QualityExcess float64
	// BackoffGain: an endpoint whose recent failure rate (429s and errors,
	// the last minute or so) runs above its longer-run rate has its weight
	// multiplied by 1 - BackoffGain × the difference, at least MinBackoff.
	// (Optional) Defaults to 3 and 0.02.
	BackoffGain, MinBackoff float64
}

func (o *CostOptions) defaults() {
	def := func(v *float64, d float64) {
		if !(*v > 0) {
			*v = d
		}
	}
	def(&o.Margin, 0.10)
	def(&o.Falloff, 0.05)
	if o.Floor == 0 {
		o.Floor = 0.02
	}
	o.Floor = max(o.Floor, 0)
	def(&o.MinSuccess, 0.2)
	o.MinSuccess = min(o.MinSuccess, 1)
	if o.RateLimitPenalty <= 0 {
		o.RateLimitPenalty = 2 * time.Second
	}
	def(&o.PriorCalls, 5)
	def(&o.ErrorExcess, 0.10)
	def(&o.ErrorFactor, 3)
	def(&o.QualityExcess, 0.10)
	def(&o.BackoffGain, 3)
	def(&o.MinBackoff, 0.02)
}

// guard is what the routing-cost policy's guards did to a candidate.
type guard uint8

const (
	guardNone guard = iota
	guardCapped
	guardErrors
	guardQuality
)

// costInputs are one candidate's figures for the routing cost, after the
// model's typical numbers filled in what it lacks.
type costInputs struct {
	price    float64 // USD for this request's expected token mix
	wait     float64 // seconds: TTFT plus streaming the expected output
	limited  float64 // 429 rate
	failed   float64 // error rate
	poor     float64 // quality-failure rate
	recent   float64 // recent failure rate (429s and errors)
	longRun  float64 // longer-run failure rate (429s and errors)
	load     float64 // requests/min routed here
	capRPM   float64 // learned cap, 0 none
	hit      float64 // cache-hit rate used
	tps      float64 // throughput used, 0 unknown
	ttftSecs float64 // TTFT used, 0 unknown
}

// routingCost is the expected cost of one good answer from one endpoint:
// one attempt's price, plus its waiting priced at timeValue (USD per
// second), plus the 429 penalty weighted by how often the endpoint
// refuses, all divided by the chance the attempt succeeds (floored at
// minSuccess): 1 failure in 5 means 1.25 attempts per good answer.
func routingCost(x costInputs, timeValue, penaltySecs, minSuccess float64) float64 {
	attempt := x.price + x.wait*timeValue + x.limited*penaltySecs*timeValue
	success := max(minSuccess, 1-x.failed-x.poor)
	return attempt / success
}

// shareWeight is an endpoint's weight before back-off: 1 within the margin
// of the best routing cost, falling exponentially in the excess beyond it.
func shareWeight(cost, best, margin, falloff float64) float64 {
	if best <= 0 {
		if cost <= 0 {
			return 1
		}
		return 0
	}
	excess := cost/best - 1 - margin
	if excess <= 0 {
		return 1
	}
	return math.Exp(-excess / falloff)
}

// backoff is the weight multiplier of an endpoint whose recent failure
// rate runs above its longer-run rate: it starts failing, its share drops
// at once; the gap closes as it recovers (or as the longer-run rate, and
// with it the routing cost, catches up with a lasting failure).
func backoff(recent, longRun, gain, floor float64) float64 {
	return max(floor, min(1, 1-gain*(recent-longRun)))
}

// median of xs (which it sorts); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// typical is an endpoint's own figure from n samples where it has enough
// of them, else its own and the model's typical figure (med) weighed as n
// samples against k: a new endpoint starts at the median of its peers and
// its own figure takes over as samples come (a few probes of a slow
// endpoint must not pass for the median). Without a typical figure, its
// own is all there is.
func typical(own, n, med, enough, k float64) float64 {
	switch {
	case n >= enough || med == 0:
		return own
	case n <= 0:
		return med
	}
	return (n*own + k*med) / (n + k)
}

// shrink is count/calls pulled towards prior with prior weight k.
func shrink(count, calls, prior, k float64) float64 {
	return (count + k*prior) / (calls + k)
}

// expectedOutput is the output a routing-cost estimate assumes: the
// model's typical output, bounded by the request's max_tokens; the
// request's max_tokens (or the default) while the typical is unknown.
func expectedOutput(m *model, est pricing.Request) int64 {
	if typical, _, ok := m.st.TypicalOutput(); ok && typical > 0 {
		if est.MaxOutputTokens > 0 {
			return min(typical, est.MaxOutputTokens)
		}
		return typical
	}
	return est.OutputTokens()
}

// costRank is the routing-cost policy: it prices one good answer on every
// candidate, gives each a share of the traffic, draws the first by share
// (or, when noDraw, takes the largest share) and ranks the rest as
// fallbacks by routing cost, guarded endpoints last.
func (r *Router) costRank(sc *scratch, m *model, est pricing.Request, fastest time.Duration, now time.Time, noDraw bool) switchboardv1.RouteReason {
	o := &r.o.Cost
	cs := sc.order
	r.qualify(cs, fastest) // for the hedge plan, which stays the smart policy's
	// One buffer for every list of figures a median is taken of, so a
	// Decide allocates none.
	sc.floats = slices.Grow(sc.floats[:0], 6*len(cs))
	r.costFigures(cs, m, est, now, sc.followUp, sc.floats)
	r.costGuards(cs, now, sc.floats)
	// Time's price: the model's setting, else the model's median price
	// for this request over its median wait, so that at the model's
	// typical endpoint a tenth less waiting is worth a tenth more price.
	timeValue := m.timeValue / 3600
	if timeValue <= 0 {
		n := len(cs)
		prices, waits := sc.floats[0:0:n], sc.floats[n:n:2*n]
		for _, c := range cs {
			prices = append(prices, c.in.price)
			if c.in.wait > 0 {
				waits = append(waits, c.in.wait)
			}
		}
		if w := median(waits); w > 0 {
			timeValue = median(prices) / w
		}
	}
	for _, c := range cs {
		c.rcost = routingCost(c.in, timeValue, o.RateLimitPenalty.Seconds(), o.MinSuccess)
	}
	r.shares(cs, m)
	slices.SortStableFunc(cs, byRoutingCost)
	var win *candidate
	if noDraw {
		for _, c := range cs {
			if win == nil || c.share > win.share {
				win = c
			}
		}
	} else {
		x := float64(splitmix64(r.o.Seed+r.seq.Add(1))>>11) / (1 << 53)
		for _, c := range cs {
			if c.share <= 0 {
				continue
			}
			win = c
			if x < c.share {
				break
			}
			x -= c.share
		}
	}
	// Fallbacks by routing cost, guarded endpoints behind the others.
	slices.SortStableFunc(cs, func(a, b *candidate) int {
		switch {
		case a == win:
			return -1
		case b == win:
			return 1
		}
		if c := cmp.Compare(guardRank(a.guard), guardRank(b.guard)); c != 0 {
			return c
		}
		return byRoutingCost(a, b)
	})
	return switchboardv1.RouteReason_ROUTE_REASON_ROUTING_COST
}

// guardRank orders guarded fallbacks: test-traffic endpoints and capped
// ones can still answer; one excluded for errors is the very last resort.
func guardRank(g guard) int {
	switch g {
	case guardNone:
		return 0
	case guardQuality, guardCapped:
		return 1
	}
	return 2
}

func byRoutingCost(a, b *candidate) int {
	if c := cmpFloat(a.rcost, b.rcost); c != 0 {
		return c
	}
	return byCost(a, b)
}

// costFigures fills every candidate's cost inputs from its outcomes and
// speed, filling in what a new endpoint lacks (fewer than MinSamples) from
// the model's typical numbers: its peers' medians.
func (r *Router) costFigures(cs []*candidate, m *model, est pricing.Request, now time.Time, followUp bool, buf []float64) {
	o := &r.o.Cost
	enough := float64(r.o.MinSamples)
	n := len(cs)
	hits, tpss, ttfts := buf[0:0:n], buf[n:n:2*n], buf[2*n:2*n:3*n]
	limited, failed, poor := buf[3*n:3*n:4*n], buf[4*n:4*n:5*n], buf[5*n:5*n:6*n]
	for _, c := range cs {
		f := c.ep.oc.Read(now)
		c.fig = f
		if h, ok := f.CacheHitRate(); ok && f.Priced >= enough {
			hits = append(hits, h)
		}
		if t, ok := f.Throughput(); ok && f.Priced >= enough {
			tpss = append(tpss, t)
		}
		if c.samples >= r.o.MinSamples {
			ttfts = append(ttfts, c.ttft.Seconds())
		}
		if f.Calls >= enough {
			limited = append(limited, f.RateLimited/f.Calls)
			failed = append(failed, f.Failed/f.Calls)
			poor = append(poor, f.Poor/f.Calls)
		}
	}
	mHit, mTPS, mTTFT := median(hits), median(tpss), median(ttfts)
	mLimited, mFailed, mPoor := median(limited), median(failed), median(poor)
	out := expectedOutput(m, est)
	in := est.InputTokens
	// priceAt is this request on c's endpoint with cached of its prompt
	// read from cache, the expected output, and the cache writes its
	// breakpoints ask for where the endpoint prices them.
	priceAt := func(c *candidate, cached int64) float64 {
		r := est
		r.CachedTokens, r.MaxOutputTokens, r.TypicalOutputTokens = cached, out, 0
		return pricing.Estimate(c.ep.rates, c.ep.priced(r))
	}
	for _, c := range cs {
		f := c.fig
		x := costInputs{load: f.Load, capRPM: f.Cap}
		h, _ := f.CacheHitRate()
		x.hit = typical(h, f.Priced, mHit, enough, o.PriorCalls)
		t, _ := f.Throughput()
		x.tps = typical(t, f.Priced, mTPS, enough, o.PriorCalls)
		x.ttftSecs = typical(c.ttft.Seconds(), float64(c.samples), mTTFT, enough, o.PriorCalls)
		// The endpoint's real cache-hit rate prices a fresh prompt, unless
		// the caller's own estimate says more of it is cached. A
		// conversation under way is priced where its cache really is: a
		// cache-hit rate earned on other conversations says nothing of
		// this prompt on an endpoint that never saw it.
		typicalCached := min(in, int64(x.hit*float64(in)))
		x.price = priceAt(c, max(c.cached, typicalCached))
		if followUp && r.o.FollowUpTurns > 0 {
			// The conversation's next turns will read this prompt from
			// the cache of whichever endpoint serves it now, at that
			// endpoint's real cache-hit rate: priced per turn over this
			// one and FollowUpTurns more, staying where cache reads are
			// dear costs what it really does (as the smart policy's
			// value, docs/architecture.md).
			this, next := priceAt(c, c.cached), priceAt(c, typicalCached)
			x.price = (this + r.o.FollowUpTurns*next) / (1 + r.o.FollowUpTurns)
		}
		x.wait = x.ttftSecs
		if x.tps > 0 {
			x.wait += float64(out) / x.tps
		}
		x.limited = shrink(f.RateLimited, f.Calls, mLimited, o.PriorCalls)
		x.failed = shrink(f.Failed, f.Calls, mFailed, o.PriorCalls)
		x.poor = shrink(f.Poor, f.Calls, mPoor, o.PriorCalls)
		x.longRun = x.limited + x.failed
		// The recent rate with a prior of no failures: a few fresh errors
		// on an endpoint with little recent traffic count, a single one
		// does not swing it.
		x.recent = f.RecentFailed / (f.RecentCalls + 2)
		c.in = x
	}
}

// costGuards marks candidates over their learned cap or paused by a
// provider's Retry-After, with an error rate far above their peers', or
// flagged for quality. A peer median leaves the candidate itself out: with
// two endpoints, a failing one must be compared with the other, not with
// the mean of the two.
func (r *Router) costGuards(cs []*candidate, now time.Time, buf []float64) {
	o := &r.o.Cost
	n := len(cs)
	errs, poor := buf[0:0:n], buf[n:n:2*n]
	for _, c := range cs {
		errs = append(errs, c.in.failed)
		poor = append(poor, c.in.poor)
	}
	slices.Sort(errs)
	slices.Sort(poor)
	for _, c := range cs {
		c.guard = guardNone
		if n > 1 {
			if p := medianWithout(errs, c.in.failed); c.in.failed >= p+o.ErrorExcess && c.in.failed >= o.ErrorFactor*p {
				c.guard = guardErrors
				continue
			}
			if p := medianWithout(poor, c.in.poor); c.in.poor >= p+o.QualityExcess && c.in.poor >= o.ErrorFactor*p {
				c.guard = guardQuality
				continue
			}
		}
		if (c.in.capRPM > 0 && c.in.load >= c.in.capRPM) || now.Before(c.fig.PausedUntil) {
			c.guard = guardCapped
		}
	}
}

// medianWithout is the median of sorted (which holds v) without one
// occurrence of v; equal values are interchangeable, so which one does not
// matter.
func medianWithout(sorted []float64, v float64) float64 {
	skip, _ := slices.BinarySearch(sorted, v)
	at := func(i int) float64 { // the i-th of the rest
		if i >= skip {
			i++
		}
		return sorted[i]
	}
	m := len(sorted) - 1
	if m == 0 {
		return 0
	}
	if m%2 == 1 {
		return at(m / 2)
	}
	return (at(m/2-1) + at(m/2)) / 2
}

// shares gives each candidate its part of the traffic. Unguarded ones
// share by weight (margin, fall-off, back-off) above a floor each; ones
// flagged for quality get the floor only; capped ones and ones excluded
// for errors get none. When that leaves nobody, the guards are relaxed
// in turn (caps, then quality, then errors): an answer from a guarded
// endpoint beats none.
func (r *Router) shares(cs []*candidate, m *model) {
	o := &r.o.Cost
	margin := o.Margin
	if m.margin > 0 {
		margin = m.margin
	}
	allowed := func(c *candidate, relax int) (full, floorOnly bool) {
		switch c.guard {
		case guardNone:
			return true, false
		case guardCapped:
			return relax >= 1, false
		case guardQuality:
			if relax >= 2 {
				return true, false
			}
			return false, true
		}
		return relax >= 3, false
	}
	for relax := 0; relax <= 3; relax++ {
		best, nFull, nFloor := math.Inf(1), 0, 0
		for _, c := range cs {
			full, floorOnly := allowed(c, relax)
			if full {
				best = min(best, c.rcost)
				nFull++
			}
			if full || floorOnly {
				nFloor++
			}
		}
		if nFull == 0 {
			continue
		}
		floor := 0.0
		if nFloor > 1 {
			floor = min(o.Floor, 0.5/float64(nFloor))
		}
		total := 0.0
		for _, c := range cs {
			c.share, c.weight = 0, 0
			if full, _ := allowed(c, relax); full {
				c.backoff = backoff(c.in.recent, c.in.longRun, o.BackoffGain, o.MinBackoff)
				c.weight = shareWeight(c.rcost, best, margin, o.Falloff) * c.backoff
				total += c.weight
			}
		}
		for _, c := range cs {
			full, floorOnly := allowed(c, relax)
			switch {
			case full:
				c.share = floor + (1-float64(nFloor)*floor)*c.weight/total
			case floorOnly:
				c.share = floor
			}
		}
		return
	}
}

// routed records the load this decider sends the chosen endpoint, which
// the learned caps are measured against.
func routed(c *candidate, now time.Time) {
	if c.ep.oc != nil {
		c.ep.oc.Routed(now)
	}
}
