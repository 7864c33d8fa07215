package routing

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// TestCacheWritesArePricedWhereBreakpointsWrite: the prompt up to a
// request's cache breakpoints is priced at the cache-write prices on an
// endpoint that caches by breakpoint (api: anthropic), and at its input
// price elsewhere, so a cheaper input price with dear writes loses to a
// plain endpoint when the request asks for writes.
func TestCacheWritesArePricedWhereBreakpointsWrite(t *testing.T) {
	c, err := catalog.Parse([]byte(strings.Replace(`
models:
  - id: m
    endpoints:
      - {provider: native, api: anthropic, base_url: http://127.0.0.1:1/v1, price: {input: 1.0, cache_write: 1.25, cache_write_1h: 2.0, output: 0}}
      - {provider: plain, base_url: http://127.0.0.1:2/v1, price: {input: 1.1, cache_write: 9, output: 0}}
tenants:
  - {id: acme, api_keys_sha256: ["@KEYHASH@"]}
`, "@KEYHASH@", keyA, 1)))
	require.NoError(t, err)
	r := New(c, Options{Exploration: -1})
	tests := []struct {
		name       string
		tok        *switchboardv1.TokenEstimate
		want       string
		nativeCost float64
	}{
		{"no breakpoints: the cheaper input wins", &switchboardv1.TokenEstimate{InputTokens: 10000, MaxOutputTokens: 1}, "native", 10000 * 1.0 / 1e6},
		{"5-minute writes", &switchboardv1.TokenEstimate{InputTokens: 10000, MaxOutputTokens: 1, CacheWriteTokens: 8000}, "plain",
			(2000*1.0 + 8000*1.25) / 1e6},
		{"1-hour then 5-minute writes", &switchboardv1.TokenEstimate{InputTokens: 10000, MaxOutputTokens: 1, CacheWriteTokens: 10000, CacheWrite_1HTokens: 4000},
			"plain", (4000*2.0 + 6000*1.25) / 1e6},
		{"what is cached is read, not written", &switchboardv1.TokenEstimate{InputTokens: 10000, CachedInputTokens: 10000, MaxOutputTokens: 1,
			CacheWriteTokens: 10000}, "native", 10000 * 1.0 / 1e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := r.Decide(&switchboardv1.DecideRequest{Model: "m", Tokens: tt.tok, Explain: true}, &switchboardv1.Identity{TenantId: "acme"})
			require.NoError(t, err)
			require.Equal(t, tt.want, resp.GetEndpoint().GetProvider())
			costs := map[string]float64{}
			for _, c := range resp.GetDecision().GetCandidates() {
				costs[c.GetProvider()] = c.GetCostUsd()
			}
			require.InDelta(t, tt.nativeCost, costs["native"], 1e-12)
			require.InDelta(t, 10000*1.1/1e6, costs["plain"], 1e-12, "plain caches on its own: no writes asked of it")
		})
	}
	// The endpoint carries its API and its write prices to the edge.
	resp, err := r.Decide(&switchboardv1.DecideRequest{Model: "m", Tokens: &switchboardv1.TokenEstimate{InputTokens: 1}}, &switchboardv1.Identity{TenantId: "acme"})
	require.NoError(t, err)
	require.Equal(t, switchboardv1.EndpointApi_ENDPOINT_API_ANTHROPIC, resp.GetEndpoint().GetApi())
	require.Equal(t, 1.25, resp.GetEndpoint().GetPrice().GetCacheWrite())
	require.Equal(t, 2.0, resp.GetEndpoint().GetPrice().GetCacheWrite_1H())
	require.Equal(t, switchboardv1.EndpointApi_ENDPOINT_API_OPENAI, resp.GetFallbacks()[0].GetApi())
}
