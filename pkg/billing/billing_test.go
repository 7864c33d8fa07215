package billing

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
)

func ptr(f float64) *float64 { return &f }

// price is a known price list: USD per million tokens.
var price = pricing.Price{Input: 0.20, CachedInput: 0.05, Output: 0.80}

// listBill is the bill of 1M input of which 400k cached, and 10k output:
// 600k×0.20 + 400k×0.05 + 10k×0.80 = $0.12 + $0.02 + $0.008.
const listBill = 0.148

func TestCharge(t *testing.T) {
	u := pricing.Usage{Input: 1_000_000, CachedInput: 400_000, Output: 10_000}
	tests := []struct {
		name       string
		u          pricing.Usage
		caps       Caps
		want       float64
		wantCapped bool
	}{
		{name: "list price", u: u, want: listBill},
		{name: "caps that do not bind", u: u, caps: Caps{MaxPrice: MaxPrice{Prompt: ptr(0.2), Completion: ptr(0.8)}, MaxOutputTokens: 10_000}, want: listBill},
		{name: "prompt cap on uncached input", u: u, caps: Caps{MaxPrice: MaxPrice{Prompt: ptr(0.10)}},
			want: 0.06 + 0.02 + 0.008, wantCapped: true},
		{name: "prompt cap below cached price caps it too", u: u, caps: Caps{MaxPrice: MaxPrice{Prompt: ptr(0.03)}},
			want: 0.018 + 0.012 + 0.008, wantCapped: true},
		{name: "completion cap", u: u, caps: Caps{MaxPrice: MaxPrice{Completion: ptr(0.50)}},
			want: 0.12 + 0.02 + 0.005, wantCapped: true},
		{name: "more output than max_tokens", u: u, caps: Caps{MaxOutputTokens: 5_000},
			want: 0.12 + 0.02 + 0.004, wantCapped: true},
		{name: "zero cap", u: u, caps: Caps{MaxPrice: MaxPrice{Prompt: ptr(0), Completion: ptr(0)}}, want: 0, wantCapped: true},
		{name: "cap on a price with no tokens is no capping", u: pricing.Usage{Input: 1_000_000}, caps: Caps{MaxPrice: MaxPrice{Completion: ptr(0.1)}},
			want: 0.2},
		{name: "cached above input is clamped", u: pricing.Usage{Input: 100, CachedInput: 500}, want: 100 * 0.05 / 1e6},
		{name: "negative counts are zero", u: pricing.Usage{Input: -5, CachedInput: -1, Output: -3}, want: 0},
		{name: "nothing", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, capped := Charge(price, tt.u, tt.caps)
			require.InDelta(t, tt.want, got, 1e-12)
			require.Equal(t, tt.wantCapped, capped)
			list := ListCost(price, tt.u)
			require.LessOrEqual(t, got, list+1e-12, "a cap never raises the bill")
			if !tt.wantCapped {
				require.InDelta(t, list, got, 1e-12, "uncapped, the bill is the list price")
			}
		})
	}
	require.Zero(t, ListCost(pricing.Price{}, u), "no price, no cost")
	require.InDelta(t, 1_000*0.2/1e6, AbandonedCost(price, 1_000), 1e-15)
}

func TestLower(t *testing.T) {
	tests := []struct {
		name string
		a, b MaxPrice
		want MaxPrice
	}{
		{name: "none", want: MaxPrice{}},
		{name: "one side only", a: MaxPrice{Prompt: ptr(1)}, b: MaxPrice{Completion: ptr(2)}, want: MaxPrice{Prompt: ptr(1), Completion: ptr(2)}},
		{name: "field by field the lower", a: MaxPrice{Prompt: ptr(1), Completion: ptr(5)}, b: MaxPrice{Prompt: ptr(3), Completion: ptr(2)},
			want: MaxPrice{Prompt: ptr(1), Completion: ptr(2)}},
		{name: "zero is a cap", a: MaxPrice{Prompt: ptr(0)}, b: MaxPrice{Prompt: ptr(3)}, want: MaxPrice{Prompt: ptr(0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Lower(tt.a, tt.b))
			require.Equal(t, tt.want, Lower(tt.b, tt.a), "order does not matter")
		})
	}
}

func TestTenantPays(t *testing.T) {
	tests := []struct {
		name   string
		served bool
		probe  bool
		want   bool
	}{
		{name: "answered", served: true, want: true},
		{name: "did not serve (lost hedge, failed)"},
		{name: "probe", served: true, probe: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Attempt{Served: tt.served, Probe: tt.probe}
			require.Equal(t, tt.want, TenantPays(a))
		})
	}
	require.False(t, TenantPays(Attempt{}), "an attempt that did not serve is free")
}
