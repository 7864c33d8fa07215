package routing

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// tenantCatalog is the policy catalog with tenants that set defaults.
const tenantCatalog = `
models:
  - id: m
    endpoints:
      - {provider: cheap,    base_url: http://127.0.0.1:1/v1, price: {input: 0.20, cached_input: 0.05,   output: 0.80}}
      - {provider: fast,     base_url: http://127.0.0.1:2/v1, price: {input: 0.30, cached_input: 0.0013, output: 1.10}}
      - {provider: reseller, base_url: http://127.0.0.1:3/v1, price: {input: 0.25, cached_input: 0.07,   output: 1.00}}
tenants:
  - {id: acme, api_keys_sha256: ["0000000000000000000000000000000000000000000000000000000000000000"]}
  - {id: frugal, api_keys_sha256: ["1111111111111111111111111111111111111111111111111111111111111111"], routing: {sort: price}}
  - {id: speedy, api_keys_sha256: ["2222222222222222222222222222222222222222222222222222222222222222"], routing: {sort: latency, policy: routing-cost}}
  - {id: costed, api_keys_sha256: ["3333333333333333333333333333333333333333333333333333333333333333"], routing: {policy: routing-cost}}
`

func TestTenantDefaultSort(t *testing.T) {
	e := newPolicy(t, tenantCatalog, Options{})
	// cheap is too slow for the smart policy; fast is the fastest.
	e.speed("cheap", long, 15*time.Second, 12)
	e.speed("fast", long, time.Second, 12)
	e.speed("reseller", long, 1500*time.Millisecond, 12)
	tests := []struct {
		name   string
		tenant string
		prefs  *switchboardv1.ProviderPreferences
		model  string
		want   []string
		reason switchboardv1.RouteReason
	}{
		{name: "no default: the policy", tenant: "acme", want: []string{"reseller", "fast", "cheap"}, reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING},
		{name: "default sort price", tenant: "frugal", want: []string{"cheap", "reseller", "fast"}, reason: switchboardv1.RouteReason_ROUTE_REASON_USER_SORT},
		{name: "default sort latency", tenant: "speedy", want: []string{"fast", "reseller", "cheap"}, reason: switchboardv1.RouteReason_ROUTE_REASON_USER_SORT},
		{
			name: "only filters, the default sort orders the rest", tenant: "frugal",
			prefs: &switchboardv1.ProviderPreferences{Only: []string{"fast", "reseller"}},
			want:  []string{"reseller", "fast"}, reason: switchboardv1.RouteReason_ROUTE_REASON_USER_SORT,
		},
		{
			name: "the request's sort wins", tenant: "frugal",
			prefs: &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_LATENCY},
			want:  []string{"fast", "reseller", "cheap"}, reason: switchboardv1.RouteReason_ROUTE_REASON_USER_SORT,
		},
		{
			name: "the request's order wins", tenant: "frugal",
			prefs: &switchboardv1.ProviderPreferences{Order: []string{"fast"}},
			want:  []string{"fast", "cheap", "reseller"}, reason: switchboardv1.RouteReason_ROUTE_REASON_USER_ORDER,
		},
		{name: "the request's :nitro wins", tenant: "frugal", model: "m:nitro", want: []string{"fast", "reseller", "cheap"}, reason: switchboardv1.RouteReason_ROUTE_REASON_NITRO},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.model == "" {
				tt.model = "m"
			}
			e.stats.ObserveThroughput("fast/m", 90, e.now)
			e.stats.ObserveThroughput("reseller/m", 60, e.now)
			e.stats.ObserveThroughput("cheap/m", 20, e.now)
			req := &switchboardv1.DecideRequest{Model: tt.model, Provider: tt.prefs, Tokens: &switchboardv1.TokenEstimate{InputTokens: long}}
			resp, err := e.r.Decide(req, &switchboardv1.Identity{TenantId: tt.tenant})
			require.NoError(t, err)
			require.Equal(t, tt.want, order(resp))
			require.Equal(t, tt.reason, resp.Decision.Reason)
		})
	}
}

func TestTenantDefaultSortDoesNotModifyTheRequest(t *testing.T) {
	e := newPolicy(t, tenantCatalog, Options{})
	prefs := &switchboardv1.ProviderPreferences{Only: []string{"fast", "reseller"}}
	_, err := e.r.Decide(&switchboardv1.DecideRequest{Model: "m", Provider: prefs}, &switchboardv1.Identity{TenantId: "frugal"})
	require.NoError(t, err)
	require.Equal(t, switchboardv1.Sort_SORT_UNSPECIFIED, prefs.GetSort())
}

func TestPolicyOf(t *testing.T) {
	arm := func(p Policy, ok bool) func(string, time.Time) (Policy, bool) {
		return func(string, time.Time) (Policy, bool) { return p, ok }
	}
	tests := []struct {
		name   string
		o      Options
		tenant string
		want   Policy
	}{
		{name: "deployment default", tenant: "acme", want: PolicySmart},
		{name: "deployment default routing cost", o: Options{Policy: PolicyRoutingCost}, tenant: "acme", want: PolicyRoutingCost},
		{name: "an experiment's arm over the deployment", o: Options{Arm: arm(PolicyRoutingCost, true)}, tenant: "acme", want: PolicyRoutingCost},
		{name: "no arm running", o: Options{Arm: arm(PolicyRoutingCost, false)}, tenant: "acme", want: PolicySmart},
		{name: "the tenant's default first", o: Options{Arm: arm(PolicySmart, true)}, tenant: "costed", want: PolicyRoutingCost},
		{name: "a tenant with only a sort", o: Options{Policy: PolicyRoutingCost}, tenant: "frugal", want: PolicyRoutingCost},
		{name: "an unknown tenant", tenant: "nobody", want: PolicySmart},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newPolicy(t, tenantCatalog, tt.o)
			m := e.r.o.Catalog().models["m"]
			require.Equal(t, tt.want, e.r.policyOf(e.r.o.Catalog(), m, &switchboardv1.Identity{TenantId: tt.tenant}, e.now))
		})
	}
	e := newPolicy(t, tenantCatalog, Options{})
	require.Equal(t, PolicySmart, e.r.policyOf(e.r.o.Catalog(), e.r.o.Catalog().models["m"], nil, e.now), "no identity")
}
