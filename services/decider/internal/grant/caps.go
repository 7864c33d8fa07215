package grant

import (
	"fmt"
	"math"

	"github.com/switchboard-ai/switchboard/pkg/billing"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// UnknownContextTokens is the context window an endpoint is taken to have
// when the catalog gives it none: the largest any model offers today. It
// bounds the caps of a decision with such an endpoint; a catalog that sets
// context_length bounds them tighter.
const UnknownContextTokens = 2 << 20

// Endpoint is what the caps of a decision need to know of one of its
// endpoints.
type Endpoint struct {
	// ContextLength is its largest prompt plus output; 0 when unknown.
	ContextLength int64
	// MaxOutputTokens is the largest output it produces; 0 when unknown.
	MaxOutputTokens int64
	// Price is what it charges, the price the edge bills at.
	Price pricing.Price
}

// window is e's context window, UnknownContextTokens when not known.
func (e Endpoint) window() int64 {
	if e.ContextLength > 0 {
		return e.ContextLength
	}
	return UnknownContextTokens
}

// output is the most e can produce: its max output, within its window.
func (e Endpoint) output() int64 {
	if w := e.window(); e.MaxOutputTokens <= 0 || e.MaxOutputTokens > w {
		return w
	}
	return e.MaxOutputTokens
}

// NewCaps are the caps of a decision whose endpoints (the chosen one, its
// fallbacks and its hedge endpoint; each once) are eps, billed under
// maxPrice and the request's max_tokens maxTokens (0: not set), with a
// prompt estimated at inputTokens.
//
// The bounds come from what the endpoints can consume, not from the
// caller's estimates, since a provider counts its own tokens: input is at
// most the largest context window (or the estimate, if larger — an
// endpoint of unknown window may take it), output at most the largest
// output an endpoint produces. What the client is billed is at most what
// the dearest endpoint bills for those tokens under the request's caps
// (billing.Charge: a provider reporting more output than max_tokens is
// billed for max_tokens); what the providers charge for all the attempts
// is at most every endpoint called once for those tokens at its list
// price. Each price is taken at the highest of its input prices
// (uncached, cached, cache writes), so no split of the prompt into
// cached, written and uncached tokens exceeds it.
func NewCaps(eps []Endpoint, maxPrice billing.MaxPrice, maxTokens, inputTokens int64) *switchboardv1.DecisionCaps {
	c := &switchboardv1.DecisionCaps{}
	for _, e := range eps {
		in, out := max(e.window(), inputTokens), e.output()
		c.MaxInputTokens = max(c.MaxInputTokens, in)
		c.MaxOutputTokens = max(c.MaxOutputTokens, out)
		p := e.Price
		p.Input = max(p.Input, p.CachedInput, p.CacheWrite, p.CacheWrite1h)
		u := pricing.Usage{Input: in, Output: out}
		bill, _ := billing.Charge(p, u, billing.Caps{MaxPrice: maxPrice, MaxOutputTokens: maxTokens})
		c.MaxCostUsd = max(c.MaxCostUsd, bill)
		c.MaxAttemptsCostUsd += billing.ListCost(p, u)
	}
	// No record beyond the boundary's bounds is taken anyway (validate);
	// caps within them are never refused there.
	c.MaxInputTokens, c.MaxOutputTokens = min(c.MaxInputTokens, validate.MaxTokens), min(c.MaxOutputTokens, validate.MaxTokens)
	c.MaxCostUsd, c.MaxAttemptsCostUsd = min(c.MaxCostUsd, validate.MaxUSD), min(c.MaxAttemptsCostUsd, validate.MaxUSD)
	return c
}

// slack is how far a sum of rounded amounts may exceed a cap for floating
// point alone: the record's costs and the caps are each rounded to 1e-10
// USD (pricing.Round) and added in another order.
func slack(usd float64) float64 { return usd + usd*1e-9 + 1e-9 }

// Within reports whether r's tokens and costs are within caps: nil when
// they are, else an error naming the first field beyond its cap. A nil
// caps allows nothing but a record that consumed nothing.
func Within(r *switchboardv1.ActivityRecord, caps *switchboardv1.DecisionCaps) error {
	u := r.GetUsage()
	switch {
	case u.GetInputTokens() > caps.GetMaxInputTokens():
		return fmt.Errorf("usage.input_tokens beyond the decision's cap of %d", caps.GetMaxInputTokens())
	case u.GetOutputTokens() > caps.GetMaxOutputTokens():
		return fmt.Errorf("usage.output_tokens beyond the decision's cap of %d", caps.GetMaxOutputTokens())
	case !atMost(r.GetCostUsd(), caps.GetMaxCostUsd()):
		return fmt.Errorf("cost_usd beyond the decision's cap of %g USD", caps.GetMaxCostUsd())
	case !atMost(u.GetCostUsd(), caps.GetMaxCostUsd()):
		return fmt.Errorf("usage.cost_usd beyond the decision's cap of %g USD", caps.GetMaxCostUsd())
	case !atMost(r.GetHedge().GetLoserCostUsd(), caps.GetMaxAttemptsCostUsd()):
		return fmt.Errorf("hedge.loser_cost_usd beyond the decision's cap of %g USD", caps.GetMaxAttemptsCostUsd())
	}
	var sum float64
	for _, a := range r.GetAttempts() {
		sum += a.GetCostUsd()
	}
	if !atMost(sum, caps.GetMaxAttemptsCostUsd()) {
		return fmt.Errorf("attempts' cost_usd beyond the decision's cap of %g USD", caps.GetMaxAttemptsCostUsd())
	}
	return nil
}

// atMost reports whether usd is a finite amount within the cap.
func atMost(usd, limit float64) bool {
	return !math.IsNaN(usd) && !math.IsInf(usd, 0) && usd <= slack(limit)
}
