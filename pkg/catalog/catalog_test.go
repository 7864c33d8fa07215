package catalog

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const valid = `
models:
  - id: deepseek/deepseek-v4.1-flash
    list_price: {input: 0.27, cached_input: 0.07, output: 1.10}
    endpoints:
      - provider: alpha
        base_url: http://127.0.0.1:9101/v1
        upstream_model: deepseek-v4.1-flash
        api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA
        price: {input: 0.20, cached_input: 0.07, output: 0.80}
        context_length: 163840
        limits:
          - {unit: requests, per: minute, capacity: 600}
          - {unit: input_tokens, per: minute, capacity: 2000000, scope: provider_project}
      - provider: beta
        base_url: https://beta.example.com/v1
        price: {input: 0.30, output: 1.20}
tenants:
  - id: acme
    api_keys_sha256: ["` + "4c1ec8ef28b2fca5bd84e4b0a7bf4e5a5d2cf0c1e0e16b0ebd4c0fc6a7d1b2a3" + `"]
    limits:
      - {unit: input_tokens, per: minute, capacity: 100000}
      - {unit: requests, per: day, capacity: 10000}
      - {unit: concurrent_requests, capacity: 8}
      - {unit: usd, per: day, capacity: 5.0}
`

func TestParseValid(t *testing.T) {
	c, err := Parse([]byte(valid))
	require.NoError(t, err)
	require.Len(t, c.Models, 1)
	m := c.Models[0]
	require.Len(t, m.Endpoints, 2)
	require.Equal(t, "deepseek-v4.1-flash", m.Endpoints[0].UpstreamModel)
	require.Equal(t, m.ID, m.Endpoints[1].UpstreamModel, "upstream_model defaults to the model id")
	require.Equal(t, Rates{Input: 0.30, CachedInput: 0.30, Output: 1.20, CacheWrite: 0.30, CacheWrite1h: 0.30}, m.Endpoints[1].Price.Rates(),
		"cached_input and the cache writes default to input")
	require.Equal(t, APIOpenAI, m.Endpoints[0].API, "api defaults to openai")
	require.Equal(t, "model_route", m.Endpoints[0].Limits[0].Scope)
	require.Equal(t, "provider_project", m.Endpoints[0].Limits[1].Scope)
	require.Equal(t, "alpha/deepseek/deepseek-v4.1-flash", m.Endpoints[0].ID(m.ID))
	require.Equal(t, "tenant", c.Tenants[0].Limits[0].Scope)
	require.Equal(t, "allow", m.Endpoints[0].DataCollection)
}

func TestAnthropicEndpoint(t *testing.T) {
	c, err := Parse([]byte(`models:
  - id: m
    endpoints:
      - provider: a
        base_url: https://api.example.com/v1
        api: anthropic
        price: {input: 3, cached_input: 0.3, cache_write: 3.75, cache_write_1h: 6, output: 15}
`))
	require.NoError(t, err)
	e := c.Models[0].Endpoints[0]
	require.Equal(t, APIAnthropic, e.API)
	require.Equal(t, Rates{Input: 3, CachedInput: 0.3, CacheWrite: 3.75, CacheWrite1h: 6, Output: 15}, e.Price.Rates())
}

func TestParseErrors(t *testing.T) {
	tests := []parseErrorCase{
		{
			name: "empty",
			yaml: "",
			want: []string{"catalog: is empty"},
		},
		{
			name: "not yaml",
			yaml: "models: [",
			want: []string{"parse yaml"},
		},
		{
			name: "unknown field with line",
			yaml: "models:\n  - id: m\n    bogus: 1\n    endpoints: []\n",
			want: []string{"line 3: models[0].bogus: unknown field"},
		},
		{
			name: "wrong type with line",
			yaml: "models:\n  - id: m\n    endpoints:\n      - provider: a\n        base_url: http://x/v1\n        price: {input: cheap, output: 1}\n",
			want: []string{"line 6", "cheap"},
		},
		{
			name: "every semantic problem at once",
			yaml: `models:
  - id: m
    endpoints:
      - provider: Alpha
        base_url: ftp://x
        price: {input: -1}
        limits:
          - {unit: bananas, per: fortnight, capacity: 0}
          - {unit: concurrent_requests, per: minute, capacity: 2}
  - id: m
    endpoints: []
tenants:
  - id: t
    api_keys_sha256: [nothex]
`,
			want: []string{
				`line 4: models[0].endpoints[0].provider: "Alpha" must be lowercase`,
				"line 5: models[0].endpoints[0].base_url: scheme must be http or https",
				"line 6: models[0].endpoints[0].price.input: must be a non-negative number",
				"models[0].endpoints[0].price.output: is required",
				`line 8: models[0].endpoints[0].limits[0].unit: "bananas" must be one of`,
				`models[0].endpoints[0].limits[0].per: "fortnight" must be one of`,
				"models[0].endpoints[0].limits[0].capacity: must be a positive number",
				"line 9: models[0].endpoints[0].limits[1].per: concurrent_requests has no window",
				`line 10: models[1].id: "m" is already defined at models[0]`,
				"models[1].endpoints: at least one endpoint is required",
				"line 14: tenants[0].api_keys_sha256[0]: must be 64 lowercase hex digits",
			},
		},
		{
			name: "api and cache-write prices",
			yaml: "models:\n  - id: m\n    endpoints:\n      - provider: a\n        base_url: http://x/v1\n        api: gemini\n" +
				"        price: {input: 1, output: 1, cache_write: -2, cache_write_1h: .nan}\n",
			want: []string{
				`line 6: models[0].endpoints[0].api: "gemini" must be one of openai, anthropic`,
				"line 7: models[0].endpoints[0].price.cache_write: must be a non-negative number",
				"line 7: models[0].endpoints[0].price.cache_write_1h: must be a non-negative number",
			},
		},
		{
			name: "credentials in url",
			yaml: "models:\n  - id: m\n    endpoints:\n      - {provider: a, base_url: 'http://u:p@x/v1', price: {input: 1, output: 1}}\n",
			want: []string{"must not carry credentials"},
		},
		{
			name: "duplicate provider and key",
			yaml: `models:
  - id: m
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}
      - {provider: a, base_url: http://y/v1, price: {input: 1, output: 1}}
tenants:
  - {id: t, api_keys_sha256: [` + strings.Repeat("a", 64) + `]}
  - {id: u, api_keys_sha256: [` + strings.Repeat("a", 64) + `]}
`,
			want: []string{`"a" already serves this model`, "key is already used by tenants[0]"},
		},
		{
			// The edge holds more than provider keys in its environment:
			// a catalog must not be able to name any of it.
			name: "credential outside the provider key namespace",
			yaml: `models:
  - id: m
    endpoints:
      - {provider: a, base_url: https://evil.example/v1, api_key_env: AWS_SECRET_ACCESS_KEY, price: {input: 1, output: 1}}
      - {provider: b, base_url: https://b.example/v1, api_key_env: SWITCHBOARD_PROVIDER_KEY_, price: {input: 1, output: 1}}
      - {provider: c, base_url: https://c.example/v1, api_key_env: SWITCHBOARD_PROVIDER_KEY_c-1, price: {input: 1, output: 1}}
`,
			want: []string{
				`line 4: models[0].endpoints[0].api_key_env: "AWS_SECRET_ACCESS_KEY" (endpoint a/m) must be SWITCHBOARD_PROVIDER_KEY_ followed by A-Z, 0-9 or _`,
				`line 5: models[0].endpoints[1].api_key_env: "SWITCHBOARD_PROVIDER_KEY_" (endpoint b/m) must be`,
				`line 6: models[0].endpoints[2].api_key_env: "SWITCHBOARD_PROVIDER_KEY_c-1" (endpoint c/m) must be`,
			},
		},
		{
			name: "suffix in model id",
			yaml: "models:\n  - id: m:floor\n    endpoints:\n      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}\n",
			want: []string{"must not contain spaces or ':'"},
		},
	}
	requireParseErrors(t, tests)
}

// parseErrorCase is a catalog Parse must refuse and what its error says.
type parseErrorCase struct {
	name string
	yaml string
	want []string // each must appear in the error
}

func requireParseErrors(t *testing.T, tests []parseErrorCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestErrorsAreTyped(t *testing.T) {
	_, err := Parse([]byte("models:\n  - id: m\n    endpoints: []\n"))
	var ce *Error
	require.True(t, errors.As(err, &ce))
	require.Equal(t, 3, ce.Line)
	require.Equal(t, "models[0].endpoints", ce.Field)
}

func TestHashKey(t *testing.T) {
	h := HashKey("sk-demo")
	require.Len(t, h, 64)
	require.Equal(t, "key-"+h[:12], KeyID(h))
	require.NotEqual(t, h, HashKey("sk-demo2"))
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte(aliasCatalog))
	f.Add([]byte("models: [{id: m, endpoints: [{provider: a}]}]"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err == nil && len(c.Models) == 0 {
			t.Fatal("a valid catalog has models")
		}
	})
}

func TestBrokerFields(t *testing.T) {
	ok := `
models:
  - id: m
    endpoints:
      - provider: a
        base_url: http://x/v1
        price: {input: 1, output: 1}
        provider_project: proj-1
        limits:
          - {unit: requests, per: day, capacity: 1000, reset_at: "07:00"}
          - {unit: input_tokens, per: minute, capacity: 100000, scope: provider_project, ramp: {max_increase: 0.5, floor: 1000, period: 1m}}
partners:
  - id: resell
    limits: [{unit: usd, per: day, capacity: 50}]
tenants:
  - id: t
    partner: resell
    api_keys_sha256: [` + strings.Repeat("b", 64) + `]
    limits:
      - {unit: requests, per: minute, capacity: 10, scope: app, scope_key: chat/prod}
      - {unit: requests, per: minute, capacity: 5, scope: api_key}
`
	c, err := Parse([]byte(ok))
	require.NoError(t, err)
	require.Equal(t, "proj-1", c.Models[0].Endpoints[0].ProviderProject)
	require.Equal(t, "a", c.Models[0].Endpoints[0].ProviderWorkspace, "defaults to the provider")
	require.Equal(t, "partner", c.Partners[0].Limits[0].Scope)

	bad := `
models:
  - id: m
    endpoints:
      - provider: a
        base_url: http://x/v1
        price: {input: 1, output: 1}
        limits:
          - {unit: requests, per: minute, capacity: 10, reset_at: "07:00"}
          - {unit: requests, per: day, capacity: 10, reset_at: "25:99"}
          - {unit: requests, per: minute, capacity: 10, ramp: {max_increase: 0, period: soon}}
          - {unit: requests, per: minute, capacity: 10, scope: tenant}
tenants:
  - id: t
    partner: nobody
    api_keys_sha256: [` + strings.Repeat("c", 64) + `]
    limits:
      - {unit: requests, per: minute, capacity: 10, scope: app}
      - {unit: requests, per: minute, capacity: 10, scope: provider_project}
`
	_, err = Parse([]byte(bad))
	require.Error(t, err)
	for _, want := range []string{
		"limits[0].reset_at: only a per: day limit has a reset time",
		`limits[1].reset_at: "25:99" must be a UTC time of day`,
		"limits[2].ramp.max_increase: must be a positive fraction",
		`limits[2].ramp.period: "soon" must be a positive duration`,
		`endpoints[0].limits[3].scope: "tenant" is not an endpoint scope`,
		`tenants[0].partner: "nobody" is not a partner`,
		"tenants[0].limits[0].scope_key: is required with scope app",
		`tenants[0].limits[1].scope: "provider_project" is not a tenant scope`,
	} {
		require.Contains(t, err.Error(), want)
	}
}

func TestCallers(t *testing.T) {
	h1, h2 := HashKey("token-1"), HashKey("token-2")
	good := valid + `
callers:
  - {id: edges, role: edge, tokens_sha256: ["` + h1 + `"]}
  - {id: billing, role: service, tenants: [acme], tokens_sha256: ["` + h2 + `"]}
  - {id: all, role: service, tenants: ["*"], shared_provider_state: true}
  - {id: replicas, role: replica}
  - {id: ops, role: operator}
`
	c, err := Parse([]byte(good))
	require.NoError(t, err)
	require.Len(t, c.Callers, 5)
	require.Equal(t, Caller{ID: "billing", Role: RoleService, Tenants: []string{"acme"}, TokensSHA256: []string{h2}}, c.Callers[1])
	require.True(t, c.Callers[2].SharedProviderState)

	tests := []struct {
		name    string
		callers string
		want    []string
	}{
		{"missing id", `[{role: edge}]`, []string{"callers[0].id: is required"}},
		{"duplicate id", `[{id: a, role: edge}, {id: a, role: operator}]`, []string{`callers[1].id: "a" is already defined at callers[0]`}},
		{"bad role", `[{id: a, role: admin}]`, []string{`callers[0].role: "admin" must be one of edge, service, replica, operator`}},
		{"service without tenants", `[{id: a, role: service}]`, []string{"callers[0].tenants: a service caller must name the tenants"}},
		{"tenants on an edge", `[{id: a, role: edge, tenants: [acme]}]`, []string{"callers[0].tenants: only a service caller has tenants"}},
		{"shared provider state on an edge", `[{id: a, role: edge, shared_provider_state: true}]`,
			[]string{"callers[0].shared_provider_state: only a service caller takes it"}},
		{"unknown tenant", `[{id: a, role: service, tenants: [acme, globex]}]`, []string{`callers[0].tenants[1]: "globex" is not a tenant`}},
		{"not a digest", `[{id: a, role: edge, tokens_sha256: ["ABC"]}]`, []string{"callers[0].tokens_sha256[0]: must be 64 lowercase hex digits"}},
		{"shared token", `[{id: a, role: edge, tokens_sha256: ["` + h1 + `"]}, {id: b, role: operator, tokens_sha256: ["` + h1 + `"]}]`,
			[]string{"callers[1].tokens_sha256[0]: token is already used by callers[0]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(valid + "callers: " + tt.callers + "\n"))
			require.Error(t, err)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// shared_provider_state is a service's alone, and its error names its line.
func TestSharedProviderStateIsAService(t *testing.T) {
	y := valid + "callers:\n  - id: ops\n    role: operator\n    shared_provider_state: true\n"
	_, err := Parse([]byte(y))
	require.Error(t, err)
	line := strings.Count(valid, "\n") + 4
	require.Contains(t, err.Error(), fmt.Sprintf("line %d: callers[0].shared_provider_state: only a service caller takes it", line))
}

func TestKeyPrefix(t *testing.T) {
	h := HashKey("sk-test")
	p, err := KeyPrefix(h)
	require.NoError(t, err)
	require.Equal(t, h[:16], fmt.Sprintf("%016x", p))
	_, err = KeyPrefix("abc")
	require.Error(t, err)
}
