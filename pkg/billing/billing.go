// Package billing is the billing policy of Switchboard: which calls a tenant
// pays for, what bounds the bill, and what the operator pays instead. The
// price formula itself is [pricing.Cost]; this package decides which usage
// it is applied to, at which prices, and for whom.
//
// The policy:
//
//   - A tenant pays for the attempt that served its request — the one whose
//     answer reached the client, also when the client left mid-answer (it
//     pays for what it got) — at the serving endpoint's price, for the usage
//     its provider reported, or without one for an estimate of what was
//     delivered.
//   - The bill is capped: no token is billed above the request's
//     provider.max_price (the lower of the client's and the decider's, field
//     by field), and no more output than its max_tokens.
//   - Every other attempt is free to the tenant: a failed one, a lost hedge,
//     one cancelled before its first token, a fallback never used. Its
//     tokens still count against the tenant's quotas: the provider counted
//     them.
//   - A probe is never billed to a tenant: the operator pays it, at the
//     endpoint's list price.
//   - A call cancelled before its first token costs the operator its prompt
//     at the uncached input price, the most a provider may charge for an
//     abandoned prompt; a lost hedge spends that from the hedge budget.
//
// The edge applies the policy to each attempt as it bills the client; the
// decider applies it to call reports (probes, and the reconciliations it
// derives from the reports of an edge that does not reconcile its own
// reservations). See docs/architecture.md.
package billing

import "github.com/switchboard-ai/switchboard/pkg/pricing"

// Attempt is what billing needs to know of one call to a provider.
type Attempt struct {
	// Served is set for the attempt whose answer reached the client.
	Served bool
	// Probe is set for a synthetic probe.
	Probe bool
}

// TenantPays reports whether the tenant is billed for a: only for the
// attempt that served it, and never for a probe.
func TenantPays(a Attempt) bool { return a.Served && !a.Probe }

// MaxPrice caps per-token prices, USD per million tokens: Prompt caps the
// price of every input token, cached ones included, Completion the price of
// output tokens. A nil field caps nothing.
type MaxPrice struct {
	Prompt, Completion *float64
}

// Lower is the cap in force under both a and b: field by field the lower.
// The edge bills under the lower of the decider's cap and the client's own,
// so the client never pays above its cap whatever the decider answers.
func Lower(a, b MaxPrice) MaxPrice {
	return MaxPrice{Prompt: lower(a.Prompt, b.Prompt), Completion: lower(a.Completion, b.Completion)}
}

func lower(a, b *float64) *float64 {
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

// Caps bound what a client can be billed for one request.
type Caps struct {
	// MaxPrice caps the per-token prices.
	MaxPrice MaxPrice
	// MaxOutputTokens is the request's max_tokens: a provider reporting
	// more output is billed for this many. 0 caps nothing.
	MaxOutputTokens int64
}

// Charge is what the tenant is billed for usage u of the attempt that
// served it, at the serving endpoint's price p: the per-token prices and
// the output tokens are first lowered to caps, then priced by
// [pricing.Cost]. capped says whether a cap changed anything; a cap on a
// price no token is billed at changes nothing.
func Charge(p pricing.Price, u pricing.Usage, caps Caps) (cost float64, capped bool) {
	input := max(u.Input, 0)
	cached := min(max(u.CachedInput, 0), input)
	w5 := min(max(u.CacheWrite, 0), input-cached)
	w1h := min(max(u.CacheWrite1h, 0), input-cached-w5)
	output := max(u.Output, 0)
	if caps.MaxOutputTokens > 0 && output > caps.MaxOutputTokens {
		output, capped = caps.MaxOutputTokens, true
	}
	if mp := caps.MaxPrice.Prompt; mp != nil {
		if p.Input > *mp && input-cached-w5-w1h > 0 {
			p.Input, capped = *mp, true
		}
		if p.CachedInput > *mp && cached > 0 {
			p.CachedInput, capped = *mp, true
		}
		if p.CacheWrite > *mp && w5 > 0 {
			p.CacheWrite, capped = *mp, true
		}
		if p.CacheWrite1h > *mp && w1h > 0 {
			p.CacheWrite1h, capped = *mp, true
		}
	}
	if mp := caps.MaxPrice.Completion; mp != nil && p.Output > *mp && output > 0 {
		p.Output, capped = *mp, true
	}
	return pricing.Cost(p, pricing.Usage{Input: input, CachedInput: cached, Output: output, CacheWrite: w5, CacheWrite1h: w1h}), capped
}

// ListCost is what the provider charges for u at its list price p, without
// the client's caps: the operator's side of an attempt's bill, and the
// whole cost of a probe.
func ListCost(p pricing.Price, u pricing.Usage) float64 { return pricing.Cost(p, u) }

// AbandonedCost is what a call cancelled before its first token costs the
// operator: the prompt it was sent at p's uncached input price. Providers
// differ on whether, and how much of, an abandoned prompt they charge;
// counting all of it as uncached is the most they can charge, so the hedge
// budget is never under-spent.
func AbandonedCost(p pricing.Price, promptTokens int64) float64 {
	return ListCost(p, pricing.Usage{Input: promptTokens})
}
