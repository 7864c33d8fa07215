package routing

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// fallbackCatalog has four endpoints of one model, cheapest first: alpha
// (eu-west, 100k), beta (eu-west, 200k, 1.5× alpha), gamma (us-east, 200k,
// 1.2×) and delta (eu-central, unknown context, 3×).
const fallbackCatalog = `
models:
  - id: m
    @FALLBACK@
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 1.0, output: 1.0}, context_length: 100000, region: eu-west}
      - {provider: beta, base_url: http://127.0.0.1:2/v1, price: {input: 1.5, output: 1.5}, context_length: 200000, region: eu-west}
      - {provider: gamma, base_url: http://127.0.0.1:3/v1, price: {input: 1.2, output: 1.2}, context_length: 200000, region: us-east}
      - {provider: delta, base_url: http://127.0.0.1:4/v1, price: {input: 3.0, output: 3.0}, region: eu-central}
tenants:
  - id: acme
    api_keys_sha256: ["` + "0000000000000000000000000000000000000000000000000000000000000000" + `"]
`

func TestFallbackPolicy(t *testing.T) {
	tests := []struct {
		name     string
		fallback string
		prefs    *switchboardv1.ProviderPreferences
		region   string // the request's (its edge's)
		want     []string
		// residency is the region the route header names; "" none.
		residency string
	}{
		{name: "no policy: every endpoint, cheapest first", want: []string{"alpha", "gamma", "beta", "delta"}},
		{name: "allow: true is the default", fallback: "fallback: {allow: true}", want: []string{"alpha", "gamma", "beta", "delta"}},
		{name: "allow: false keeps the first endpoint alone", fallback: "fallback: {allow: false}", want: []string{"alpha"}},
		{name: "price ratio", fallback: "fallback: {max_price_ratio: 1.5}", want: []string{"alpha", "gamma", "beta"}},
		{name: "same region", fallback: "fallback: {same_region: true}", want: []string{"alpha", "beta"}, residency: "eu-west"},
		{name: "same region from the edge's region, where the model has endpoints", fallback: "fallback: {same_region: true}",
			region: "us-east", want: []string{"gamma"}, residency: "us-east"},
		{name: "same region from the first choice's region, from a region with no endpoint", fallback: "fallback: {same_region: true}",
			region: "ap-south", want: []string{"alpha", "beta"}, residency: "eu-west"},
		{name: "same region from the edge's region, the first choice's too", fallback: "fallback: {same_region: true}",
			region: "eu-west", want: []string{"alpha", "beta"}, residency: "eu-west"},
		{name: "same region from the edge's region, the request's allow_fallbacks too", fallback: "fallback: {same_region: true}",
			region: "eu-central", prefs: &switchboardv1.ProviderPreferences{AllowFallbacks: ptr(false)}, want: []string{"delta"}, residency: "eu-central"},
		{name: "the edge's region alone restricts nothing", region: "us-east", want: []string{"alpha", "gamma", "beta", "delta"}},
		{name: "regions", fallback: "fallback: {regions: [eu-west, eu-central]}", want: []string{"alpha", "beta", "delta"}},
		{name: "context", fallback: "fallback: {min_context_tokens: 150000}", want: []string{"alpha", "gamma", "beta"}},
		{name: "all at once", fallback: "fallback: {max_price_ratio: 2, regions: [eu-west, us-east], min_context_tokens: 150000}", want: []string{"alpha", "gamma", "beta"}},
		{name: "relative to the first choice the request made", fallback: "fallback: {same_region: true}",
			prefs: &switchboardv1.ProviderPreferences{Order: []string{"gamma"}}, want: []string{"gamma"}, residency: "us-east"},
		{name: "the request's own allow_fallbacks still applies", fallback: "fallback: {max_price_ratio: 10}",
			prefs: &switchboardv1.ProviderPreferences{AllowFallbacks: ptr(false)}, want: []string{"alpha"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := catalog.Parse([]byte(strings.Replace(fallbackCatalog, "@FALLBACK@", tt.fallback, 1)))
			require.NoError(t, err)
			r := New(c, Options{Exploration: -1})
			resp, err := r.Decide(&switchboardv1.DecideRequest{Model: "m", Provider: tt.prefs, Region: tt.region,
				Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 100}, Explain: true},
				&switchboardv1.Identity{TenantId: "acme"})
			require.NoError(t, err)
			got := []string{resp.GetEndpoint().GetProvider()}
			for _, f := range resp.GetFallbacks() {
				got = append(got, f.GetProvider())
			}
			require.Equal(t, tt.want, got)
			require.Len(t, resp.GetDecision().GetCandidates(), 4, "the explanation still shows every endpoint")
			if tt.residency != "" {
				require.Contains(t, resp.GetDecision().GetSummary(), " residency="+tt.residency, "the route header names the region used")
			} else {
				require.NotContains(t, resp.GetDecision().GetSummary(), "residency=")
			}
			if h := resp.GetHedge().GetEndpoint(); h != nil {
				require.Contains(t, got[1:], h.GetProvider(), "a hedge goes only where a fallback may")
			}
		})
	}
}
