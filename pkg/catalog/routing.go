package catalog

import (
	"math"
	"slices"
)

// Routing policy names, as a model's routing.policy and the decider's
// --routing-policy flag spell them.
const (
	// PolicySmart is the default policy: the cheapest endpoint fast enough
	// for the prompt's size.
	PolicySmart = "smart"
	// PolicyRoutingCost ranks endpoints by the expected cost of one good
	// answer and spreads traffic over those near the best.
	PolicyRoutingCost = "routing-cost"
)

// RoutingPolicies are the valid routing policy names.
var RoutingPolicies = []string{PolicySmart, PolicyRoutingCost}

// ModelRouting tunes how the decider ranks one model's endpoints
// (docs/architecture.md, "Decisions and their reasons").
type ModelRouting struct {
	// Policy is "smart" or "routing-cost". (Optional) Defaults to the
	// deployment's default policy (the decider's --routing-policy).
	Policy string `yaml:"policy"`
	// TimeValueUSDPerHour is what an hour of a caller's waiting is worth,
	// the rate at which the routing-cost policy turns waiting time into
	// money. (Optional) 0 or unset derives it per request from the model's
	// own endpoints: their median price for the request over their median
	// waiting time, so that at the model's typical endpoint a tenth less
	// waiting is worth a tenth more price.
	TimeValueUSDPerHour *float64 `yaml:"time_value_usd_per_hour"`
	// CompetitiveMargin is how far above the lowest routing cost, as a
	// fraction, an endpoint still shares the traffic fully. (Optional)
	// Defaults to the decider's setting (0.10).
	CompetitiveMargin *float64 `yaml:"competitive_margin"`
}

// TimeValue is the model's time value in USD per hour, 0 when unset.
func (r *ModelRouting) TimeValue() float64 {
	if r == nil || r.TimeValueUSDPerHour == nil {
		return 0
	}
	return *r.TimeValueUSDPerHour
}

// Margin is the model's competitive margin, 0 when unset.
func (r *ModelRouting) Margin() float64 {
	if r == nil || r.CompetitiveMargin == nil {
		return 0
	}
	return *r.CompetitiveMargin
}

// PolicyName is the model's policy, "" when unset.
func (r *ModelRouting) PolicyName() string {
	if r == nil {
		return ""
	}
	return r.Policy
}

func validateModelRouting(r *ModelRouting, path string, bad func(string, string, ...any)) {
	if r == nil {
		return
	}
	if r.Policy != "" && !slices.Contains(RoutingPolicies, r.Policy) {
		bad(path+".policy", "%q is not a routing policy: use %q or %q", r.Policy, PolicySmart, PolicyRoutingCost)
	}
	if v := r.TimeValueUSDPerHour; v != nil && (*v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0) || *v > 1e6) {
		bad(path+".time_value_usd_per_hour", "%g must be between 0 and 1000000 USD per hour", *v)
	}
	if v := r.CompetitiveMargin; v != nil && !(*v > 0 && *v <= 10) {
		bad(path+".competitive_margin", "%g must be above 0 and at most 10 (a fraction: 0.1 is 10%%)", *v)
	}
}
