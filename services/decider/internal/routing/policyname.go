package routing

import (
	"fmt"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Policy names a routing policy: how Decide ranks a model's endpoints when
// the request sets no provider.order and no provider.sort of its own.
type Policy string

// The routing policies.
const (
	// PolicySmart is the cheapest endpoint that is fast enough for this
	// prompt size (policy.go).
	PolicySmart Policy = catalog.PolicySmart
	// PolicyRoutingCost ranks endpoints by the expected cost of one good
	// answer: effective price, waiting time priced in money and a
	// rate-limit penalty, divided by the chance of success; it spreads
	// traffic over the endpoints within a margin of the best.
	PolicyRoutingCost Policy = catalog.PolicyRoutingCost
)

// Policies are the valid policy names (the catalog's, which owns them).
var Policies = []Policy{PolicySmart, PolicyRoutingCost}

// ParsePolicy returns the policy named s; "" is PolicySmart.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case "", PolicySmart:
		return PolicySmart, nil
	case PolicyRoutingCost:
		return PolicyRoutingCost, nil
	}
	return "", fmt.Errorf("unknown routing policy %q: use %q or %q", s, PolicySmart, PolicyRoutingCost)
}

// policyOf is the policy that ranks this request's endpoints when the
// request chose no order or sort, from the most specific setting to the
// least: the tenant's default, a running experiment's arm (Options.Arm),
// the model's catalog setting, then the deployment default
// (Options.Policy).
func (r *Router) policyOf(idx *Index, m *model, id *switchboardv1.Identity, now time.Time) Policy {
	if p, ok := r.tenantPolicy(idx, id); ok {
		return p
	}
	if r.o.Arm != nil {
		if p, ok := r.o.Arm(m.id, now); ok {
			return p
		}
	}
	if m.policy != "" {
		return m.policy
	}
	return r.o.Policy
}
