package routing

import (
	"fmt"
	"slices"
	"time"

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
// A conversation is recognised by its session id when the caller sends one
// (DecideRequest.session_id, from the edge's X-Session-Id header), scoped to
// the tenant and model; otherwise by its prompt prefixes: the endpoint that
// most recently served the longest prefix of this prompt (affinity.Latest).

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
)

// stickyState is the sticky step's result for one Decide.
type stickyState struct {
	outcome   stickyOutcome
	warm      *candidate    // the conversation's endpoint, nil if none
	age       time.Duration // since the conversation's last turn
	bySession bool          // recognised by session id, not by prefixes
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
	}
	return ""
}

// stick finds the conversation's endpoint among m's candidates and, when
// it may keep the request, moves it to the front of sc.order. userChose
// says the request (or its tenant's default) chose its own order or sort.
func (r *Router) stick(sc *scratch, m *model, req *switchboardv1.DecideRequest, id *switchboardv1.Identity, userChose bool, fastest time.Duration, now time.Time) {
	sc.sticky = stickyState{}
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
		why = fmt.Sprintf("its cached input (%g) is no cheaper than its input (%g)", c.ep.rates.CachedInput, c.ep.rates.Input)
	case stickyTooSlow:
		why = fmt.Sprintf("too slow for this prompt size (%s, the bar is %s)", c.ttft.Round(time.Millisecond), r.speedBar(fastest).Round(time.Millisecond))
	case stickyDeprioritised:
		why = "misses preferred_min_throughput or preferred_max_latency"
	}
	return fmt.Sprintf("served this conversation's last turn (recognised %s, %s ago) but not kept: %s", how, s.age.Round(time.Second), why)
}
