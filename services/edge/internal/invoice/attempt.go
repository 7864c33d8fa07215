package invoice

import (
	"github.com/switchboard-ai/switchboard/pkg/billing"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Attempt is one provider call as billing sees it once it ended.
type Attempt struct {
	// PromptTokens is the edge's estimate of the prompt sent.
	PromptTokens int64
	// Price is the endpoint's price list.
	Price *switchboardv1.Price
	// Caps bound the client's bill.
	Caps Caps
	// Served is set when the call's answer was committed to the client.
	Served bool
	// Cancelled is set when the call ended cancelled (a lost hedge, a
	// client that left).
	Cancelled bool
	// Usage is the provider's usage, nil when it reported none.
	Usage *pricing.Usage
	// DeliveredBytes is the size of the generated text written to the client.
	DeliveredBytes int64
	// MaxOutput bounds an estimated output (0: unbounded): the decision's
	// caps.max_output_tokens.
	MaxOutput int64
}

// Billed is the usage the client of a served call is billed for: its
// provider's (reported), or without one an estimate of what was delivered.
func (a Attempt) Billed() (u pricing.Usage, reported bool) {
	if a.Usage != nil {
		return *a.Usage, true
	}
	return Estimate(a.PromptTokens, a.DeliveredBytes, a.MaxOutput), false
}

// Client is what the client of a served call is billed: the Billed usage
// at the endpoint's price, never above its caps; capped says whether the
// caps lowered it.
func (a Attempt) Client() (u *switchboardv1.Usage, capped bool) {
	b, reported := a.Billed()
	cost, capped := Charge(b, a.Price, a.Caps)
	return &switchboardv1.Usage{
		InputTokens: b.Input, CachedInputTokens: b.CachedInput, OutputTokens: b.Output,
		CacheWriteTokens: b.CacheWrite, CacheWrite_1HTokens: b.CacheWrite1h,
		CostUsd: cost, Reported: reported,
	}, capped
}

// Provider is what the provider charges for the call, at its list price
// (the client's caps are the client's bill, not the provider's):
//   - a call that answered: the provider's usage, or without one an estimate
//     of what was delivered (prompt estimate in, delivered text out), marked
//     as not reported so the decider can tell the two apart;
//   - a call cancelled before its first token (a lost hedge, a client that
//     left): its prompt at the uncached input price, not reported;
//   - a call that failed: nothing.
func (a Attempt) Provider() *switchboardv1.Usage {
	var u pricing.Usage
	reported := false
	switch {
	case a.Served:
		u, reported = a.Billed()
	case a.Cancelled:
		return &switchboardv1.Usage{InputTokens: a.PromptTokens, CostUsd: LoserCost(a.PromptTokens, a.Price)}
	default:
		return &switchboardv1.Usage{}
	}
	return &switchboardv1.Usage{
		InputTokens:         u.Input,
		CachedInputTokens:   u.CachedInput,
		OutputTokens:        u.Output,
		CacheWriteTokens:    u.CacheWrite,
		CacheWrite_1HTokens: u.CacheWrite1h,
		CostUsd:             ListCost(u, a.Price),
		Reported:            reported,
	}
}

// ProviderCost is Provider's cost, without building its usage.
func (a Attempt) ProviderCost() float64 {
	switch {
	case a.Served:
		u, _ := a.Billed()
		return ListCost(u, a.Price)
	case a.Cancelled:
		return LoserCost(a.PromptTokens, a.Price)
	}
	return 0
}

// Tenant is what the call consumed as the tenant's quotas count it: its
// tokens, whoever pays for them, and as cost what the tenant is billed for
// it — the served call's bill (what the activity log records, the same when
// the client left mid-answer: it pays for what it got), nothing for any
// other call (a failed one, a lost hedge, one the client left before it
// started).
func (a Attempt) Tenant() *switchboardv1.Usage {
	if !billing.TenantPays(billing.Attempt{Served: a.Served}) {
		u := a.Provider()
		u.CostUsd = 0
		return u
	}
	u, _ := a.Client()
	return u
}
