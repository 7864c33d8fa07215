package routing

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/affinity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
)

// The policy catalog: cheap is the cheapest, fast costs more, reseller has
// cheap uncached input but an expensive cached-input price.
const policyCatalog = `
models:
  - id: m
    list_price: {input: 1.00, cached_input: 0.25, output: 4.00}
    endpoints:
      - {provider: cheap,    base_url: http://127.0.0.1:1/v1, price: {input: 0.20, cached_input: 0.05,   output: 0.80}}
      - {provider: fast,     base_url: http://127.0.0.1:2/v1, price: {input: 0.30, cached_input: 0.0013, output: 1.10}}
      - {provider: reseller, base_url: http://127.0.0.1:3/v1, price: {input: 0.25, cached_input: 0.07,   output: 1.00}}
tenants:
  - {id: acme, api_keys_sha256: ["0000000000000000000000000000000000000000000000000000000000000000"]}
`

type policyEnv struct {
	model string
	now   time.Time
	stats *stats.Store
	aff   *affinity.Table
	cool  *cooldown.Tracker
	r     *Router
}

func newPolicy(t testing.TB, yaml string, o Options) *policyEnv {
	t.Helper()
	c, err := catalog.Parse([]byte(yaml))
	require.NoError(t, err)
	e := &policyEnv{model: "m", now: time.Unix(1_800_000_000, 0)}
	clock := func() time.Time { return e.now }
	e.stats = stats.New(stats.Config{Now: clock})
	e.aff = affinity.New(affinity.Options{})
	e.cool = cooldown.New(cooldown.FirstRefusal) // one refusal benches
	o.Stats, o.Affinity, o.Cooldown, o.Now = e.stats, e.aff, e.cool, clock
	if o.Exploration == 0 {
		o.Exploration = -1
	}
	if o.Seed == 0 {
		o.Seed = 42
	}
	e.r = New(c, o)
	return e
}

// speed records n TTFT samples of d for provider in the bucket of prompt size in.
func (e *policyEnv) speed(provider string, in int64, d time.Duration, n int) {
	for range n {
		e.stats.ObserveTTFT(provider+"/"+e.model, tokens.BucketOf(in), d, e.now)
	}
}

func (e *policyEnv) decide(t *testing.T, req *switchboardv1.DecideRequest) *switchboardv1.DecideResponse {
	t.Helper()
	if req.Model == "" {
		req.Model = "m"
	}
	resp, err := e.r.Decide(req, &switchboardv1.Identity{TenantId: "acme"})
	require.NoError(t, err)
	return resp
}

func order(resp *switchboardv1.DecideResponse) []string {
	out := []string{resp.Endpoint.Provider}
	for _, f := range resp.Fallbacks {
		out = append(out, f.Provider)
	}
	return out
}

const short, long, huge = int64(1000), int64(60 * 1024), int64(150 * 1024)

func TestSmartPolicy(t *testing.T) {
	tests := []struct {
		name   string
		warm   func(e *policyEnv)
		req    *switchboardv1.DecideRequest
		want   []string
		reason switchboardv1.RouteReason
	}{
		{
			name:   "no speed data, cheapest",
			warm:   func(*policyEnv) {},
			req:    &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: long}},
			want:   []string{"cheap", "reseller", "fast"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA,
		},
		{
			name: "within 2x of the fastest qualifies, cheapest qualifying wins",
			warm: func(e *policyEnv) {
				e.speed("cheap", long, 2900*time.Millisecond, 12)
				e.speed("fast", long, 1500*time.Millisecond, 12)
				e.speed("reseller", long, 1600*time.Millisecond, 12)
			},
			req:    &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: long}},
			want:   []string{"cheap", "reseller", "fast"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING,
		},
		{
			name: "the cheap one is too slow for long prompts",
			warm: func(e *policyEnv) {
				e.speed("cheap", long, 15*time.Second, 12)
				e.speed("fast", long, 1500*time.Millisecond, 12)
				e.speed("reseller", long, 5*time.Second, 12)
			},
			req:    &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: long}},
			want:   []string{"fast", "cheap", "reseller"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING,
		},
		{
			name: "under 1 s qualifies even when 9x slower",
			warm: func(e *policyEnv) {
				e.speed("cheap", short, 900*time.Millisecond, 12)
				e.speed("fast", short, 100*time.Millisecond, 12)
			},
			req:    &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: short}},
			want:   []string{"cheap", "fast", "reseller"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING,
		},
		{
			name: "buckets are judged separately",
			warm: func(e *policyEnv) {
				e.speed("cheap", short, 300*time.Millisecond, 12)
				e.speed("fast", short, 200*time.Millisecond, 12)
				e.speed("cheap", huge, 34*time.Second, 12)
				e.speed("fast", huge, 2*time.Second, 12)
			},
			req:    &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: huge}},
			want:   []string{"fast", "cheap", "reseller"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING,
		},
		{
			name: "one very slow call does not disqualify a good provider",
			warm: func(e *policyEnv) {
				e.speed("cheap", long, 1200*time.Millisecond, 12)
				e.speed("cheap", long, 60*time.Second, 1)
				e.speed("fast", long, 1000*time.Millisecond, 12)
			},
			req:    &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: long}},
			want:   []string{"cheap", "fast", "reseller"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING,
		},
		{
			name: "a fast endpoint above the usual price and not half the list price does not win for speed",
			warm: func(e *policyEnv) {
				e.speed("cheap", long, 15*time.Second, 12)
				e.speed("reseller", long, 15*time.Second, 12)
				e.speed("fast", long, 1*time.Second, 12)
			},
			// A list price barely above fast's price: fast is the most
			// expensive (above the usual price) and not 50% under list.
			req:    &switchboardv1.DecideRequest{Model: "m2", Tokens: &switchboardv1.TokenEstimate{InputTokens: long, MaxOutputTokens: 100}},
			want:   []string{"cheap", "reseller", "fast"},
			reason: switchboardv1.RouteReason_ROUTE_REASON_PRICE_GUARD,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := policyCatalog
			if tt.req.Model == "m2" {
				y = `
models:
  - id: m2
    list_price: {input: 0.35, cached_input: 0.1, output: 1.2}
    endpoints:
      - {provider: cheap,    base_url: http://127.0.0.1:1/v1, price: {input: 0.20, cached_input: 0.05, output: 0.80}}
      - {provider: fast,     base_url: http://127.0.0.1:2/v1, price: {input: 0.30, cached_input: 0.05, output: 1.10}}
      - {provider: reseller, base_url: http://127.0.0.1:3/v1, price: {input: 0.25, cached_input: 0.05, output: 1.00}}
`
			}
			e := newPolicy(t, y, Options{})
			if tt.req.Model == "m2" {
				e.model = "m2"
			}
			tt.warm(e)
			resp, err := e.r.Decide(withModel(tt.req), nil)
			require.NoError(t, err)
			require.Equal(t, tt.want, order(resp))
			require.Equal(t, tt.reason, resp.Decision.Reason, resp.Decision.Summary)
		})
	}
}

func withModel(r *switchboardv1.DecideRequest) *switchboardv1.DecideRequest {
	if r.Model == "" {
		r.Model = "m"
	}
	return r
}

func TestPriceGuardAllowsHalfListPrice(t *testing.T) {
	// With the list price at 1.00 input, fast (0.30) is above the usual
	// price but well under half the list price: it may win for speed.
	e := newPolicy(t, policyCatalog, Options{})
	e.speed("cheap", long, 15*time.Second, 12)
	e.speed("reseller", long, 15*time.Second, 12)
	e.speed("fast", long, time.Second, 12)
	resp := e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: long}})
	require.Equal(t, "fast", resp.Endpoint.Provider)
	require.Equal(t, switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING, resp.Decision.Reason)
}

func TestCachePricing(t *testing.T) {
	e := newPolicy(t, policyCatalog, Options{})
	for _, p := range []string{"cheap", "fast", "reseller"} {
		e.speed(p, long, time.Second, 12) // all fast enough
	}
	// The conversation's previous turn (hash 7, 60000 tokens) was served by
	// fast and by the reseller: both hold it in cache.
	e.aff.Record("fast/m", 7, 60000, e.now)
	e.aff.Record("reseller/m", 7, 60000, e.now)
	req := &switchboardv1.DecideRequest{Explain: true, Tokens: &switchboardv1.TokenEstimate{
		InputTokens: long, MaxOutputTokens: 100,
		Prefixes: []*switchboardv1.PromptPrefix{{Hash: 3, Tokens: 2000}, {Hash: 7, Tokens: 60000}},
	}}
	resp := e.decide(t, req)
	require.Equal(t, "fast", resp.Endpoint.Provider, "a long cached prompt avoids the reseller's expensive cache reads")
	byProvider := map[string]*switchboardv1.Candidate{}
	for _, c := range resp.Decision.Candidates {
		byProvider[c.Provider] = c
	}
	require.Equal(t, int64(60000), byProvider["fast"].EstimatedCachedTokens)
	require.Equal(t, int64(60000), byProvider["reseller"].EstimatedCachedTokens)
	require.Zero(t, byProvider["cheap"].EstimatedCachedTokens, "cheap never saw this conversation")
	want := (float64(long-60000)*0.30 + 60000*0.0013 + 100*1.10) / 1e6
	require.InDelta(t, want, byProvider["fast"].CostUsd, 1e-12, "uncached, cached and output priced separately")

	// Without affinity, the observed cache-hit rate is used.
	e.stats.ObserveCache("reseller/m", 1000, 900, e.now)
	resp = e.decide(t, &switchboardv1.DecideRequest{Explain: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: 10000, MaxOutputTokens: 1}})
	for _, c := range resp.Decision.Candidates {
		if c.Provider == "reseller" {
			require.Equal(t, int64(9000), c.EstimatedCachedTokens)
		}
	}
}

func TestTypicalOutputIsPriced(t *testing.T) {
	e := newPolicy(t, policyCatalog, Options{})
	resp := e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: 0}})
	require.InDelta(t, DefaultOutputTokens*0.80/1e6, resp.Endpoint.EstimatedCostUsd, 1e-12)
	for range 5 {
		e.stats.ObserveOutput("m", 1000, e.now)
	}
	resp = e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: 0}})
	require.InDelta(t, 1000*0.80/1e6, resp.Endpoint.EstimatedCostUsd, 1e-12)
}

func TestExploration(t *testing.T) {
	e := newPolicy(t, policyCatalog, Options{Exploration: 0.05, Seed: 7})
	// cheap and fast are well known; the reseller has too little data.
	e.speed("cheap", short, 300*time.Millisecond, 20)
	e.speed("fast", short, 200*time.Millisecond, 20)
	e.speed("reseller", short, 200*time.Millisecond, 3)
	explored := 0
	const n = 20000
	for range n {
		resp := e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: short}})
		if resp.Decision.Reason == switchboardv1.RouteReason_ROUTE_REASON_EXPLORATION {
			require.Equal(t, "reseller", resp.Endpoint.Provider, "only endpoints with too little data are explored")
			explored++
		}
	}
	require.InDelta(t, 0.05, float64(explored)/n, 0.01)

	// Same seed, same sequence: reproducible.
	a := newPolicy(t, policyCatalog, Options{Exploration: 0.5, Seed: 99})
	b := newPolicy(t, policyCatalog, Options{Exploration: 0.5, Seed: 99})
	for range 50 {
		ra := a.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: short}})
		rb := b.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: short}})
		require.Equal(t, order(ra), order(rb))
	}

	// A dry run never explores.
	d := newPolicy(t, policyCatalog, Options{Exploration: 0.99})
	for range 50 {
		resp := d.decide(t, &switchboardv1.DecideRequest{DryRun: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: short}})
		require.NotEqual(t, switchboardv1.RouteReason_ROUTE_REASON_EXPLORATION, resp.Decision.Reason)
	}

	// Once everyone has enough data, nothing is explored.
	e.speed("reseller", short, 200*time.Millisecond, 20)
	for range 1000 {
		resp := e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: short}})
		require.NotEqual(t, switchboardv1.RouteReason_ROUTE_REASON_EXPLORATION, resp.Decision.Reason)
	}
}

func TestCooldown(t *testing.T) {
	e := newPolicy(t, policyCatalog, Options{})
	e.cool.Refused("cheap/m", e.now)
	resp := e.decide(t, &switchboardv1.DecideRequest{Explain: true})
	require.Equal(t, []string{"reseller", "fast", "cheap"}, order(resp),
		"a refusing endpoint is not chosen; it stays behind the others as a last fallback")
	for _, c := range resp.Decision.Candidates {
		if c.Provider == "cheap" {
			require.Contains(t, c.Note, "cooling down until")
		}
	}

	// Two of three cooling: the fallbacks still hold more than one endpoint,
	// so one failure of the healthy one is not the end of the request.
	e.cool.Refused("reseller/m", e.now)
	resp = e.decide(t, &switchboardv1.DecideRequest{})
	require.Equal(t, []string{"fast", "cheap", "reseller"}, order(resp))
	e.cool.Expire(e.now.Add(15 * time.Minute))

	e.now = e.now.Add(15 * time.Minute)
	resp = e.decide(t, &switchboardv1.DecideRequest{})
	require.Equal(t, "cheap", resp.Endpoint.Provider, "tried again after 15 minutes")

	// Everyone cooling: they come back as a last resort instead of a refusal.
	for _, p := range []string{"cheap", "fast", "reseller"} {
		e.cool.Refused(p+"/m", e.now)
	}
	resp = e.decide(t, &switchboardv1.DecideRequest{Explain: true})
	require.Equal(t, []string{"cheap", "reseller", "fast"}, order(resp))
	require.Contains(t, resp.Decision.Candidates[0].Note, "cooling down until")
}

func TestOverridesWithSpeedData(t *testing.T) {
	e := newPolicy(t, policyCatalog, Options{})
	e.speed("cheap", long, 15*time.Second, 12)
	e.speed("fast", long, 1*time.Second, 12)
	e.speed("reseller", long, 3*time.Second, 12)
	for p, tps := range map[string]float64{"cheap": 20, "fast": 90, "reseller": 60} {
		e.stats.ObserveThroughput(p+"/m", tps, e.now)
	}
	tests := []struct {
		name   string
		req    *switchboardv1.DecideRequest
		want   []string
		reason switchboardv1.RouteReason
	}{
		{"sort latency", &switchboardv1.DecideRequest{Provider: &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_LATENCY}}, []string{"fast", "reseller", "cheap"}, switchboardv1.RouteReason_ROUTE_REASON_USER_SORT},
		{"sort throughput", &switchboardv1.DecideRequest{Provider: &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_THROUGHPUT}}, []string{"fast", "reseller", "cheap"}, switchboardv1.RouteReason_ROUTE_REASON_USER_SORT},
		{"sort price bypasses speed", &switchboardv1.DecideRequest{Provider: &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_PRICE}}, []string{"cheap", "reseller", "fast"}, switchboardv1.RouteReason_ROUTE_REASON_USER_SORT},
		{":nitro", &switchboardv1.DecideRequest{Model: "m:nitro"}, []string{"fast", "reseller", "cheap"}, switchboardv1.RouteReason_ROUTE_REASON_NITRO},
		{":floor", &switchboardv1.DecideRequest{Model: "m:floor"}, []string{"cheap", "reseller", "fast"}, switchboardv1.RouteReason_ROUTE_REASON_FLOOR},
		{"order bypasses speed", &switchboardv1.DecideRequest{Provider: &switchboardv1.ProviderPreferences{Order: []string{"cheap"}}}, []string{"cheap", "reseller", "fast"}, switchboardv1.RouteReason_ROUTE_REASON_USER_ORDER},
		{"only filters, the policy ranks the rest", &switchboardv1.DecideRequest{Provider: &switchboardv1.ProviderPreferences{Only: []string{"cheap", "reseller"}}}, []string{"reseller", "cheap"}, switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING},
		{"ignore filters, the policy ranks the rest", &switchboardv1.DecideRequest{Provider: &switchboardv1.ProviderPreferences{Ignore: []string{"fast"}}}, []string{"reseller", "cheap"}, switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING},
		{"max_price works with smart routing", &switchboardv1.DecideRequest{Provider: &switchboardv1.ProviderPreferences{MaxPrice: &switchboardv1.MaxPrice{Prompt: new(0.26)}}}, []string{"reseller", "cheap"}, switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING},
		{"preferred_max_latency deprioritises", &switchboardv1.DecideRequest{Provider: &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_PRICE, PreferredMaxLatency: durationpb.New(2 * time.Second)}}, []string{"fast", "cheap", "reseller"}, switchboardv1.RouteReason_ROUTE_REASON_USER_SORT},
		{"preferred_min_throughput deprioritises", &switchboardv1.DecideRequest{Provider: &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_PRICE, PreferredMinThroughput: new(50.0)}}, []string{"reseller", "fast", "cheap"}, switchboardv1.RouteReason_ROUTE_REASON_USER_SORT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.req.Tokens == nil {
				tt.req.Tokens = &switchboardv1.TokenEstimate{InputTokens: long}
			}
			resp := e.decide(t, tt.req)
			require.Equal(t, tt.want, order(resp))
			require.Equal(t, tt.reason, resp.Decision.Reason)
		})
	}
}

// TestThroughputUnknownRanksAsMedian: under sort=throughput an endpoint
// without a throughput figure is ranked as the median of the measured
// ones, never as the slowest (a figure of 0) nor as the fastest; on a tie
// the measured endpoint goes first; with none measured, price order.
func TestThroughputUnknownRanksAsMedian(t *testing.T) {
	sortTPS := func() *switchboardv1.DecideRequest {
		return &switchboardv1.DecideRequest{Explain: true, Provider: &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_THROUGHPUT},
			Tokens: &switchboardv1.TokenEstimate{InputTokens: short}}
	}
	tests := []struct {
		name     string
		measured map[string]float64
		want     []string
	}{
		{"none measured: price order", nil, []string{"cheap", "reseller", "fast"}},
		{"between the faster and the slower", map[string]float64{"fast": 90, "cheap": 20}, []string{"fast", "reseller", "cheap"}},
		{"one measured, slow: it ties with the median, measured first", map[string]float64{"fast": 20}, []string{"fast", "cheap", "reseller"}},
		{"all measured", map[string]float64{"fast": 90, "cheap": 20, "reseller": 60}, []string{"fast", "reseller", "cheap"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newPolicy(t, policyCatalog, Options{})
			for p, tps := range tt.measured {
				e.stats.ObserveThroughput(p+"/m", tps, e.now)
			}
			resp := e.decide(t, sortTPS())
			require.Equal(t, tt.want, order(resp))
			for _, c := range resp.Decision.Candidates {
				if _, ok := tt.measured[c.Provider]; ok {
					require.Equal(t, tt.measured[c.Provider], c.Throughput)
					continue
				}
				require.Zero(t, c.Throughput, "the explanation shows the measured figure, 0 for none")
				if len(tt.measured) == 0 {
					require.Equal(t, "no throughput figure yet, nor for any other endpoint: ranked by price", c.Note)
				} else if tt.name == "between the faster and the slower" {
					require.Equal(t, "no throughput figure yet: ranked as the median of the measured endpoints, 55.0 tokens/s", c.Note)
				}
			}
		})
	}

	// preferred_min_throughput gives an endpoint without a figure the
	// benefit of the doubt: it is not moved behind those that meet it.
	e := newPolicy(t, policyCatalog, Options{})
	e.stats.ObserveThroughput("cheap/m", 20, e.now)
	e.stats.ObserveThroughput("fast/m", 90, e.now)
	resp := e.decide(t, &switchboardv1.DecideRequest{Provider: &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_PRICE, PreferredMinThroughput: new(50.0)},
		Tokens: &switchboardv1.TokenEstimate{InputTokens: short}})
	require.Equal(t, []string{"reseller", "fast", "cheap"}, order(resp))
}

func TestExplanation(t *testing.T) {
	e := newPolicy(t, policyCatalog, Options{})
	e.speed("cheap", long, 15*time.Second, 12)
	e.speed("fast", long, 1500*time.Millisecond, 12)
	resp := e.decide(t, &switchboardv1.DecideRequest{Explain: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: long}})
	d := resp.Decision
	require.Equal(t, switchboardv1.SizeBucket_SIZE_BUCKET_32K_TO_128K, d.Bucket)
	require.Equal(t, 1500*time.Millisecond, d.FastestTtft.AsDuration())
	require.Contains(t, d.Summary, "bucket=32k-128k reason=cheapest_qualifying provider=fast")
	require.Contains(t, d.Summary, "ttft_ms=1500 samples=12")
	notes := map[string]*switchboardv1.Candidate{}
	for _, c := range d.Candidates {
		notes[c.Provider] = c
	}
	require.Equal(t, "chosen", notes["fast"].Note)
	require.True(t, notes["fast"].Qualified)
	require.Contains(t, notes["cheap"].Note, "too slow: 15s is over 2x the fastest 1.5s")
	require.Equal(t, 15*time.Second, notes["cheap"].TypicalTtft.AsDuration())
	require.Equal(t, int64(12), notes["cheap"].Samples)
	require.Equal(t, "no speed data for this size yet", notes["reseller"].Note)
	require.Positive(t, notes["reseller"].CostUsd)
}

func TestHedgePlan(t *testing.T) {
	e := newPolicy(t, policyCatalog, Options{})
	for _, in := range []int64{long, huge} {
		e.speed("cheap", in, 900*time.Millisecond, 12)
		e.speed("fast", in, 500*time.Millisecond, 12)
		e.speed("reseller", in, 600*time.Millisecond, 12)
	}
	tests := []struct {
		name   string
		req    *switchboardv1.DecideRequest
		mode   switchboardv1.HedgeMode
		target string
	}{
		{"32k-128k stream: hedge after the delay", &switchboardv1.DecideRequest{Stream: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: long}}, switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, "reseller"},
		{">128k stream: both at once", &switchboardv1.DecideRequest{Stream: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: huge}}, switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, "reseller"},
		{"not streamed: no hedge", &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: long}}, switchboardv1.HedgeMode_HEDGE_MODE_NONE, ""},
		{"short: no hedge", &switchboardv1.DecideRequest{Stream: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: short}}, switchboardv1.HedgeMode_HEDGE_MODE_NONE, ""},
		{"no fallbacks allowed: no hedge", &switchboardv1.DecideRequest{Stream: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: long},
			Provider: &switchboardv1.ProviderPreferences{AllowFallbacks: new(false)}}, switchboardv1.HedgeMode_HEDGE_MODE_NONE, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := e.decide(t, tt.req)
			require.Equal(t, "cheap", resp.Endpoint.Provider)
			require.Equal(t, tt.mode, resp.Hedge.Mode)
			if tt.target != "" {
				require.Equal(t, tt.target, resp.Hedge.Endpoint.Provider)
				require.NotEqual(t, resp.Endpoint.Provider, resp.Hedge.Endpoint.Provider)
			}
			if tt.mode == switchboardv1.HedgeMode_HEDGE_MODE_DELAYED {
				require.Equal(t, time.Second, resp.Hedge.Delay.AsDuration())
			}
		})
	}
	// The hedge target must itself be fast enough: a slow reseller is not one.
	slow := newPolicy(t, policyCatalog, Options{})
	slow.speed("cheap", long, 900*time.Millisecond, 12)
	slow.speed("fast", long, 500*time.Millisecond, 12)
	slow.speed("reseller", long, 9*time.Second, 12)
	resp := slow.decide(t, &switchboardv1.DecideRequest{Stream: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: long}})
	require.Equal(t, "fast", resp.Hedge.Endpoint.Provider)

	off := newPolicy(t, policyCatalog, Options{HedgeFrom: -1})
	off.speed("cheap", long, 900*time.Millisecond, 12)
	off.speed("fast", long, 500*time.Millisecond, 12)
	resp = off.decide(t, &switchboardv1.DecideRequest{Stream: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: long}})
	require.Equal(t, switchboardv1.HedgeMode_HEDGE_MODE_NONE, resp.Hedge.Mode)
}

// cacheCatalog is the case of a fresh long prompt: warm charges more for
// uncached input but has cheap cache reads; plain is cheaper uncached.
const cacheCatalog = `
models:
  - id: m
    endpoints:
      - {provider: warm,  base_url: http://127.0.0.1:1/v1, price: {input: 0.20, cached_input: 0.02, output: 0.80}}
      - {provider: plain, base_url: http://127.0.0.1:2/v1, price: {input: 0.12, cached_input: 0.06, output: 0.80}}
tenants:
  - {id: acme, api_keys_sha256: ["0000000000000000000000000000000000000000000000000000000000000000"]}
`

// TestCachedTokensComeFromThisPromptsEvidence: with prompt-prefix hashes,
// where the prefix was served is the evidence of where it is cached; an
// endpoint's cache-hit rate on other conversations says nothing about a
// prompt it never saw. The rate is only a fallback for callers that send no
// prefixes. Every ordering by price (smart, sort=price, :floor) uses the
// same per-request cost.
func TestCachedTokensComeFromThisPromptsEvidence(t *testing.T) {
	e := newPolicy(t, cacheCatalog, Options{})
	// One cached conversation on warm: a high observed hit rate there.
	e.stats.ObserveCache("warm/m", 60000, 58000, e.now)
	e.aff.Record("warm/m", 42, 60000, e.now)

	fresh := []*switchboardv1.PromptPrefix{{Hash: 1001, Tokens: 4096}, {Hash: 1002, Tokens: 60000}}
	seen := []*switchboardv1.PromptPrefix{{Hash: 1003, Tokens: 4096}, {Hash: 42, Tokens: 60000}}
	cands := func(resp *switchboardv1.DecideResponse) map[string]*switchboardv1.Candidate {
		out := map[string]*switchboardv1.Candidate{}
		for _, c := range resp.Decision.Candidates {
			out[c.Provider] = c
		}
		return out
	}
	for _, tt := range []struct {
		name, model string
		sort        switchboardv1.Sort
	}{
		{name: "smart policy", model: "m"},
		{name: "sort=price", model: "m", sort: switchboardv1.Sort_SORT_PRICE},
		{name: ":floor", model: "m:floor"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ask := func(prefixes []*switchboardv1.PromptPrefix) *switchboardv1.DecideResponse {
				req := &switchboardv1.DecideRequest{Model: tt.model, Explain: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: 60500, MaxOutputTokens: 16, Prefixes: prefixes}}
				if tt.sort != switchboardv1.Sort_SORT_UNSPECIFIED {
					req.Provider = &switchboardv1.ProviderPreferences{Sort: tt.sort}
				}
				return e.decide(t, req)
			}

			// A fresh prompt: its prefix was served nowhere, so it is cached
			// nowhere and the cheaper uncached input wins.
			resp := ask(fresh)
			c := cands(resp)
			require.Zero(t, c["warm"].EstimatedCachedTokens, "an unknown prefix is cached nowhere, whatever warm's hit rate")
			require.Zero(t, c["plain"].EstimatedCachedTokens)
			require.Equal(t, "plain", resp.Endpoint.Provider)
			require.InDelta(t, (60500*0.12+16*0.80)/1e6, c["plain"].CostUsd, 1e-12)
			require.InDelta(t, (60500*0.20+16*0.80)/1e6, c["warm"].CostUsd, 1e-12)

			// The conversation warm served: its prefix is in warm's cache.
			resp = ask(seen)
			c = cands(resp)
			require.Equal(t, int64(60000), c["warm"].EstimatedCachedTokens)
			require.Zero(t, c["plain"].EstimatedCachedTokens)
			require.Equal(t, "warm", resp.Endpoint.Provider)
			require.InDelta(t, (500*0.20+60000*0.02+16*0.80)/1e6, c["warm"].CostUsd, 1e-12)

			// No prefixes at all (a gRPC caller that sends none): the
			// observed hit rate is the only evidence left.
			resp = ask(nil)
			c = cands(resp)
			require.Equal(t, int64(60500*58000/60000), c["warm"].EstimatedCachedTokens)
			require.Equal(t, "warm", resp.Endpoint.Provider)
		})
	}
}

// TestConversationPricedOverItsNextTurns: a conversation whose cache is on
// an endpoint with dear cache reads (plain) moves to one with cheap cache
// reads (warm) when its next turns repay the uncached move; with one
// expected follow-up they do not, and it stays. The price answered is this
// turn's either way, and a fresh prompt is still priced on this turn alone.
func TestConversationPricedOverItsNextTurns(t *testing.T) {
	onPlain := []*switchboardv1.PromptPrefix{{Hash: 1003, Tokens: 4096}, {Hash: 42, Tokens: 60000}}
	fresh := []*switchboardv1.PromptPrefix{{Hash: 1001, Tokens: 4096}, {Hash: 1002, Tokens: 60000}}
	ask := func(e *policyEnv, prefixes []*switchboardv1.PromptPrefix) *switchboardv1.DecideResponse {
		return e.decide(t, &switchboardv1.DecideRequest{Stream: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: 60500, MaxOutputTokens: 16, Prefixes: prefixes}})
	}
	setup := func(o Options) *policyEnv {
		// The policy's own pricing of a conversation: with stickiness on,
		// plain would keep the conversation whose last turn it served.
		o.NoSticky = true
		e := newPolicy(t, cacheCatalog, o)
		e.speed("warm", 60500, time.Second, 12)
		e.speed("plain", 60500, time.Second, 12)
		e.aff.Record("plain/m", 42, 60000, e.now)
		return e
	}

	// This turn: plain 500 uncached + 60000 cached = $0.00366, warm all
	// uncached $0.0121. Each next turn read from cache: plain $0.00364,
	// warm $0.00122. Over this turn and 4 more, warm is cheaper.
	e := setup(Options{})
	resp := ask(e, onPlain)
	require.Equal(t, "warm", resp.Endpoint.Provider, "four cheap cache reads to come repay one uncached turn")
	require.InDelta(t, (60500*0.20+16*0.80)/1e6, resp.Endpoint.EstimatedCostUsd, 1e-12, "the price answered is this turn's")
	require.Equal(t, "plain", resp.Hedge.Endpoint.Provider)

	// One expected follow-up does not repay the move.
	one := setup(Options{FollowUpTurns: 1})
	require.Equal(t, "plain", ask(one, onPlain).Endpoint.Provider)
	// Nor does pricing this turn alone.
	alone := setup(Options{FollowUpTurns: -1})
	require.Equal(t, "plain", ask(alone, onPlain).Endpoint.Provider)

	// A prompt no endpoint served is not known to be a conversation: the
	// cheaper uncached input wins.
	require.Equal(t, "plain", ask(e, fresh).Endpoint.Provider)
}

// TestFollowUpTurnsDoNotExplore: exploring with a conversation's follow-up
// turn would read its whole prompt uncached on the explored endpoint, and
// again when it comes back; fresh prompts keep exploring.
func TestFollowUpTurnsDoNotExplore(t *testing.T) {
	for _, tt := range []struct {
		name     string
		o        Options
		explores bool
	}{
		{name: "default", o: Options{Exploration: 0.99}},
		{name: "ExploreFollowUps", o: Options{Exploration: 0.99, ExploreFollowUps: true}, explores: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newPolicy(t, policyCatalog, tt.o)
			e.speed("cheap", long, time.Second, 20)
			e.speed("fast", long, time.Second, 20)
			e.speed("reseller", long, time.Second, 3) // too little data: explorable
			e.aff.Record("fast/m", 7, 60000, e.now)
			followUp := []*switchboardv1.PromptPrefix{{Hash: 7, Tokens: 60000}, {Hash: 8, Tokens: long}}
			fresh := []*switchboardv1.PromptPrefix{{Hash: 9, Tokens: long}}
			explored := map[bool]int{}
			for i := range 100 {
				prefixes := fresh
				if i%2 == 0 {
					prefixes = followUp
				}
				resp := e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: long, Prefixes: prefixes}})
				if resp.Decision.Reason == switchboardv1.RouteReason_ROUTE_REASON_EXPLORATION {
					explored[i%2 == 0]++
				}
			}
			require.Greater(t, explored[false], 40, "fresh prompts explore")
			if tt.explores {
				require.Greater(t, explored[true], 40)
			} else {
				require.Zero(t, explored[true], "a follow-up turn stays where its cache is")
			}
		})
	}
}

// TestFewSamplesDoNotSetTheBar: a median of three samples (probes of a
// smaller prompt, or the hedges an endpoint won) is trusted only to within
// the speed factor: it rules a well-measured endpoint too slow only when
// that one is more than 2x2 slower. With no endpoint well measured, the
// thin figures are all there is.
func TestFewSamplesDoNotSetTheBar(t *testing.T) {
	e := newPolicy(t, policyCatalog, Options{})
	e.speed("cheap", long, 1800*time.Millisecond, 12)
	e.speed("fast", long, 800*time.Millisecond, 3)
	resp := e.decide(t, &switchboardv1.DecideRequest{Explain: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: long}})
	require.Equal(t, "cheap", resp.Endpoint.Provider, "1.8 s over 12 samples is not ruled out by 0.8 s over 3")
	require.Equal(t, switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING, resp.Decision.Reason)

	// Far faster on few samples still counts: 15 s is over 2x2 of 0.8 s.
	far := newPolicy(t, policyCatalog, Options{})
	far.speed("cheap", long, 15*time.Second, 12)
	far.speed("fast", long, 800*time.Millisecond, 3)
	resp = far.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: long}})
	require.Equal(t, "fast", resp.Endpoint.Provider)

	thin := newPolicy(t, policyCatalog, Options{})
	thin.speed("cheap", long, 15*time.Second, 3)
	thin.speed("fast", long, 800*time.Millisecond, 3)
	resp = thin.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: long}})
	require.Equal(t, "fast", resp.Endpoint.Provider, "no endpoint well measured: the thin figures decide")
}
