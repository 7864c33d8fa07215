package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

func TestFromCatalogClasses(t *testing.T) {
	yaml := `
models:
  - id: big
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}
  - id: small
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 0.1, output: 0.1}}
workload_classes:
  interactive: {max_wait: 1s, max_depth: 8, overload: fallback, fallback_model: small}
  batch: {retry_budget: 0, weight: 0.5}
tenants:
  - {id: acme, api_keys_sha256: ["` + strings.Repeat("a", 64) + `"], weight: 3, burst: 12}
  - {id: globex, api_keys_sha256: ["` + strings.Repeat("b", 64) + `"]}
`
	c, err := catalog.Parse([]byte(yaml))
	require.NoError(t, err)
	cfg, err := FromCatalog(c)
	require.NoError(t, err)
	require.Equal(t, []ClassContract{
		{Class: ClassInteractive, MaxWait: time.Second, MaxDepth: 8, Overload: OverloadFallback, FallbackModel: "small", Weight: 4, RetryBudget: 2},
		{Class: ClassBackground, MaxWait: 2 * time.Minute, MaxDepth: 10_000, Weight: 2, RetryBudget: 5},
		{Class: ClassPartner, MaxWait: 10 * time.Second, MaxDepth: 256, Weight: 3, RetryBudget: 2},
		{Class: ClassBatch, MaxWait: 30 * time.Minute, MaxDepth: 100_000, Weight: 0.5, RetryBudget: -1},
	}, cfg.Classes, "every class has a contract; a budget of 0 retries is none, not unset")
	require.Equal(t, []TenantShare{{Tenant: "acme", Weight: 3, Burst: 12}, {Tenant: "globex", Weight: 1}}, cfg.Tenants)

	b := newTestBrokerFromConfig(t, cfg)
	require.NoError(t, b.Reconfigure(cfg), "a catalog's classes reconfigure a running broker")
}

func TestParseClass(t *testing.T) {
	for i, name := range catalog.Classes {
		cls, err := ParseClass(name)
		require.NoError(t, err)
		require.Equal(t, WorkloadClass(i+1), cls, "the catalog's order is the proto's")
	}
	_, err := ParseClass("urgent")
	require.ErrorIs(t, err, ErrInvalid)
}

func newTestBrokerFromConfig(t *testing.T, cfg Config) *Broker {
	t.Helper()
	b, err := New(cfg, Options{})
	require.NoError(t, err)
	return b
}
