package routing

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

var keyA = catalog.HashKey("sk-a")

const testCatalog = `
models:
  - id: vendor/model
    list_price: {input: 0.27, cached_input: 0.07, output: 1.10}
    endpoints:
      - provider: alpha
        base_url: http://127.0.0.1:1/v1
        api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA
        price: {input: 0.20, cached_input: 0.07, output: 0.80}
        context_length: 100000
        quantization: fp8
      - provider: beta
        base_url: http://127.0.0.1:2/v1
        price: {input: 0.30, cached_input: 0.0013, output: 1.00}
        context_length: 200000
        quantization: bf16
        zdr: true
        data_collection: deny
        supported_parameters: [tools, response_format]
      - provider: gamma
        base_url: http://127.0.0.1:3/v1
        price: {input: 0.25, output: 0.90}
        quantization: fp8
        supported_parameters: [tools]
tenants:
  - id: acme
    api_keys_sha256: ["@KEYHASH@"]
`

func newTestRouter(t *testing.T) *Router {
	t.Helper()
	c, err := catalog.Parse([]byte(strings.Replace(testCatalog, "@KEYHASH@", keyA, 1)))
	require.NoError(t, err)
	return New(c, Options{Exploration: -1})
}

func ptr[T any](v T) *T { return &v }

func TestDecide(t *testing.T) {
	r := newTestRouter(t)
	id := &switchboardv1.Identity{TenantId: "acme"}
	tests := []struct {
		name      string
		req       *switchboardv1.DecideRequest
		want      []string // chosen provider then fallbacks
		reason    switchboardv1.RouteReason
		wantKind  Kind
		wantErr   string
		wantCost  float64 // of the chosen endpoint, if non-zero
		wantCache int64
	}{
		{
			name:     "cheapest for a short uncached prompt",
			req:      &switchboardv1.DecideRequest{Model: "vendor/model", Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 100}},
			want:     []string{"alpha", "gamma", "beta"},
			reason:   switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
			wantCost: (1000*0.20 + 100*0.80) / 1e6,
		},
		{
			name: "cached input price decides a long cached prompt",
			req: &switchboardv1.DecideRequest{Model: "vendor/model", Tokens: &switchboardv1.TokenEstimate{
				InputTokens: 90000, CachedInputTokens: 88000, MaxOutputTokens: 100}},
			want:      []string{"beta", "alpha", "gamma"},
			reason:    switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
			wantCost:  (2000*0.30 + 88000*0.0013 + 100*1.00) / 1e6,
			wantCache: 88000,
		},
		{
			name:   "context length excludes alpha",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model", Tokens: &switchboardv1.TokenEstimate{InputTokens: 150000}},
			want:   []string{"gamma", "beta"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
		},
		{
			name:     "prompt too large for every endpoint",
			req:      &switchboardv1.DecideRequest{Model: "vendor/model", Tokens: &switchboardv1.TokenEstimate{InputTokens: 150000}, Provider: &switchboardv1.ProviderPreferences{Only: []string{"alpha"}}},
			wantKind: KindUnavailable,
			wantErr:  "not in provider.only",
		},
		{
			name:   "order",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{Order: []string{"beta", "gamma"}}},
			want:   []string{"beta", "gamma", "alpha"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_USER_ORDER,
		},
		{
			name:   "order without fallbacks",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{Order: []string{"beta", "gamma"}, AllowFallbacks: ptr(false)}},
			want:   []string{"beta", "gamma"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_USER_ORDER,
		},
		{
			name:   "no fallbacks",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{AllowFallbacks: ptr(false)}},
			want:   []string{"alpha"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
		},
		{
			name:   "only",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{Only: []string{"gamma", "beta"}}},
			want:   []string{"gamma", "beta"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
		},
		{
			name:   "ignore",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{Ignore: []string{"alpha"}}},
			want:   []string{"gamma", "beta"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
		},
		{
			name:   "max_price filters",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{MaxPrice: &switchboardv1.MaxPrice{Prompt: ptr(0.26), Completion: ptr(0.85)}}},
			want:   []string{"alpha"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
		},
		{
			name:     "max_price excludes all",
			req:      &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{MaxPrice: &switchboardv1.MaxPrice{Prompt: ptr(0.1)}}},
			wantKind: KindUnavailable,
			wantErr:  "above max_price.prompt",
		},
		{
			name:   "zdr",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{Zdr: true}},
			want:   []string{"beta"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
		},
		{
			name:   "data collection deny",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{DataCollection: switchboardv1.DataCollection_DATA_COLLECTION_DENY}},
			want:   []string{"beta"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
		},
		{
			name:   "quantizations",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{Quantizations: []string{"bf16"}}},
			want:   []string{"beta"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
		},
		{
			name:   "require_parameters",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model", Parameters: []string{"tools"}, Provider: &switchboardv1.ProviderPreferences{RequireParameters: true}},
			want:   []string{"gamma", "beta"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
		},
		{
			name:   "floor suffix",
			req:    &switchboardv1.DecideRequest{Model: "vendor/model:floor"},
			want:   []string{"alpha", "gamma", "beta"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_FLOOR,
		},
		{name: "unknown model", req: &switchboardv1.DecideRequest{Model: "nope"}, wantKind: KindNotFound, wantErr: `model "nope" does not exist`},
		{name: "empty model", req: &switchboardv1.DecideRequest{}, wantKind: KindInvalid, wantErr: "model is required"},
		{name: "bad suffix", req: &switchboardv1.DecideRequest{Model: "vendor/model:turbo"}, wantKind: KindInvalid, wantErr: `unknown model suffix ":turbo"`},
		{name: "unknown provider", req: &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{Order: []string{"zeta"}}}, wantKind: KindInvalid, wantErr: `provider.order: unknown provider "zeta"`},
		{name: "negative max price", req: &switchboardv1.DecideRequest{Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{MaxPrice: &switchboardv1.MaxPrice{Completion: ptr(-1.0)}}}, wantKind: KindInvalid, wantErr: "max_price.completion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := r.Decide(tt.req, id)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Equal(t, tt.wantKind, err.(*Error).Kind)
				return
			}
			require.NoError(t, err)
			got := []string{resp.Endpoint.Provider}
			for _, f := range resp.Fallbacks {
				got = append(got, f.Provider)
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.reason, resp.Decision.Reason)
			require.Equal(t, "vendor/model", resp.Model)
			require.Len(t, resp.Decision.Candidates, 1, "without explain only the winner is described")
			if tt.wantCost != 0 {
				require.InDelta(t, tt.wantCost, resp.Endpoint.EstimatedCostUsd, 1e-12)
			}
			require.Equal(t, tt.wantCache, resp.Decision.Candidates[0].EstimatedCachedTokens)
			require.Contains(t, resp.Decision.Summary, "provider="+got[0])
		})
	}
}

func TestDecideExplainAndCredentials(t *testing.T) {
	r := newTestRouter(t)
	resp, err := r.Decide(&switchboardv1.DecideRequest{Model: "vendor/model", Explain: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: 40000},
		Provider: &switchboardv1.ProviderPreferences{Ignore: []string{"beta"}}}, &switchboardv1.Identity{TenantId: "acme"})
	require.NoError(t, err)
	require.Len(t, resp.Decision.Candidates, 3)
	require.Equal(t, switchboardv1.SizeBucket_SIZE_BUCKET_32K_TO_128K, resp.Decision.Bucket)
	notes := map[string]string{}
	for _, c := range resp.Decision.Candidates {
		notes[c.Provider] = c.Note
	}
	require.Equal(t, "in provider.ignore", notes["beta"])
	require.Equal(t, "SWITCHBOARD_PROVIDER_KEY_ALPHA", resp.Endpoint.ApiKeyEnv, "the edge gets the variable's name, never a secret")

	// The endpoint template must not be mutated by a request.
	resp.Endpoint.BaseUrl = "http://evil"
	again, err := r.Decide(&switchboardv1.DecideRequest{Model: "vendor/model"}, &switchboardv1.Identity{TenantId: "acme"})
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:1/v1", again.Endpoint.BaseUrl)
}

func TestCatalogSwaps(t *testing.T) {
	var cur atomic.Pointer[Index]
	r := newTestRouter(t)
	cur.Store(r.o.Catalog())
	r.o.Catalog = cur.Load
	c, err := catalog.Parse([]byte(`
models:
  - id: other
    endpoints: [{provider: delta, base_url: http://x/v1, price: {input: 1, output: 1}}]
`))
	require.NoError(t, err)
	cur.Store(NewIndex(c, Sources{Stats: r.o.Stats, Outcomes: r.o.Outcomes}))
	_, err = r.Decide(&switchboardv1.DecideRequest{Model: "vendor/model"}, nil)
	require.Equal(t, KindNotFound, err.(*Error).Kind)
	require.Len(t, r.ListModels(), 1)
	got := proto.CloneOf(r.ListModels()[0])
	require.NotNil(t, got.GetCreateTime(), "a model listed for the first time is stamped")
	got.CreateTime = nil
	require.True(t, proto.Equal(&switchboardv1.Model{Id: "other", Providers: []string{"delta"}}, got))
}

// TestListModelsCreateTime: a model's create_time is when the router first
// listed it; a reload keeps it for the models it listed already and stamps
// the new ones with the reload's time.
func TestListModelsCreateTime(t *testing.T) {
	t0 := time.Date(2026, 10, 28, 9, 0, 0, 0, time.UTC)
	now := t0
	parse := func(ids ...string) *catalog.Catalog {
		var b strings.Builder
		b.WriteString("models:\n")
		for _, id := range ids {
			b.WriteString("  - id: " + id + "\n    endpoints: [{provider: delta, base_url: http://x/v1, price: {input: 1, output: 1}}]\n")
		}
		c, err := catalog.Parse([]byte(b.String()))
		require.NoError(t, err)
		return c
	}
	created := func(r *Router) map[string]time.Time {
		out := map[string]time.Time{}
		for _, m := range r.ListModels() {
			out[m.GetId()] = m.GetCreateTime().AsTime()
		}
		return out
	}
	clock := func() time.Time { return now }
	src := Sources{Stamps: NewStamps(clock)}
	var cur atomic.Pointer[Index]
	cur.Store(NewIndex(parse("org/a", "org/b"), src))
	r := New(nil, Options{Exploration: -1, Now: clock, Catalog: cur.Load})
	require.Equal(t, map[string]time.Time{"org/a": t0, "org/b": t0}, created(r))

	now = t0.Add(time.Hour)
	cur.Store(NewIndex(parse("org/a", "org/c"), src))
	require.Equal(t, map[string]time.Time{"org/a": t0, "org/c": t0.Add(time.Hour)}, created(r), "org/a kept, org/c new")

	now = t0.Add(2 * time.Hour)
	cur.Store(NewIndex(parse("org/a", "org/b"), src))
	require.Equal(t, t0.Add(2*time.Hour), created(r)["org/b"], "a model dropped and listed again is new again")
}
