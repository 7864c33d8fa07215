package dispatch

import (
	"encoding/json"
	"strconv"

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

// usage is a provider's token accounting of one answer.
type usage struct {
	input, cached, output int64
}

// charge prices u at price with the one price formula (pricing.Cost), the
// way the serving endpoint charges it: uncached input, cached input and
// output separately, per million tokens.
// With caps, the per-token prices and the output tokens are first lowered to
// the caps; capped says whether that changed anything.
func charge(u usage, price *switchboardv1.Price, caps Caps) (cost float64, capped bool) {
	input := max(u.input, 0)
	cached := min(max(u.cached, 0), input)
	output := max(u.output, 0)
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

// listCost is what the endpoint charges for u, without the client's caps:
// the provider's side of the bill, reported per attempt.
func listCost(u usage, price *switchboardv1.Price) float64 {
	c, _ := charge(u, price, Caps{})
	return c
}

// loserCost estimates what a call cancelled before its first token costs:
// the prompt it was sent (the edge's estimate) at the endpoint's uncached
// input price. Providers differ on whether, and how much of, an abandoned
// prompt they charge; counting all of it as uncached is the most they can
// charge, so the hedge budget is never under-spent.
func loserCost(promptTokens int64, price *switchboardv1.Price) float64 {
	return listCost(usage{input: promptTokens}, price)
}

// textTokens is the pkg/tokens count of a text of n bytes: counting bytes as
// chunks arrive and converting once gives exactly tokens.Text of the whole
// delivered text.
func textTokens(n int64) int64 {
	return (max(n, 0) + tokens.BytesPerToken - 1) / tokens.BytesPerToken
}

// usageJSON is an OpenAI usage object for u with its cost, for answers whose
// provider sent none.
func usageJSON(u usage, cost float64) json.RawMessage {
	b := make([]byte, 0, 128)
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, u.input, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, u.output, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, u.input+u.output, 10)
	b = append(b, `,"cost":`...)
	b = appendCost(b, cost)
	return append(b, '}')
}

// appendCost writes a USD amount as a plain JSON number (no exponent, which
// some clients parse badly for amounts like 1.6e-05).
func appendCost(b []byte, cost float64) []byte {
	return strconv.AppendFloat(b, cost, 'f', -1, 64)
}
