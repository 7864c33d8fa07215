// Package billing is what a client is billed for a chat request and what
// each provider call costs: the serving endpoint's price for the usage its
// provider reported (or, without one, for an estimate of what was
// delivered), capped by the request's max_price and max_tokens; a call
// cancelled before its first token as its prompt at the uncached input
// price; a failed call as nothing. Every amount is priced by the one price
// formula, pkg/pricing. See docs/architecture.md.
package billing

import (
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
// and the client's own provider.max_price, field by field the lower. The
// decider's normally already includes the client's, but the client was
// promised never to pay above its cap whatever the decider answers.
func capPrice(decider, client *switchboardv1.MaxPrice) *switchboardv1.MaxPrice {
	if decider == nil && client == nil {
		return nil
	}
	lower := func(a, b *float64) *float64 {
		switch {
		case a == nil:
			return b
		case b == nil:
			return a
		case *b < *a:
			return b
		}
		return a
	}
	var out switchboardv1.MaxPrice
	for _, mp := range []*switchboardv1.MaxPrice{decider, client} {
		if mp != nil {
			out.Prompt, out.Completion = lower(out.Prompt, mp.Prompt), lower(out.Completion, mp.Completion)
		}
	}
	return &out
}

// Charge prices u at price with the one price formula (pricing.Cost), the
// way the serving endpoint charges it: uncached input, cached input and
// output separately, per million tokens.
// With caps, the per-token prices and the output tokens are first lowered to
// the caps; capped says whether that changed anything.
func Charge(u pricing.Usage, price *switchboardv1.Price, caps Caps) (cost float64, capped bool) {
	input := max(u.Input, 0)
	cached := min(max(u.CachedInput, 0), input)
	output := max(u.Output, 0)
	if caps.MaxOutputTokens > 0 && output > caps.MaxOutputTokens {
		output, capped = caps.MaxOutputTokens, true
	}
	in, cin, out := price.GetInput(), price.GetCachedInput(), price.GetOutput()
	if mp := caps.MaxPrice; mp != nil {
		if mp.Prompt != nil {
			if in > mp.GetPrompt() && input-cached > 0 {
				in, capped = mp.GetPrompt(), true
			}
			if cin > mp.GetPrompt() && cached > 0 {
				cin, capped = mp.GetPrompt(), true
			}
		}
		if mp.Completion != nil && out > mp.GetCompletion() && output > 0 {
			out, capped = mp.GetCompletion(), true
		}
	}
	cost = pricing.Cost(pricing.Price{Input: in, CachedInput: cin, Output: out},
		pricing.Usage{Input: input, CachedInput: cached, Output: output})
	return cost, capped
}

// ListCost is what the endpoint charges for u, without the client's caps:
// the provider's side of the bill, reported per attempt.
func ListCost(u pricing.Usage, price *switchboardv1.Price) float64 {
	c, _ := Charge(u, price, Caps{})
	return c
}

// LoserCost estimates what a call cancelled before its first token costs:
// the prompt it was sent (the edge's estimate) at the endpoint's uncached
// input price. Providers differ on whether, and how much of, an abandoned
// prompt they charge; counting all of it as uncached is the most they can
// charge, so the hedge budget is never under-spent.
func LoserCost(promptTokens int64, price *switchboardv1.Price) float64 {
	return ListCost(pricing.Usage{Input: promptTokens}, price)
}

// TextTokens is the pkg/tokens count of a text of n bytes: counting bytes as
// chunks arrive and converting once gives exactly tokens.Text of the whole
// delivered text.
func TextTokens(n int64) int64 {
	return (max(n, 0) + tokens.BytesPerToken - 1) / tokens.BytesPerToken
}

// Estimate is the usage of an answer whose provider reported none: the
// edge's prompt estimate, all of it uncached (nothing says otherwise), and
// the generated text delivered, counted by the pkg/tokens rule.
func Estimate(promptTokens, deliveredBytes int64) pricing.Usage {
	return pricing.Usage{Input: promptTokens, Output: TextTokens(deliveredBytes)}
}
