// Package invoice applies the billing policy (pkg/billing: who pays for
// which attempt, the caps) to the edge's calls, in the API's types: what a
// client is billed for a chat request and what each provider call costs —
// the serving endpoint's price for the usage its provider reported (or,
// without one, for an estimate of what was delivered), capped by the
// request's max_price and max_tokens; a call cancelled before its first
// token as its prompt at the uncached input price; a failed call as
// nothing. Every amount is priced by the one price formula, pkg/pricing.
// See docs/architecture.md.
package invoice

import (
	"github.com/switchboard-ai/switchboard/pkg/billing"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Caps bound what a client can be billed for one request: a request is
// never billed above its provider.max_price nor for more than max_tokens.
type Caps struct {
	// MaxPrice caps the per-token prices, USD per million tokens: prompt caps
	// the price of every input token, cached ones included, completion the
	// price of output tokens. Nil or unset fields cap nothing.
	MaxPrice *switchboardv1.MaxPrice
	// MaxOutputTokens is the request's max_tokens (or max_completion_tokens);
	// a provider reporting more output is billed for this many. 0 caps nothing.
	MaxOutputTokens int64
}

// NewCaps is the cap in force for a request: the decider's price cap
// (DecideResponse.max_price) and the client's own provider.max_price, field
// by field the lower, and the client's max_tokens.
func NewCaps(decider, client *switchboardv1.MaxPrice, maxOutputTokens int64) Caps {
	return Caps{MaxPrice: capPrice(decider, client), MaxOutputTokens: maxOutputTokens}
}

// capPrice is the bill cap in force: the decider's (DecideResponse.max_price)
// and the client's own provider.max_price, field by field the lower
// (billing.Lower). The decider's normally already includes the client's,
// but the client was promised never to pay above its cap whatever the
// decider answers.
func capPrice(decider, client *switchboardv1.MaxPrice) *switchboardv1.MaxPrice {
	if decider == nil && client == nil {
		return nil
	}
	mp := billing.Lower(maxPrice(decider), maxPrice(client))
	return &switchboardv1.MaxPrice{Prompt: mp.Prompt, Completion: mp.Completion}
}

func maxPrice(mp *switchboardv1.MaxPrice) billing.MaxPrice {
	if mp == nil {
		return billing.MaxPrice{}
	}
	return billing.MaxPrice{Prompt: mp.Prompt, Completion: mp.Completion}
}

func price(p *switchboardv1.Price) pricing.Price {
	return pricing.Price{Input: p.GetInput(), CachedInput: p.GetCachedInput(), Output: p.GetOutput(),
		CacheWrite: p.GetCacheWrite(), CacheWrite1h: p.GetCacheWrite_1H()}
}

// Charge is what the tenant is billed for usage u at the serving
// endpoint's price under caps (billing.Charge: the per-token prices and the
// output tokens lowered to the caps, then the one price formula); capped
// says whether the caps changed anything.
func Charge(u pricing.Usage, p *switchboardv1.Price, caps Caps) (cost float64, capped bool) {
	return billing.Charge(price(p), u, billing.Caps{MaxPrice: maxPrice(caps.MaxPrice), MaxOutputTokens: caps.MaxOutputTokens})
}

// ListCost is what the endpoint charges for u, without the client's caps:
// the provider's side of the bill, reported per attempt.
func ListCost(u pricing.Usage, p *switchboardv1.Price) float64 {
	return billing.ListCost(price(p), u)
}

// LoserCost is what a call cancelled before its first token costs
// (billing.AbandonedCost): the prompt it was sent (the edge's estimate) at
// the endpoint's uncached input price.
func LoserCost(promptTokens int64, p *switchboardv1.Price) float64 {
	return billing.AbandonedCost(price(p), promptTokens)
}

// TextTokens is the pkg/tokens count of a text of n bytes: counting bytes as
// chunks arrive and converting once gives exactly tokens.Text of the whole
// delivered text.
func TextTokens(n int64) int64 {
	return (max(n, 0) + tokens.BytesPerToken - 1) / tokens.BytesPerToken
}

// Estimate is the usage of an answer whose provider reported none: the
// edge's prompt estimate, all of it uncached (nothing says otherwise), and
// the generated text delivered, counted by the pkg/tokens rule but never
// more than maxOutput (when positive), the most the decision's endpoints
// generate: the byte rule overcounts text of long tokens, and a record
// beyond its decision's caps is not stored.
func Estimate(promptTokens, deliveredBytes, maxOutput int64) pricing.Usage {
	out := TextTokens(deliveredBytes)
	if maxOutput > 0 {
		out = min(out, maxOutput)
	}
	return pricing.Usage{Input: promptTokens, Output: out}
}
