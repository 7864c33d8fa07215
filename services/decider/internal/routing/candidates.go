package routing

import (
	"slices"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
)

// candidate is one endpoint priced and measured for one request.
type candidate struct {
	ep         *endpoint
	cost       float64 // this request on this endpoint, USD
	value      float64 // cost plus the conversation's next turns here, USD: what the smart policy ranks by
	listCost   float64 // this request at the model's list price, 0 if none
	cached     int64
	ttft       time.Duration
	samples    int
	ttftRegion string  // the region whose own figure ttft is; "" the global one
	tps        float64 // measured throughput, tokens/s; 0 unknown
	tpsRank    float64 // the throughput sort=throughput ranks by (byThroughput)
	excluded   exclusion
	coolUntil  time.Time
	cooling    bool
	lastResort bool // cooling, but every usable endpoint is
	qualified  bool
	allowed    bool // qualified and within the price guard
	note       note

	// The routing-cost policy's figures (routingcost.go).
	fig     outcomes.Figures
	in      costInputs
	rcost   float64 // expected USD of one good answer here
	weight  float64 // share weight before the floor
	backoff float64 // weight multiplier for recent failures
	share   float64 // part of the traffic given
	guard   guard
}

// note says how a candidate fared; rendered to text only for explanations.
type note int

const (
	noteNone note = iota
	noteWinner
	noteExplored
	noteQualified
	noteTooSlow
	noteNoData
	notePriceGuard
	noteExcluded
	noteDeprioritised
	noteNoThroughput // sort=throughput without a throughput figure
)

// scratch holds one Decide's working memory, reused through a pool so the
// hot path does not allocate per candidate.
type scratch struct {
	cands  []candidate
	order  []*candidate
	cooled []*candidate
	cached []int64
	floats []float64 // the routing-cost policy's lists of figures
	// followUp: the prompt extends one an endpoint served recently.
	followUp bool
	// sticky is what the sticky step did.
	sticky stickyState
	// residency is the region the fallback policy's same_region held the
	// request to; "" when it does not apply.
	residency string
}

// cachedEstimate is how many of the prompt's tokens endpoint ep is expected
// to read from its cache, from evidence about this prompt: the caller's own
// estimate if it gave one; else, when the request carries prompt-prefix
// hashes, the longest prefix of it ep served recently (affinity) — and none
// when ep never served it, since a provider caches only what it was sent;
// else, for callers that send no prefixes, ep's observed cache-hit rate
// applied to the prompt. The rate is the average over other conversations:
// applied to a prompt with known prefixes it would price a fresh prompt as
// cached on whichever endpoint last served a cached one.
func (r *Router) cachedEstimate(ep *endpoint, in, fromCaller, fromAffinity int64, hasPrefixes bool) int64 {
	switch {
	case fromCaller > 0:
		return min(fromCaller, in)
	case fromAffinity > 0:
		return min(fromAffinity, in)
	case hasPrefixes:
		return 0
	}
	if rate, _, ok := ep.st.CacheHitRate(); ok {
		return min(int64(rate*float64(in)), in)
	}
	return 0
}

func priced(c *candidate) *switchboardv1.Endpoint {
	e := c.ep.proto
	return &switchboardv1.Endpoint{
		Id:                  e.Id,
		Provider:            e.Provider,
		BaseUrl:             e.BaseUrl,
		UpstreamModel:       e.UpstreamModel,
		ApiKeyEnv:           e.ApiKeyEnv,
		Price:               e.Price,
		ContextLength:       e.ContextLength,
		EstimatedCostUsd:    c.cost,
		SupportedParameters: e.SupportedParameters,
		Api:                 e.Api,
	}
}

// candidates prices and measures every endpoint of m for this request
// into sc: the usable ones in sc.order, those cooling down in sc.cooled
// (or, when every usable one is, all of them in sc.order as a last resort).
// With noBench (the routing-cost policy, which backs off and caps
// endpoints itself) cooling endpoints are ranked like the others.
// fitsNone reports that the request fits no endpoint's context or output.
func (r *Router) candidates(sc *scratch, m *model, req *switchboardv1.DecideRequest, est pricing.Request, bucket tokens.Bucket, now time.Time, noBench bool) (fitsNone bool) {
	tok, prefs, in := req.GetTokens(), req.GetProvider(), est.InputTokens
	n := len(m.endpoints)
	sc.cands = slices.Grow(sc.cands[:0], n)[:n]
	sc.cached = slices.Grow(sc.cached[:0], n)[:n]
	sc.order, sc.cooled = sc.order[:0], sc.cooled[:0]
	r.o.Affinity.Cached(m.ids, tok.GetPrefixes(), now, sc.cached)
	// A prompt that extends one an endpoint served recently belongs to a
	// conversation under way: its next turns will read this prompt from
	// the cache of whichever endpoint serves it now.
	sc.followUp = slices.ContainsFunc(sc.cached, func(n int64) bool { return n > 0 })
	followUps := 0.0
	if sc.followUp {
		followUps = r.o.FollowUpTurns
	}

	// A request from a region reads the figures that region's edges
	// measured, where they are enough data; the global ones elsewhere.
	region := r.o.Stats.Region(req.GetRegion())
	fitsNone = true
	for i, ep := range m.endpoints {
		c := &sc.cands[i]
		*c = candidate{ep: ep}
		c.cached = r.cachedEstimate(ep, in, tok.GetCachedInputTokens(), sc.cached[i], len(tok.GetPrefixes()) > 0)
		est.CachedTokens = c.cached
		here := ep.priced(est)
		c.cost = pricing.Estimate(ep.rates, here)
		c.value = c.cost
		if followUps > 0 {
			next := here
			next.CachedTokens = in
			c.value = pricing.Round(c.cost + followUps*pricing.Estimate(ep.rates, next))
		}
		if m.list != nil {
			c.listCost = pricing.Estimate(*m.list, here)
		}
		c.ttft, c.samples, _ = ep.st.TTFT(bucket)
		if t, n, ok := ep.st.TTFTIn(region, bucket); ok && n >= r.o.MinSamples {
			c.ttft, c.samples, c.ttftRegion = t, n, req.GetRegion()
		}
		c.tps, _, _ = ep.st.Throughput()
		c.excluded = exclude(ep, prefs, req.GetParameters(), in, tok.GetMaxOutputTokens())
		if c.excluded.why != exclContext && c.excluded.why != exclMaxOutput {
			fitsNone = false
		}
		if c.excluded.why != exclNone {
			c.note = noteExcluded
			continue
		}
		if !noBench {
			c.coolUntil, c.cooling = r.o.Cooldown.Until(ep.id, now)
		}
		if c.cooling {
			sc.cooled = append(sc.cooled, c)
		} else {
			sc.order = append(sc.order, c)
		}
	}
	if len(sc.order) == 0 {
		// Every usable endpoint is cooling down: a benched endpoint beats
		// refusing the client, so they are ranked as a last resort.
		for _, c := range sc.cooled {
			c.lastResort = true
		}
		sc.order, sc.cooled = append(sc.order, sc.cooled...), sc.cooled[:0]
	}
	return fitsNone
}
