package invoice

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func ptr(f float64) *float64 { return &f }

// billPrice is a known price list: USD per million tokens.
var billPrice = &switchboardv1.Price{Input: 0.20, CachedInput: 0.05, Output: 0.80}

// billCost is what a known usage costs at billPrice: 1M input of which 400k
// cached, 10k output, which costs 600k×0.20 + 400k×0.05 + 10k×0.80 = $0.12 +
// $0.02 + $0.008.
const billCost = 0.148

func TestCharge(t *testing.T) {
	u := pricing.Usage{Input: 1_000_000, CachedInput: 400_000, Output: 10_000}
	tests := []struct {
		name       string
		u          pricing.Usage
		caps       Caps
		want       float64
		wantCapped bool
	}{
		{name: "list price", u: u, want: billCost},
		{name: "caps that do not bind", u: u, caps: Caps{MaxPrice: &switchboardv1.MaxPrice{Prompt: ptr(0.2), Completion: ptr(0.8)}, MaxOutputTokens: 10_000}, want: billCost},
		{name: "prompt cap on uncached input", u: u, caps: Caps{MaxPrice: &switchboardv1.MaxPrice{Prompt: ptr(0.10)}},
			want: 0.06 + 0.02 + 0.008, wantCapped: true},
		{name: "prompt cap below cached price caps it too", u: u, caps: Caps{MaxPrice: &switchboardv1.MaxPrice{Prompt: ptr(0.03)}},
			want: 0.018 + 0.012 + 0.008, wantCapped: true},
		{name: "completion cap", u: u, caps: Caps{MaxPrice: &switchboardv1.MaxPrice{Completion: ptr(0.50)}},
			want: 0.12 + 0.02 + 0.005, wantCapped: true},
		{name: "more output than max_tokens", u: u, caps: Caps{MaxOutputTokens: 5_000},
			want: 0.12 + 0.02 + 0.004, wantCapped: true},
		{name: "zero cap", u: u, caps: Caps{MaxPrice: &switchboardv1.MaxPrice{Prompt: ptr(0), Completion: ptr(0)}}, want: 0, wantCapped: true},
		{name: "cap on a price with no tokens is no capping", u: pricing.Usage{Input: 1_000_000}, caps: Caps{MaxPrice: &switchboardv1.MaxPrice{Completion: ptr(0.1)}},
			want: 0.2},
		{name: "cached above input is clamped", u: pricing.Usage{Input: 100, CachedInput: 500}, want: 100 * 0.05 / 1e6},
		{name: "negative counts are zero", u: pricing.Usage{Input: -5, CachedInput: -1, Output: -3}, want: 0},
		{name: "nothing", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, capped := Charge(tt.u, billPrice, tt.caps)
			require.InDelta(t, tt.want, got, 1e-12)
			require.Equal(t, tt.wantCapped, capped)
		})
	}
	require.InDelta(t, 0.0, ListCost(u, nil), 0, "no price, no cost")
	require.InDelta(t, 1_000*0.2/1e6, LoserCost(1_000, billPrice), 1e-15)
	require.EqualValues(t, tokens.Text("Hello world"), TextTokens(int64(len("Hello world"))))
	require.Zero(t, TextTokens(0))
}

// TestProviderCostIsProviders: ProviderCost is the cost Provider's usage
// carries, whatever became of the call.
func TestProviderCostIsProviders(t *testing.T) {
	usage := &pricing.Usage{Input: 1_000_000, CachedInput: 400_000, Output: 10_000}
	for _, a := range []Attempt{
		{PromptTokens: 1000, Price: billPrice, Served: true, Usage: usage},
		{PromptTokens: 1000, Price: billPrice, Served: true, DeliveredBytes: 4000},
		{PromptTokens: 1000, Price: billPrice, Cancelled: true},
		{PromptTokens: 1000, Price: billPrice},
		{PromptTokens: 1000, Price: billPrice, Served: true, Usage: usage, Caps: NewCaps(&switchboardv1.MaxPrice{Prompt: ptr(0.01)}, nil, 0)},
	} {
		require.Equal(t, a.Provider().GetCostUsd(), a.ProviderCost(), "%+v", a)
	}
	require.InDelta(t, billCost, Attempt{Price: billPrice, Served: true, Usage: usage}.ProviderCost(), 1e-12)
}

// TestEstimateStaysWithinTheDecisionsOutput: text of long tokens counted by
// the byte rule would bill more output than the endpoints can generate, and
// the decider stores no record beyond its decision's caps.
func TestEstimateStaysWithinTheDecisionsOutput(t *testing.T) {
	a := Attempt{PromptTokens: 100, Price: &switchboardv1.Price{Input: 1, Output: 2}, Served: true, DeliveredBytes: 4000}
	u, reported := a.Billed()
	require.False(t, reported)
	require.EqualValues(t, TextTokens(4000), u.Output, "unbounded without caps")
	a.MaxOutput = 512
	u, _ = a.Billed()
	require.EqualValues(t, 512, u.Output)
	a.Usage = &pricing.Usage{Input: 100, Output: 900}
	u, reported = a.Billed()
	require.True(t, reported)
	require.EqualValues(t, 900, u.Output, "a provider's own count is never lowered")
}
