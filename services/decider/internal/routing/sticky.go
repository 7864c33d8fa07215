package routing

import (
	"fmt"
	"slices"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/numfmt"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Cache-aware stickiness: the first request of a conversation is ranked by
// the policy; its later turns go back to the endpoint that served the last
// one, which holds their prompt in cache, while the conversation is active
// (a turn within StickyTTL of the last). It is a step after ranking, so it
// applies to whichever policy ranked, and the others stay in the policy's
// order as fallbacks. It gives way when the request made its own choice
// (provider.order, provider.sort, :floor, :nitro, or the tenant's default
// sort), when that endpoint cannot take the request (excluded by the
// request's options, cooling down), when it sells cached input no cheaper
// than fresh input (nothing to keep), when it is too slow for this prompt
// size by the smart policy's speed bar, or when it misses the request's
// preferred throughput or latency. When the policy's own choice also served
// this prompt recently (a hedge, a retry), its cache is as warm there and
// the choice stands.
//
// Stickiness never buys a worse deal: the warm endpoint keeps the turn only
// while its cost for this turn, with its cache, is within the model's
// competitive margin (routing.competitive_margin, else CostOptions.Margin)
// of the best qualifying alternative's, with that alternative's own cache
// evidence, and never when another qualifying endpoint holds this prompt's
// prefix too and costs less. The cost is the one the policy ranks by (the
// smart policy's value, this turn plus the conversation's next ones read
// from each endpoint's cache; the routing-cost policy's routing cost), so
// the two steps agree: a reseller with the lowest input price but cache
// reads fifty times the others' gets a conversation's first turn, not the
// turns after it. A qualifying alternative passes the filters and the speed
// bar the warm endpoint must pass: usable by the request, not cooling down,
// not too slow, meeting the request's preferences, and allowed by the
// policy (the smart policy's speed bar and price guard, measured; the
// routing-cost policy's guards).
//
// A conversation is recognised by its session id when the caller sends one
// (DecideRequest.session_id, from the edge's X-Session-Id header), scoped to
// the tenant and model; otherwise by its prompt prefixes: the endpoint that
// most recently served the longest prefix of this prompt as a whole prompt,
// an earlier turn (affinity.Latest); a system prompt other conversations
// share is no turn of this one.

// stickyOutcome is what the sticky step did.
type stickyOutcome uint8

const (
	stickyNone          stickyOutcome = iota // no conversation recognised, or stickiness off
	stickyNew                                // a named conversation with no active endpoint: the policy chose
	stickyKept                               // the conversation's endpoint was moved first
	stickyWarmChoice                         // the policy's choice holds the conversation's cache too
	stickyUserChoice                         // the request's own order or sort wins
	stickyUnavailable                        // the endpoint is not one the request can use
	stickyCooling                            // the endpoint is cooling down
	stickyNoDiscount                         // the endpoint's cached input is not cheaper
	stickyTooSlow                            // the endpoint is too slow for this size
	stickyDeprioritised                      // the endpoint misses preferred_min_throughput or preferred_max_latency
	stickyCheaper                            // a qualifying alternative costs less, beyond the margin or with its own cache
)

// stickyState is the sticky step's result for one Decide.
type stickyState struct {
	outcome   stickyOutcome
	warm      *candidate    // the conversation's endpoint, nil if none
	age       time.Duration // since the conversation's last turn
	bySession bool          // recognised by session id, not by prefixes
	// alt is the alternative that made a conversation move (stickyCheaper),
	// altWarm whether it holds the prompt's prefix too, margin the
	// competitive margin applied.
	alt     *candidate
	altWarm bool
	margin  float64
	cost    bool // ranked by the routing-cost policy
}

// word is the outcome as the summary shows it.
func (s stickyOutcome) word() string {
	switch s {
	case stickyNew:
		return "new"
	case stickyKept:
		return "kept"
	case stickyWarmChoice:
		return "policy_choice_warm"
	case stickyUserChoice:
		return "no:user_choice"
	case stickyUnavailable:
		return "no:unavailable"
	case stickyCooling:
		return "no:cooling_down"
	case stickyNoDiscount:
		return "no:no_cache_discount"
	case stickyTooSlow:
		return "no:too_slow"
	case stickyDeprioritised:
		return "no:misses_preferences"
	case stickyCheaper:
		return "no:cheaper_alternative"
	}
	return ""
}

// stick finds the conversation's endpoint among m's candidates and, when
// it may keep the request, moves it to the front of sc.order. userChose
// says the request (or its tenant's default) chose its own order or sort.
func (r *Router) stick(sc *scratch, m *model, req *switchboardv1.DecideRequest, id *switchboardv1.Identity, userChose, costPolicy bool, fastest time.Duration, now time.Time) {
	sc.sticky = stickyState{cost: costPolicy}
	if r.o.NoSticky {
		return
	}
	var (
		i  int
		at time.Time
	)
	if s := req.GetSessionId(); s != "" {
		sc.sticky.bySession = true
		sc.sticky.outcome = stickyNew
		ep, last, ok := r.o.Sessions.Last(id.GetTenantId(), m.id, s)
		if !ok || now.Sub(last) > r.o.StickyTTL {
			return
		}
		if i = slices.Index(m.ids, ep); i < 0 {
			// The catalog dropped the endpoint: the policy chooses.
			return
		}
		at = last
	} else {
		var ok bool
		if i, at, ok = r.o.Affinity.Latest(m.ids, req.GetTokens().GetPrefixes(), now, r.o.StickyTTL); !ok {
			return
		}
	}
	c := &sc.cands[i]
	sc.sticky.warm, sc.sticky.age = c, max(now.Sub(at), 0)
	switch {
	case userChose:
		sc.sticky.outcome = stickyUserChoice
	case c.excluded.why != exclNone:
		sc.sticky.outcome = stickyUnavailable
	case c.cooling:
		sc.sticky.outcome = stickyCooling
	case c.ep.rates.CachedInput >= c.ep.rates.Input:
		sc.sticky.outcome = stickyNoDiscount
	case r.tooSlow(c, fastest):
		sc.sticky.outcome = stickyTooSlow
	case c.note == noteDeprioritised:
		sc.sticky.outcome = stickyDeprioritised
	case sc.order[0] != c && r.holdsPrefix(sc, sc.order[0]):
		// The policy chose an endpoint that served this conversation's
		// prompt too (a hedge, a retry): its cache is as warm there.
		sc.sticky.outcome = stickyWarmChoice
	case r.cheaperElsewhere(sc, m, c, fastest):
		// The policy's order stands: it ranks by the same cost.
		sc.sticky.outcome = stickyCheaper
	default:
		k := slices.Index(sc.order, c)
		if k < 0 {
			sc.sticky.outcome = stickyUnavailable
			return
		}
		copy(sc.order[1:k+1], sc.order[:k])
		sc.order[0] = c
		sc.sticky.outcome = stickyKept
	}
}

// cheaperElsewhere reports whether a qualifying alternative to the warm
// endpoint c is a better deal for this turn: one that holds this prompt's
// prefix too and costs less, or one that costs less by more than the
// competitive margin. It notes the alternative in sc.sticky.
func (r *Router) cheaperElsewhere(sc *scratch, m *model, c *candidate, fastest time.Duration) bool {
	margin := r.o.Cost.Margin
	if m.margin > 0 {
		margin = m.margin
	}
	sc.sticky.margin = margin
	warm := stickyCost(c, sc.sticky.cost)
	var best *candidate
	for _, a := range sc.order {
		if a == c || !r.qualifies(a, fastest, sc.sticky.cost) {
			continue
		}
		ac := stickyCost(a, sc.sticky.cost)
		if ac < warm && r.holdsPrefix(sc, a) {
			// Its cache is as warm as c's, and reading it costs less: no
			// margin protects c.
			sc.sticky.alt, sc.sticky.altWarm = a, true
			return true
		}
		if best == nil || ac < stickyCost(best, sc.sticky.cost) {
			best = a
		}
	}
	if best != nil && warm > (1+margin)*stickyCost(best, sc.sticky.cost) {
		sc.sticky.alt = best
		return true
	}
	return false
}

// stickyCost is what the policy ranks a candidate by, the sticky step's
// measure of a deal: the smart policy's value (this turn plus the
// conversation's next ones, each with this endpoint's cache) or the
// routing-cost policy's cost of one good answer (which prices the turns to
// come too).
func stickyCost(c *candidate, costPolicy bool) float64 {
	if costPolicy {
		return c.rcost
	}
	return c.value
}

// qualifies reports whether c passes the filters and the speed bar the
// policy uses, as the warm endpoint must: usable by the request, not
// cooling down, not too slow, not missing the request's preferences, and,
// under the smart policy with speed data, measured within its speed bar and
// price guard; under the routing-cost policy, not held back by its guards.
func (r *Router) qualifies(c *candidate, fastest time.Duration, costPolicy bool) bool {
	switch {
	case c.excluded.why != exclNone, c.cooling, c.note == noteDeprioritised, r.tooSlow(c, fastest):
		return false
	case costPolicy:
		return c.guard == guardNone
	}
	return fastest == 0 || c.allowed
}

// holdsPrefix reports whether c served a prefix of this prompt recently
// (the affinity table's evidence, not the caller's estimate).
func (r *Router) holdsPrefix(sc *scratch, c *candidate) bool {
	for i := range sc.cands {
		if &sc.cands[i] == c {
			return sc.cached[i] > 0
		}
	}
	return false
}

// tooSlow is the smart policy's speed bar: a typical TTFT for this size
// over SpeedFactor times the fastest and over FastEnough. An endpoint
// without data is given the benefit of the doubt.
func (r *Router) tooSlow(c *candidate, fastest time.Duration) bool {
	return c.samples > 0 && c.ttft > r.speedBar(fastest) && c.ttft >= r.o.FastEnough
}

// speedBar is the typical TTFT above which an endpoint is too slow.
func (r *Router) speedBar(fastest time.Duration) time.Duration {
	return max(time.Duration(float64(fastest)*r.o.SpeedFactor), r.o.FastEnough)
}

// keepSession notes where a named conversation's turn went, so its next
// turn finds it; dry runs and stickiness off record nothing.
func (r *Router) keepSession(req *switchboardv1.DecideRequest, id *switchboardv1.Identity, m *model, chosen *candidate, now time.Time) {
	if r.o.NoSticky || req.GetDryRun() || req.GetSessionId() == "" {
		return
	}
	r.o.Sessions.Keep(id.GetTenantId(), m.id, req.GetSessionId(), req.GetRequestId(), chosen.ep.id, now)
}

// stickyNote is what the explanation says of the conversation's endpoint.
func (r *Router) stickyNote(s stickyState, fastest time.Duration) string {
	how := "by its prompt prefixes"
	if s.bySession {
		how = "by session id"
	}
	c := s.warm
	why := ""
	switch s.outcome {
	case stickyWarmChoice:
		return fmt.Sprintf("served this conversation's last turn (recognised %s, %s ago); the policy's choice holds its prompt cache too", how, s.age.Round(time.Second))
	case stickyKept:
		return fmt.Sprintf("kept: holds this conversation's prompt cache (recognised %s, last turn %s ago)", how, s.age.Round(time.Second))
	case stickyUserChoice:
		why = "the request chose its own order or sort"
	case stickyUnavailable:
		why = "the request cannot use it"
	case stickyCooling:
		why = "cooling down"
	case stickyNoDiscount:
		why = fmt.Sprintf("its cached input (%s) is no cheaper than its input (%s)", numfmt.Number(c.ep.rates.CachedInput), numfmt.Number(c.ep.rates.Input))
	case stickyTooSlow:
		why = fmt.Sprintf("too slow for this prompt size (%s, the bar is %s)", c.ttft.Round(time.Millisecond), r.speedBar(fastest).Round(time.Millisecond))
	case stickyDeprioritised:
		why = "misses preferred_min_throughput or preferred_max_latency"
	case stickyCheaper:
		a, measure := s.alt, "cost with each one's cache, this turn and the next"
		if s.cost {
			measure = "routing cost"
		}
		if s.altWarm {
			why = fmt.Sprintf("%s holds this prompt's prefix too and is cheaper (%s %.6g USD against %.6g here)",
				a.ep.provider, measure, stickyCost(a, s.cost), stickyCost(c, s.cost))
		} else {
			why = fmt.Sprintf("%s is cheaper beyond the %s%% competitive margin (%s %.6g USD against %.6g here)",
				a.ep.provider, numfmt.Number(s.margin*100), measure, stickyCost(a, s.cost), stickyCost(c, s.cost))
		}
	}
	return fmt.Sprintf("served this conversation's last turn (recognised %s, %s ago) but not kept: %s", how, s.age.Round(time.Second), why)
}
