package sim

import (
	"slices"
	"strings"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

// Policy is a way of routing the simulated traffic.
type Policy struct {
	// Name labels the policy in the table.
	Name string
	// Baseline routes every request to the endpoint with the lowest
	// uncached input price, retrying on the next by that price, with no
	// speed data, no cache pricing, no cool-downs and no hedging: routing
	// by list price alone.
	Baseline bool
	// Pin routes every request to this provider first, and after a
	// failure to the others by uncached input price, with no speed data,
	// no cool-downs and no hedging: the static single-provider choice a
	// client could configure without a router. PolicyNamed makes one from
	// "only:<provider>".
	Pin string
	// Oracle routes with the truth the other policies estimate: every
	// endpoint's current median first-token time for this prompt (slow
	// episodes and load included) and its cache contents (oracle.go).
	Oracle bool
	// NoHedge turns hedging off.
	NoHedge bool
	// Sort sets provider.sort on every request that has none of its own:
	// price, latency or throughput.
	Sort string
	// Exploration is the router's exploration share (0: the default, none).
	Exploration float64
	// FollowUpTurns is the router's FollowUpTurns (0: the default; negative
	// prices each turn alone).
	FollowUpTurns float64
	// ExploreFollowUps lets exploration pick follow-up turns.
	ExploreFollowUps bool
	// NoSticky turns cache-aware stickiness off: every turn is ranked afresh.
	NoSticky bool
	// StickyTTL is how long a conversation stays with its endpoint (0: the default).
	StickyTTL time.Duration
	// Cooldown replaces the default rule for benching endpoints that
	// refuse calls (zero: the default).
	Cooldown cooldown.Options
	// Routing is the router's policy for requests that choose no order or
	// sort ("": smart).
	Routing routing.Policy
}

// Policies are the policies compared by default, the baseline first.
var Policies = []Policy{
	{Name: "cheapest-input", Baseline: true},
	{Name: "smart"},
	{Name: "smart-no-hedge", NoHedge: true},
	{Name: "smart-explore", Exploration: 0.05},
	{Name: "smart-this-turn", FollowUpTurns: -1},
	{Name: "smart-no-sticky", NoSticky: true},
	{Name: "smart-explore-follow-ups", ExploreFollowUps: true},
	{Name: "smart-first-refusal", Cooldown: cooldown.FirstRefusal},
	{Name: "routing-cost", Routing: routing.PolicyRoutingCost},
	{Name: "routing-cost-no-hedge", Routing: routing.PolicyRoutingCost, NoHedge: true},
	{Name: "routing-cost-no-sticky", Routing: routing.PolicyRoutingCost, NoSticky: true},
	{Name: "sort=price", Sort: "price"},
	{Name: "sort=latency", Sort: "latency"},
	{Name: "sort=throughput", Sort: "throughput"},
	{Name: "oracle", Oracle: true},
}

// pinPrefix names a static single-provider policy: "only:<provider>".
const pinPrefix = "only:"

// PolicyNamed returns the policy of that name among Policies, or the
// static single-provider policy "only:<provider>".
func PolicyNamed(name string) (Policy, bool) {
	if p, ok := strings.CutPrefix(name, pinPrefix); ok && p != "" {
		return Policy{Name: name, Pin: p}, true
	}
	i := slices.IndexFunc(Policies, func(p Policy) bool { return p.Name == name })
	if i < 0 {
		return Policy{}, false
	}
	return Policies[i], true
}

var sorts = map[string]switchboardv1.Sort{
	"price":      switchboardv1.Sort_SORT_PRICE,
	"latency":    switchboardv1.Sort_SORT_LATENCY,
	"throughput": switchboardv1.Sort_SORT_THROUGHPUT,
}

// baseline is the endpoints by uncached input price, those that cannot hold
// the prompt left out.
func baseline(eps []*switchboardv1.Endpoint, prompt, maxTokens int64) []*switchboardv1.Endpoint {
	out := make([]*switchboardv1.Endpoint, 0, len(eps))
	for _, ep := range eps {
		if cl := ep.GetContextLength(); cl == 0 || prompt+maxTokens <= cl {
			out = append(out, ep)
		}
	}
	slices.SortStableFunc(out, func(a, b *switchboardv1.Endpoint) int {
		switch {
		case a.GetPrice().GetInput() < b.GetPrice().GetInput():
			return -1
		case a.GetPrice().GetInput() > b.GetPrice().GetInput():
			return 1
		}
		return 0
	})
	return out
}

// pinned is the endpoints with provider first, then the others as the
// baseline orders them.
func pinned(eps []*switchboardv1.Endpoint, provider string, prompt, maxTokens int64) []*switchboardv1.Endpoint {
	out := baseline(eps, prompt, maxTokens)
	if i := slices.IndexFunc(out, func(ep *switchboardv1.Endpoint) bool { return ep.GetProvider() == provider }); i > 0 {
		ep := out[i]
		copy(out[1:i+1], out[:i])
		out[0] = ep
	}
	return out
}
