package catalog

import (
	"fmt"
	"math"
	"regexp"
)

// Fallback is what one model's workload tolerates when a request moves off
// its first endpoint to another (a retry elsewhere, a hedge): another
// provider may differ in price, residency and context size, and a request
// moves only where the model's policy says those differences are
// acceptable. The decider applies it where it ranks the fallbacks (the
// routing package): an endpoint the policy rules out is not among a
// decision's fallbacks nor a hedge's target, so no edge can move there.
type Fallback struct {
	// Allow lets requests move to another endpoint at all. (Optional)
	// Defaults to true: the endpoints of one model serve the same open
	// model. False keeps every request on its first endpoint, retried
	// there only after its pause, within its retry budget and deadline.
	Allow *bool `yaml:"allow"`
	// MaxPriceRatio is the most a fallback may cost for the request, as a
	// multiple of the first endpoint's price for it. (Optional) 0 or unset
	// means any price.
	MaxPriceRatio float64 `yaml:"max_price_ratio"`
	// SameRegion keeps fallbacks in the first endpoint's region
	// (residency). (Optional) Every endpoint of the model must then name
	// its region.
	SameRegion bool `yaml:"same_region"`
	// Regions lists the regions a fallback may be in. (Optional) Empty
	// means any; every endpoint of the model must then name its region.
	Regions []string `yaml:"regions"`
	// MinContextTokens is the smallest context_length a fallback may have;
	// an endpoint whose context length is unknown (0) is not one.
	// (Optional) 0 means any.
	MinContextTokens int64 `yaml:"min_context_tokens"`
}

// Allows reports whether requests of the model may move off their first
// endpoint; true when the model says nothing.
func (f *Fallback) Allows() bool { return f == nil || f.Allow == nil || *f.Allow }

// regionRE is a region name: lowercase letters, digits, '-' and '_'.
var regionRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

func validateFallback(m Model, path string, bad func(string, string, ...any)) {
	for j, e := range m.Endpoints {
		if e.Region != "" && !regionRE.MatchString(e.Region) {
			bad(fmt.Sprintf("%s.endpoints[%d].region", path, j), "%q is not a region name: lowercase letters, digits, '-' and '_'", e.Region)
		}
	}
	f := m.Fallback
	if f == nil {
		return
	}
	fp := path + ".fallback"
	if r := f.MaxPriceRatio; r < 0 || math.IsNaN(r) || math.IsInf(r, 0) || r > 1000 {
		bad(fp+".max_price_ratio", "%g must be between 0 (any price) and 1000 (a multiple of the first endpoint's price)", r)
	}
	if f.MinContextTokens < 0 {
		bad(fp+".min_context_tokens", "%d must not be negative", f.MinContextTokens)
	}
	for k, r := range f.Regions {
		if !regionRE.MatchString(r) {
			bad(fmt.Sprintf("%s.regions[%d]", fp, k), "%q is not a region name: lowercase letters, digits, '-' and '_'", r)
		}
	}
	if !f.SameRegion && len(f.Regions) == 0 {
		return
	}
	field := fp + ".same_region"
	if !f.SameRegion {
		field = fp + ".regions"
	}
	for j, e := range m.Endpoints {
		if e.Region == "" {
			bad(field, "needs every endpoint's region: endpoints[%d] (%s) names none", j, e.Provider)
		}
	}
}
