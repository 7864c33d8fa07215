package routing

import (
	"cmp"
	"slices"
	"strings"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// rank orders the usable candidates in place and says why the first won:
// by the user's choice when it made one, else by the smart policy, which
// explores unless noExplore.
func (r *Router) rank(cs []*candidate, suffix string, prefs *switchboardv1.ProviderPreferences, noExplore bool) (switchboardv1.RouteReason, time.Duration) {
	slices.SortStableFunc(cs, byCost)
	fastest := r.fastest(cs)
	if reason, ok := userRank(cs, suffix, prefs); ok {
		return reason, fastest
	}
	return r.smartRank(cs, fastest, noExplore), fastest
}

// fastest is the typical TTFT the others must come within SpeedFactor of:
// the fastest endpoint's, but a figure from fewer than MinSamples samples —
// an endpoint seldom chosen, known from a few probes of another size or
// from the hedges it won — is trusted only to within SpeedFactor. So a thin
// endpoint rules a well-measured one too slow only when that one is slower
// by SpeedFactor twice over; with no endpoint well measured, the thin
// figures are all there is. 0 when nothing is measured.
func (r *Router) fastest(cs []*candidate) time.Duration {
	var well, thin time.Duration
	for _, c := range cs {
		switch {
		case c.samples >= r.o.MinSamples:
			if well == 0 || c.ttft < well {
				well = c.ttft
			}
		case c.samples > 0:
			if thin == 0 || c.ttft < thin {
				thin = c.ttft
			}
		}
	}
	switch {
	case well == 0:
		return thin
	case thin > 0:
		return min(well, time.Duration(float64(thin)*r.o.SpeedFactor))
	}
	return well
}

// userRank applies the user's choice (provider.sort, provider.order, the
// :floor and :nitro suffixes), which replaces the policy; ok is false
// when the user made none. provider.only and provider.ignore are no choice
// of order: they filter the endpoints and the policy ranks the rest. cs is
// in price order.
func userRank(cs []*candidate, suffix string, prefs *switchboardv1.ProviderPreferences) (reason switchboardv1.RouteReason, ok bool) {
	switch {
	case suffix == "floor" || prefs.GetSort() == switchboardv1.Sort_SORT_PRICE:
		if suffix == "floor" {
			return switchboardv1.RouteReason_ROUTE_REASON_FLOOR, true
		}
		return switchboardv1.RouteReason_ROUTE_REASON_USER_SORT, true
	case suffix == "nitro" || prefs.GetSort() == switchboardv1.Sort_SORT_THROUGHPUT:
		byThroughput(cs)
		if suffix == "nitro" {
			return switchboardv1.RouteReason_ROUTE_REASON_NITRO, true
		}
		return switchboardv1.RouteReason_ROUTE_REASON_USER_SORT, true
	case prefs.GetSort() == switchboardv1.Sort_SORT_LATENCY:
		slices.SortStableFunc(cs, byLatency)
		return switchboardv1.RouteReason_ROUTE_REASON_USER_SORT, true
	case len(prefs.GetOrder()) > 0:
		order := prefs.GetOrder()
		slices.SortStableFunc(cs, func(a, b *candidate) int { return byOrder(order, a, b) })
		return switchboardv1.RouteReason_ROUTE_REASON_USER_ORDER, true
	}
	return 0, false
}

// userChose reports whether the request ranks its endpoints itself
// (provider.sort, provider.order, :floor, :nitro), which bypasses the
// routing-cost policy; provider.only and provider.ignore only filter, and
// the policy picks among the endpoints left.
func userChose(suffix string, prefs *switchboardv1.ProviderPreferences) bool {
	return suffix == "floor" || suffix == "nitro" || prefs.GetSort() != switchboardv1.Sort_SORT_UNSPECIFIED || len(prefs.GetOrder()) > 0
}

// byThroughput orders cs, in price order, by throughput, fastest first. An
// endpoint with no throughput figure yet (no stream or probe measured it)
// ranks as the median of the measured ones: a figure of 0 would rank it
// the slowest, and the fastest is a guess no better. On a tie a measured
// figure goes before an assumed one, then price order holds; with none
// measured, the order is the price order.
func byThroughput(cs []*candidate) {
	var buf [16]float64
	known := buf[:0]
	for _, c := range cs {
		if c.tps > 0 {
			known = append(known, c.tps)
		}
	}
	med := median(known)
	for _, c := range cs {
		c.tpsRank = c.tps
		if c.tps <= 0 {
			c.tpsRank = med
			c.note = noteNoThroughput
		}
	}
	slices.SortStableFunc(cs, func(a, b *candidate) int {
		if c := cmpFloat(b.tpsRank, a.tpsRank); c != 0 {
			return c
		}
		return cmpBool(b.tps > 0, a.tps > 0)
	})
}

// byLatency orders measured candidates by TTFT, unmeasured ones last.
func byLatency(a, b *candidate) int {
	switch {
	case a.samples > 0 && b.samples > 0:
		return cmp.Compare(a.ttft, b.ttft)
	case a.samples > 0:
		return -1
	case b.samples > 0:
		return 1
	}
	return 0
}

// byOrder orders candidates by their provider's place in order, providers
// not named last.
func byOrder(order []string, a, b *candidate) int {
	ra, rb := slices.Index(order, a.ep.provider), slices.Index(order, b.ep.provider)
	switch {
	case ra >= 0 && rb >= 0:
		return ra - rb
	case ra >= 0:
		return -1
	case rb >= 0:
		return 1
	}
	return 0
}

// smartRank is the default policy: the cheapest endpoint that is fast
// enough for this prompt size, with a share of requests exploring
// endpoints with too little data. cs is in price order.
func (r *Router) smartRank(cs []*candidate, fastest time.Duration, noExplore bool) switchboardv1.RouteReason {
	// No speed data at all: the cheapest.
	if fastest == 0 {
		slices.SortStableFunc(cs, byValue)
		for _, c := range cs {
			c.note = noteNoData
		}
		if e := r.explore(cs, noExplore); e != nil {
			return switchboardv1.RouteReason_ROUTE_REASON_EXPLORATION
		}
		return switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA
	}
	anyAllowed := r.qualify(cs, fastest)
	// From here on, this turn and the conversation's next ones: the
	// cheapest over the turns to come, which for a request that is not a
	// follow-up is the cheapest now.
	slices.SortStableFunc(cs, byValue)
	if e := r.explore(cs, noExplore); e != nil {
		return switchboardv1.RouteReason_ROUTE_REASON_EXPLORATION
	}
	if !anyAllowed {
		// Every fast endpoint is too expensive: the cheapest serves (cs is
		// already in price order).
		for _, c := range cs {
			if c.qualified {
				return switchboardv1.RouteReason_ROUTE_REASON_PRICE_GUARD
			}
		}
		return switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA
	}
	// The cheapest allowed endpoint first, then the other allowed ones by
	// price, then the rest by price: retries go to fast ones first.
	slices.SortStableFunc(cs, func(a, b *candidate) int {
		switch {
		case a.allowed == b.allowed:
			return 0
		case a.allowed:
			return -1
		}
		return 1
	})
	return switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING
}

// qualify marks which candidates are fast enough (within SpeedFactor of
// the fastest, or under FastEnough) and, of those, which the price guard
// allows; it reports whether any is allowed.
func (r *Router) qualify(cs []*candidate, fastest time.Duration) (anyAllowed bool) {
	limit := max(time.Duration(float64(fastest)*r.o.SpeedFactor), r.o.FastEnough)
	usual := usualCost(cs)
	for _, c := range cs {
		switch {
		case c.samples == 0:
			c.note = noteNoData
		case c.ttft > limit && c.ttft >= r.o.FastEnough:
			c.note = noteTooSlow
		default:
			c.qualified = true
			// Above the usual price, an endpoint wins for speed only when it
			// is still at least (1-PriceGuard) below the list price.
			c.allowed = c.cost <= usual || c.listCost == 0 || c.cost <= r.o.PriceGuard*c.listCost
			if c.allowed {
				c.note = noteQualified
				anyAllowed = true
			} else {
				c.note = notePriceGuard
			}
		}
	}
	return anyAllowed
}

// byCost orders candidates by this request's cost, then by provider name so
// equal costs order the same way every time.
func byCost(a, b *candidate) int {
	if c := cmpFloat(a.cost, b.cost); c != 0 {
		return c
	}
	return strings.Compare(a.ep.provider, b.ep.provider)
}

// byValue orders candidates by this request's cost plus its conversation's
// next turns on each (value), then as byCost.
func byValue(a, b *candidate) int {
	if c := cmpFloat(a.value, b.value); c != 0 {
		return c
	}
	return byCost(a, b)
}

// explore sends a share of requests to an endpoint with too little data in
// this bucket, so one that became faster is noticed. It moves the
// chosen one to the front and returns it, or returns nil.
func (r *Router) explore(cs []*candidate, noExplore bool) *candidate {
	if noExplore || r.o.Exploration <= 0 || len(cs) < 2 {
		return nil
	}
	x := splitmix64(r.o.Seed + r.seq.Add(1))
	if float64(x>>11)/(1<<53) >= r.o.Exploration {
		return nil
	}
	thin := 0
	for _, c := range cs {
		if c.samples < r.o.MinSamples && !c.cooling {
			thin++
		}
	}
	if thin == 0 {
		return nil
	}
	pick := int((x >> 3) % uint64(thin))
	for i, c := range cs {
		if c.samples < r.o.MinSamples && !c.cooling {
			if pick == 0 {
				copy(cs[1:i+1], cs[:i])
				cs[0] = c
				c.note = noteExplored
				return c
			}
			pick--
		}
	}
	return nil
}

// usualCost is the model's usual price for this request: the median of the
// usable endpoints' costs for this exact token mix. "Usual" is what most
// providers charge, so one cheap outlier does not make everyone "expensive".
func usualCost(cs []*candidate) float64 {
	// cs is sorted by cost.
	n := len(cs)
	if n%2 == 1 {
		return cs[n/2].cost
	}
	return (cs[n/2-1].cost + cs[n/2].cost) / 2
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// splitmix64 turns a counter into a well-mixed pseudo-random number: with a
// fixed seed, a sequence of Decide calls explores the same way every run,
// without a lock around a shared generator.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
