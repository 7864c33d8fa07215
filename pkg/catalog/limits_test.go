package catalog

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// limitsCatalog is a valid catalog with two endpoints of one provider
// project, and two tenants; each case below adds one limit or two.
func limitsCatalog(endpointLimits, otherEndpointLimits, tenantLimits string) string {
	return `models:
  - id: m
    endpoints:
      - provider: a
        base_url: http://x/v1
        price: {input: 1, output: 1}
        limits: [` + endpointLimits + `]
  - id: n
    endpoints:
      - provider: a
        base_url: http://x/v1
        price: {input: 1, output: 1}
        limits: [` + otherEndpointLimits + `]
tenants:
  - id: t
    api_keys_sha256: ["` + strings.Repeat("a", 64) + `", "` + strings.Repeat("b", 64) + `"]
    limits: [` + tenantLimits + `]
`
}

func TestLimitsTheBrokerRefuses(t *testing.T) {
	requireParseErrors(t, []parseErrorCase{
		{name: "ramp period under a second",
			yaml: limitsCatalog("", "", "{unit: requests, per: day, capacity: 100, ramp: {max_increase: 0.5, period: 500ms}}"),
			want: []string{"line 17: tenants[0].limits[0].ramp.period", "between 1s and 24h"}},
		{name: "ramp period over a day",
			yaml: limitsCatalog("{unit: requests, per: day, capacity: 100, ramp: {max_increase: 0.5, period: 48h}}", "", ""),
			want: []string{"models[0].endpoints[0].limits[0].ramp.period"}},
		{name: "ramp on concurrent requests",
			yaml: limitsCatalog("", "", "{unit: concurrent_requests, capacity: 4, ramp: {max_increase: 0.5}}"),
			want: []string{"tenants[0].limits[0].ramp: concurrent_requests has no ramp"}},
		{name: "infinite ramp floor",
			yaml: limitsCatalog("", "", "{unit: requests, per: day, capacity: 100, ramp: {max_increase: 0.5, floor: .inf}}"),
			want: []string{"tenants[0].limits[0].ramp.floor"}},
		{name: "no floor from a tiny capacity",
			yaml: limitsCatalog("", "", "{unit: requests, per: day, capacity: 1e-323, ramp: {max_increase: 0.5}}"),
			want: []string{"tenants[0].limits[0].ramp.floor: is required"}},
		{name: "the same tenant bucket twice",
			yaml: limitsCatalog("", "", "{unit: requests, per: day, capacity: 100}, {unit: requests, per: day, capacity: 200}"),
			want: []string{"tenants[0].limits[1]: limits the same tenant bucket of t as tenants[0].limits[0]"}},
		{name: "two ramps on one unit",
			yaml: limitsCatalog("", "", "{unit: requests, per: day, capacity: 100, ramp: {max_increase: 1}}, {unit: requests, per: hour, capacity: 10, ramp: {max_increase: 1}}"),
			want: []string{"tenants[0].limits[1]: limits the same tenant bucket"}},
		{name: "the same endpoint bucket twice",
			yaml: limitsCatalog("{unit: requests, per: minute, capacity: 1}, {unit: requests, per: minute, capacity: 2, scope: model_route}", "", ""),
			want: []string{"models[0].endpoints[0].limits[1]: limits the same model_route bucket of a/m"}},
		{name: "a shared limit with two values",
			yaml: limitsCatalog("{unit: requests, per: minute, capacity: 1, scope: provider_project}", "{unit: requests, per: minute, capacity: 2, scope: provider_project}", ""),
			want: []string{"line 13: models[1].endpoints[0].limits[0]: differs from the provider_project limit on a"}},
		{name: "the same api key bucket twice",
			yaml: limitsCatalog("", "", "{unit: requests, per: day, capacity: 1, scope: api_key}, {unit: requests, per: day, capacity: 2, scope: api_key}"),
			want: []string{"tenants[0].limits[1]: limits the same api_key bucket"}},
		{name: "an app key with an empty part",
			yaml: limitsCatalog("", "", "{unit: requests, per: day, capacity: 1, scope: app, scope_key: web/}"),
			want: []string{"tenants[0].limits[0].scope_key: \"web/\" must be"}},
		{name: "an app key of four parts",
			yaml: limitsCatalog("", "", "{unit: requests, per: day, capacity: 1, scope: app, scope_key: a/b/c}"),
			want: []string{"tenants[0].limits[0].scope_key"}},
		{name: "two keys with one key id",
			yaml: strings.Replace(limitsCatalog("", "", ""), strings.Repeat("b", 64), strings.Repeat("a", 12)+strings.Repeat("b", 52), 1),
			want: []string{"tenants[0].api_keys_sha256[1]: key id key-aaaaaaaaaaaa", "already another key's, at tenants[0].api_keys_sha256[0]"}},
	})
}

func TestLimitsTheBrokerTakes(t *testing.T) {
	for name, yaml := range map[string]string{
		"ramp bounds": limitsCatalog("{unit: requests, per: day, capacity: 100, ramp: {max_increase: 0.5, period: 24h}}", "",
			"{unit: requests, per: day, capacity: 100, ramp: {max_increase: 0.5, period: 1s}}"),
		"a shared limit repeated alike, ramp and refund included": limitsCatalog(
			"{unit: requests, per: minute, capacity: 1, scope: provider_project, refund_on_expiry: false, ramp: {max_increase: 1, period: 1m}}",
			"{unit: requests, per: minute, capacity: 1, scope: provider_project, refund_on_expiry: false, ramp: {max_increase: 1}}", ""),
		"one unit in two windows": limitsCatalog("", "", "{unit: requests, per: day, capacity: 100}, {unit: requests, per: minute, capacity: 10}"),
		"app keys":                limitsCatalog("", "", "{unit: requests, per: day, capacity: 1, scope: app, scope_key: web}, {unit: requests, per: day, capacity: 1, scope: app, scope_key: web/prod}"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(yaml))
			require.NoError(t, err)
		})
	}
}
