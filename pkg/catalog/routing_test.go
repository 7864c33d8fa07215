package catalog

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestModelRouting(t *testing.T) {
	const ok = `models:
  - id: m
    routing: {policy: routing-cost, time_value_usd_per_hour: 2.5, competitive_margin: 0.2}
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}
  - id: n
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}
`
	c, err := Parse([]byte(ok))
	require.NoError(t, err)
	r := c.Models[0].Routing
	require.Equal(t, PolicyRoutingCost, r.PolicyName())
	require.InDelta(t, 2.5, r.TimeValue(), 0)
	require.InDelta(t, 0.2, r.Margin(), 0)
	none := c.Models[1].Routing
	require.Empty(t, none.PolicyName(), "unset reads as the deployment default")
	require.Zero(t, none.TimeValue())
	require.Zero(t, none.Margin())

	tests := []parseErrorCase{
		{
			name: "every problem with its line",
			yaml: `models:
  - id: m
    routing:
      policy: cheapest
      time_value_usd_per_hour: -1
      competitive_margin: 0
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}
`,
			want: []string{
				`line 4: models[0].routing.policy: "cheapest" is not a routing policy`,
				"line 5: models[0].routing.time_value_usd_per_hour: -1 must be between 0 and 1000000",
				"line 6: models[0].routing.competitive_margin: 0 must be above 0",
			},
		},
		{
			name: "unknown setting",
			yaml: "models:\n  - id: m\n    routing: {polcy: smart}\n    endpoints:\n      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}\n",
			want: []string{"line 3: models[0].routing.polcy: unknown field"},
		},
	}
	requireParseErrors(t, tests)
}
