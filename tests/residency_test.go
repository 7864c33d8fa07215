package tests

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// residencySim serves the three providers of the residency test.
const residencySim = `
providers:
  - name: alpha
    listen: 127.0.0.1:0
    models: [{id: sim-model, default_output_tokens: 4, ttft: {base: 5ms}}]
  - name: beta
    listen: 127.0.0.1:0
    models: [{id: sim-model, default_output_tokens: 4, ttft: {base: 5ms}}]
  - name: gamma
    listen: 127.0.0.1:0
    models: [{id: sim-model, default_output_tokens: 4, ttft: {base: 5ms}}]
`

// TestSameRegionIsTheEdgesRegion: a model whose fallbacks must stay in one
// region (fallback.same_region) has its cheapest endpoint, alpha, in
// eu-west and two dearer ones, beta and gamma, in us-east. A request from
// an edge in us-east was sent to alpha and held to eu-west, the first
// choice's region, though its residency is the edge's; now it is served in
// us-east, beta first and gamma its fallback, and the route header names
// the region. A request from a region with no endpoint of the model is held
// to its first choice's region, as before.
func TestSameRegionIsTheEdgesRegion(t *testing.T) {
	s := startStack(t, stackOptions{sim: residencySim, edgeArgs: []string{"--region=us-east"},
		catalog: func(url func(string) string) string {
			return fmt.Sprintf(`
models:
  - id: %[1]s
    fallback: {same_region: true}
    endpoints:
      - {provider: alpha, base_url: %[2]s, upstream_model: sim-model, region: eu-west, price: {input: 0.2, output: 0.8}}
      - {provider: beta,  base_url: %[3]s, upstream_model: sim-model, region: us-east, price: {input: 0.4, output: 1.6}}
      - {provider: gamma, base_url: %[4]s, upstream_model: sim-model, region: us-east, price: {input: 0.5, output: 2.0}}
tenants:
  - {id: acme, api_keys_sha256: [%[5]s]}
`, model, url("alpha"), url("beta"), url("gamma"), catalog.HashKey(testKey))
		},
		tune: func(c *deciderapp.Config) { c.NoProbes = true }})

	// The decider's Decide, as an edge of each region asks it.
	edge := dialAs(t, s.decider.Addr(), testEdgeToken)
	decide := func(region string) []string {
		t.Helper()
		resp, err := edge.Decide(t.Context(), &switchboardv1.DecideRequest{Identity: byKey(testKey), Model: model, Region: region,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 10}})
		require.NoError(t, err)
		route := []string{resp.GetEndpoint().GetProvider()}
		for _, f := range resp.GetFallbacks() {
			route = append(route, f.GetProvider())
		}
		require.Contains(t, resp.GetDecision().GetSummary(), " residency=", "the summary names the region used")
		return route
	}
	require.Equal(t, []string{"beta", "gamma"}, decide("us-east"), "from us-east: us-east's endpoints only")
	require.Equal(t, []string{"alpha"}, decide("ap-south"), "from a region without endpoints: the first choice's region")
	require.Equal(t, []string{"alpha"}, decide(""), "a request naming no region: the first choice's region")

	// Through the edge in us-east.
	code, hdr, body := s.post(t, testKey, chat("residency", 100, ""))
	require.Equal(t, 200, code, "%v", body)
	require.Equal(t, "beta", body["provider"], hdr.Get("x-switchboard-route"))
	require.Contains(t, hdr.Get("x-switchboard-route"), " residency=us-east", "the route header names the region used")
}
