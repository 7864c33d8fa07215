package sim

import (
	"cmp"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// The smart policy's rules as the routing package's defaults set them
// (routing.Options: SpeedFactor, FastEnough, FollowUpTurns, HedgeFrom,
// HedgeImmediateFrom, HedgeDelay), which the oracle applies to the truth.
const (
	oracleSpeedFactor    = 2
	oracleFastEnough     = time.Second
	oracleFollowUpTurns  = 4
	oracleHedgeFrom      = 32 * tokens.K
	oracleHedgeImmediate = 128 * tokens.K
	oracleHedgeDelay     = time.Second
)

// oracleCandidate is one endpoint as the oracle sees it for one request.
type oracleCandidate struct {
	ep        *switchboardv1.Endpoint
	ttft      time.Duration // the true median time to the client's first byte
	value     float64       // the true expected cost of this turn and the conversation's next ones here, USD
	qualified bool
}

// oraclePlan is the oracle's order for r and its hedge: the endpoints
// whose true median first byte is within the smart policy's bar (twice the
// fastest, or under a second) by their true expected cost, cheapest first,
// then the others by that time; the hedge, as the smart policy plans it,
// on the cheapest other qualifying endpoint. The truth is the provider
// model's: the median TTFT for this prompt now (curve, slow episodes,
// queue), the cache each provider holds for this conversation, and whether
// it is at capacity now. What it cannot know is each call's luck (spread,
// tail, errors, hangs, cache misses, drawn when the call starts): it
// expects a cache hit at the provider's hit rate.
func (e *engine) oraclePlan(r *request) ([]*switchboardv1.Endpoint, *switchboardv1.HedgePlan) {
	t := r.t
	eps := e.endpoints[r.s.model]
	cs := make([]oracleCandidate, 0, len(eps))
	var fastest time.Duration
	for _, ep := range eps {
		if cl := ep.GetContextLength(); cl > 0 && t.prompt+t.maxTokens > cl {
			continue
		}
		p := e.providers[ep.GetId()]
		c := oracleCandidate{ep: ep, value: e.oracleValue(r, p)}
		if !p.full(e.now, t.prompt) {
			hit := 0.0
			if n, ok := p.held(e.now, t.prompt, r.sid(), r.s.system); ok {
				hit = float64(n) * p.cfg.Cache.HitRate
			}
			c.ttft = p.expectedTTFT(e.now, t.prompt, hit)
			if !t.stream {
				c.ttft += p.genTime(r.output) // a whole answer arrives at once
			}
			c.qualified = true
			if fastest == 0 || c.ttft < fastest {
				fastest = c.ttft
			}
		}
		cs = append(cs, c)
	}
	bar := max(time.Duration(float64(fastest)*oracleSpeedFactor), oracleFastEnough)
	for i := range cs {
		cs[i].qualified = cs[i].qualified && cs[i].ttft <= bar
	}
	slices.SortStableFunc(cs, func(a, b oracleCandidate) int {
		switch {
		case a.qualified != b.qualified:
			if a.qualified {
				return -1
			}
			return 1
		case a.qualified:
			if c := cmp.Compare(a.value, b.value); c != 0 {
				return c
			}
		default:
			if (a.ttft == 0) != (b.ttft == 0) { // at capacity (no time) last
				if a.ttft == 0 {
					return 1
				}
				return -1
			}
			if c := cmp.Compare(a.ttft, b.ttft); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.ep.GetProvider(), b.ep.GetProvider())
	})
	plan := make([]*switchboardv1.Endpoint, 0, len(cs))
	for _, c := range cs {
		plan = append(plan, c.ep)
	}
	plan = plan[:min(len(plan), e.o.MaxAttempts)]
	none := &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_NONE}
	if !t.stream || t.prompt < oracleHedgeFrom || len(cs) < 2 || !cs[1].qualified {
		return plan, none
	}
	if t.prompt >= oracleHedgeImmediate {
		return plan, &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, Endpoint: cs[1].ep}
	}
	return plan, &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, Delay: durationpb.New(oracleHedgeDelay), Endpoint: cs[1].ep}
}

// oracleValue is what r is expected to cost on p, its true cache read at
// p's hit rate, plus, for a conversation, its next turns (at most
// oracleFollowUpTurns, as the smart policy counts them) reading this prompt
// from p's cache: the smart policy's objective with the true figures.
func (e *engine) oracleValue(r *request, p *provider) float64 {
	t := r.t
	hit := p.cfg.Cache.HitRate
	cached := 0.0
	if n, ok := p.held(e.now, t.prompt, r.sid(), r.s.system); ok {
		cached = float64(n) * hit
	}
	cost := pricing.Cost(p.rates, pricing.Usage{Input: t.prompt, CachedInput: int64(math.Round(cached)), Output: r.output})
	if r.sid() < 0 {
		return cost
	}
	next := float64(min(len(r.s.turns)-1-r.turn, oracleFollowUpTurns))
	if next <= 0 {
		return cost
	}
	again := pricing.Cost(p.rates, pricing.Usage{Input: t.prompt, CachedInput: int64(math.Round(float64(t.prompt) * hit)), Output: r.output})
	return cost + next*again
}
