package routing

import (
	"slices"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// fallbackPolicy is a model's catalog fallback policy, compiled: what its
// requests tolerate when they move off their first endpoint. It is applied
// here, where the decider ranks the fallbacks, and only here: an endpoint
// it rules out is neither among a decision's fallbacks nor a hedge's
// target, so the edge, which walks the fallbacks it is given, never moves
// a request there, and Decide's own reservation walk never reserves there.
type fallbackPolicy struct {
	set        bool // the model has a policy
	deny       bool // no fallback at all
	priceRatio float64
	sameRegion bool
	regions    []string
	minContext int64
}

func newFallbackPolicy(f *catalog.Fallback) fallbackPolicy {
	if f == nil {
		return fallbackPolicy{}
	}
	return fallbackPolicy{set: true, deny: !f.Allows(), priceRatio: f.MaxPriceRatio, sameRegion: f.SameRegion,
		regions: slices.Clone(f.Regions), minContext: f.MinContextTokens}
}

// filter keeps the first endpoint of a ranking and those fallbacks the
// policy lets the request move to, in order, and returns the region
// same_region held the request to ("" when it does not apply). The ranking
// itself is left as it is (the explanation reads it): a new slice is made
// when an endpoint is dropped from the middle.
//
// Residency is the request's region (its edge's) when it names one and an
// endpoint the request may use serves there: then the first endpoint is
// the best ranked in that region, and the fallbacks stay in it. Otherwise
// it is the first endpoint's region, as for a request naming none.
func (p fallbackPolicy) filter(usable []*candidate, region string) ([]*candidate, string) {
	if !p.set || len(usable) == 0 {
		return usable, ""
	}
	var residency string
	if p.sameRegion {
		residency = usable[0].ep.region
		if region != "" && region != residency {
			if i := slices.IndexFunc(usable, func(c *candidate) bool { return c.ep.region == region }); i > 0 {
				usable, residency = usable[i:], region
			}
		}
	}
	if len(usable) < 2 {
		return usable, residency
	}
	if p.deny {
		return usable[:1], residency
	}
	first := usable[0]
	var out []*candidate
	for i, c := range usable[1:] {
		switch {
		case p.allows(first, c, residency):
			if out != nil {
				out = append(out, c)
			}
		case out == nil:
			out = append(make([]*candidate, 0, len(usable)-1), usable[:i+1]...)
		}
	}
	if out == nil {
		return usable, residency
	}
	return out, residency
}

// allows reports whether a request first sent to first may move to c: no
// dearer for this request than priceRatio times first's price, in the
// residency region (same_region) and one of regions, with a known context
// length of at least minContext.
func (p fallbackPolicy) allows(first, c *candidate, residency string) bool {
	switch {
	case p.priceRatio > 0 && c.cost > p.priceRatio*first.cost*(1+1e-9):
		return false
	case p.sameRegion && (c.ep.region == "" || c.ep.region != residency):
		return false
	case len(p.regions) > 0 && !slices.Contains(p.regions, c.ep.region):
		return false
	case p.minContext > 0 && c.ep.contextLength < p.minContext:
		return false
	}
	return true
}
