package catalog

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFallback(t *testing.T) {
	const ok = `models:
  - id: m
    fallback: {allow: true, max_price_ratio: 1.5, same_region: true, regions: [eu-west, eu-central], min_context_tokens: 32768}
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}, region: eu-west}
      - {provider: b, base_url: http://y/v1, price: {input: 1, output: 1}, region: eu-central}
  - id: n
    fallback: {allow: false}
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}
  - id: o
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}
`
	c, err := Parse([]byte(ok))
	require.NoError(t, err)
	f := c.Models[0].Fallback
	require.True(t, f.Allows())
	require.InDelta(t, 1.5, f.MaxPriceRatio, 0)
	require.True(t, f.SameRegion)
	require.Equal(t, []string{"eu-west", "eu-central"}, f.Regions)
	require.EqualValues(t, 32768, f.MinContextTokens)
	require.Equal(t, "eu-central", c.Models[0].Endpoints[1].Region)
	require.False(t, c.Models[1].Fallback.Allows())
	require.True(t, c.Models[2].Fallback.Allows(), "a model that says nothing moves freely")

	tests := []parseErrorCase{
		{
			name: "every problem with its line",
			yaml: `models:
  - id: m
    fallback:
      max_price_ratio: -2
      min_context_tokens: -1
      regions: [EU West]
      same_region: true
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}, region: eu-west}
      - {provider: b, base_url: http://y/v1, price: {input: 1, output: 1}}
      - {provider: c, base_url: http://z/v1, price: {input: 1, output: 1}, region: "Mars!"}
`,
			want: []string{
				"line 11: models[0].endpoints[2].region: \"Mars!\" is not a region name",
				"line 4: models[0].fallback.max_price_ratio: -2 must be between 0 (any price) and 1000",
				"line 5: models[0].fallback.min_context_tokens: -1 must not be negative",
				"models[0].fallback.regions[0]: \"EU West\" is not a region name",
				"line 7: models[0].fallback.same_region: needs every endpoint's region: endpoints[1] (b) names none",
			},
		},
		{
			name: "regions need the endpoints' regions",
			yaml: "models:\n  - id: m\n    fallback: {regions: [eu]}\n    endpoints:\n      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}\n",
			want: []string{"line 3: models[0].fallback.regions: needs every endpoint's region: endpoints[0] (a) names none"},
		},
		{
			name: "unknown setting",
			yaml: "models:\n  - id: m\n    fallback: {alow: false}\n    endpoints:\n      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}\n",
			want: []string{"line 3: models[0].fallback.alow: unknown field"},
		},
	}
	requireParseErrors(t, tests)
}
