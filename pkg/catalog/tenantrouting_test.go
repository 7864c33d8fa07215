package catalog

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const tenantRoutingModels = `
models:
  - id: m
    endpoints: [{provider: a, base_url: http://127.0.0.1:1/v1, price: {input: 1, output: 1}}]
tenants:
`

func TestTenantRouting(t *testing.T) {
	key := HashKey("k")
	tests := []struct {
		name    string
		tenant  string
		want    *TenantRouting
		wantErr []string
	}{
		{name: "none", tenant: `  - {id: t, api_keys_sha256: ["` + key + `"]}`},
		{
			name:   "policy and sort",
			tenant: `  - {id: t, api_keys_sha256: ["` + key + `"], routing: {policy: routing-cost, sort: price}}`,
			want:   &TenantRouting{Policy: PolicyRoutingCost, Sort: "price"},
		},
		{
			name:   "sort only",
			tenant: `  - {id: t, api_keys_sha256: ["` + key + `"], routing: {sort: latency}}`,
			want:   &TenantRouting{Sort: "latency"},
		},
		{
			name: "unknown policy and sort, with their lines",
			tenant: `  - id: t
    api_keys_sha256: ["` + key + `"]
    routing:
      policy: fastest
      sort: cheap`,
			wantErr: []string{`line 9: tenants[0].routing.policy: "fastest" must be one of smart, routing-cost`,
				`line 10: tenants[0].routing.sort: "cheap" must be one of price, throughput, latency`},
		},
		{
			name:    "unknown field",
			tenant:  `  - {id: t, api_keys_sha256: ["` + key + `"], routing: {order: [a]}}`,
			wantErr: []string{"tenants[0].routing.order: unknown field"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tenantRoutingModels + tt.tenant + "\n"))
			if len(tt.wantErr) > 0 {
				for _, w := range tt.wantErr {
					require.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, c.Tenants[0].Routing)
		})
	}
}
