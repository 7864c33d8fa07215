package routing

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
)

func TestRoutingCostFormula(t *testing.T) {
	// Worked by hand: one attempt is 0.001 USD of tokens, 3 s of waiting
	// at 3.6 USD/h (0.001 USD/s) and a 10% chance of a 429 that costs 2 s
	// more: 0.001 + 0.003 + 0.1×2×0.001 = 0.0042 USD. It fails 15% of the
	// time and 5% of answers fail a quality check: success 0.8, so one
	// good answer costs 0.0042/0.8 = 0.00525 USD.
	x := costInputs{price: 0.001, wait: 3, limited: 0.1, failed: 0.15, poor: 0.05}
	require.InDelta(t, 0.00525, routingCost(x, 3.6/3600, 2, 0.2), 1e-12)

	// One failure in five: 1.25 attempts per good answer.
	require.InDelta(t, 1.25, routingCost(costInputs{price: 1, failed: 0.2}, 0, 2, 0.2), 1e-12)
	// Success is floored: an endpoint failing 95% costs 1/0.2 = 5 attempts, not 20.
	require.InDelta(t, 5, routingCost(costInputs{price: 1, failed: 0.95}, 0, 2, 0.2), 1e-12)
}

func TestShareWeightAndBackoff(t *testing.T) {
	tests := []struct {
		name       string
		cost, best float64
		want       float64
	}{
		{name: "the best", cost: 1, best: 1, want: 1},
		{name: "within the 10% margin", cost: 1.1, best: 1, want: 1},
		{name: "5% beyond the margin", cost: 1.15, best: 1, want: math.Exp(-1)},
		{name: "20% beyond the margin", cost: 1.3, best: 1, want: math.Exp(-4)},
		{name: "free best, free endpoint", cost: 0, best: 0, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, shareWeight(tt.cost, tt.best, 0.1, 0.05), 1e-12)
		})
	}
	require.InDelta(t, 1, backoff(0.05, 0.1, 3, 0.02), 1e-12, "failing less than usual: no back-off")
	require.InDelta(t, 0.1, backoff(0.4, 0.1, 3, 0.02), 1e-12, "30 points above its usual rate: weight × (1 - 3×0.3)")
	require.InDelta(t, 0.02, backoff(0.9, 0, 3, 0.02), 1e-12, "never below the minimum")
}

// costCatalog: three endpoints of one model with equal rates unless a test
// says otherwise.
const costCatalog = `
models:
  - id: m
    endpoints:
      - {provider: a, base_url: http://127.0.0.1:1/v1, price: {input: 1.0, cached_input: 0.1, output: 2.0}}
      - {provider: b, base_url: http://127.0.0.1:2/v1, price: {input: 1.0, cached_input: 0.1, output: 2.0}}
      - {provider: c, base_url: http://127.0.0.1:3/v1, price: {input: 1.0, cached_input: 0.1, output: 2.0}}
tenants:
  - {id: acme, api_keys_sha256: ["0000000000000000000000000000000000000000000000000000000000000000"]}
`

type costEnv struct {
	now   time.Time
	stats *stats.Store
	oc    *outcomes.Tracker
	cool  *cooldown.Tracker
	r     *Router
	rates map[string]pricing.Price
}

func newCostEnv(t *testing.T, yaml string, o Options) *costEnv {
	t.Helper()
	c, err := catalog.Parse([]byte(yaml))
	require.NoError(t, err)
	e := &costEnv{now: time.Unix(1_800_000_000, 0), rates: map[string]pricing.Price{}}
	clock := func() time.Time { return e.now }
	e.stats = stats.New(stats.Config{Now: clock})
	e.oc = outcomes.New(outcomes.Config{Now: clock})
	e.cool = cooldown.New(cooldown.FirstRefusal) // one refusal benches
	for _, ep := range c.Models[0].Endpoints {
		e.rates[ep.Provider] = ep.Price.Rates()
	}
	o.Stats, o.Outcomes, o.Cooldown, o.Now = e.stats, e.oc, e.cool, clock
	if o.Policy == "" {
		o.Policy = PolicyRoutingCost
	}
	if o.Seed == 0 {
		o.Seed = 7
	}
	o.Exploration = -1
	e.r = New(c, o)
	return e
}

// serve records n completed calls of provider: ttft, whole-call duration,
// input, cached and output tokens.
func (e *costEnv) serve(provider string, n int, ttft, d time.Duration, in, cached, out int64, quality ...string) {
	for range n {
		e.stats.ObserveTTFT(provider+"/m", tokens.BucketOf(in), ttft, e.now)
		e.oc.Observe(provider+"/m", outcomes.Call{Kind: outcomes.KindOK, Reported: true, Duration: d, QualityFailures: quality,
			Usage: pricing.Usage{Input: in, CachedInput: cached, Output: out}}, e.rates[provider])
	}
}

func (e *costEnv) fail(provider string, n int, k outcomes.Kind) {
	for range n {
		e.oc.Observe(provider+"/m", outcomes.Call{Kind: k}, e.rates[provider])
	}
}

func (e *costEnv) decide(t *testing.T, req *switchboardv1.DecideRequest) *switchboardv1.DecideResponse {
	t.Helper()
	if req.Model == "" {
		req.Model = "m"
	}
	resp, err := e.r.Decide(req, &switchboardv1.Identity{TenantId: "acme"})
	require.NoError(t, err)
	return resp
}

// explained returns each provider's candidate in an explained dry run.
func (e *costEnv) explained(t *testing.T, in, maxOut int64) map[string]*switchboardv1.Candidate {
	t.Helper()
	resp := e.decide(t, &switchboardv1.DecideRequest{DryRun: true, Explain: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: in, MaxOutputTokens: maxOut}})
	require.Equal(t, switchboardv1.RouteReason_ROUTE_REASON_ROUTING_COST, resp.Decision.Reason)
	out := map[string]*switchboardv1.Candidate{}
	for _, c := range resp.Decision.Candidates {
		out[c.Provider] = c
	}
	return out
}

// draws counts where n decisions went.
func (e *costEnv) draws(t *testing.T, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		got[e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 100}}).Endpoint.Provider]++
	}
	return got
}

func TestRoutingCostByHand(t *testing.T) {
	// a: 1 s TTFT, 100 tokens in 3 s (33.3 tok/s over the whole call), no
	// cache; b: 2 s TTFT, 100 tokens in 5 s (20 tok/s). 12 calls each.
	// The model's time value: 3.6 USD/h = 0.001 USD/s.
	yaml := costCatalog[:len("\nmodels:\n  - id: m\n")] + "    routing: {time_value_usd_per_hour: 3.6}\n" + costCatalog[len("\nmodels:\n  - id: m\n"):]
	e := newCostEnv(t, yaml, Options{})
	e.serve("a", 12, time.Second, 3*time.Second, 1000, 0, 100)
	e.serve("b", 12, 2*time.Second, 5*time.Second, 1000, 0, 100)
	e.fail("b", 3, outcomes.KindError) // b: 3 errors in 15 calls
	cs := e.explained(t, 1000, 100)

	// Rates start from the model's typical one, the median over endpoints
	// with 10 calls or more (a 0, b 3/15 = 0.2: 0.1), weighing 5 calls.
	// a, for 1000 input and 100 output tokens: price 1000×1 + 100×2 =
	// 1200 µUSD; wait 1 + 100/33.33 = 4 s = 4000 µUSD; no 429s; its error
	// rate (0 + 5×0.1)/(12 + 5) = 0.5/17.
	require.InDelta(t, (0.0012+0.004)/(1-0.5/17), cs["a"].RoutingCostUsd, 1e-9)
	// b: price 1200 µUSD; wait 2 + 100/20 = 7 s = 7000 µUSD; its error rate
	// (3 + 5×0.1)/(15 + 5) = 0.175; so (0.0012+0.007)/0.825.
	require.InDelta(t, (0.0012+0.007)/(1-0.175), cs["b"].RoutingCostUsd, 1e-9)
	// c is new: the model's typical numbers, the medians of a and b:
	// TTFT 1.5 s, throughput 26.67 tok/s, error rate 0.1.
	wantC := (0.0012 + (1.5+100/((100.0/3+20)/2))*0.001) / (1 - 0.1*5/5)
	require.InDelta(t, wantC, cs["c"].RoutingCostUsd, 1e-9)
	require.Contains(t, cs["b"].Note, "errors 17.5%")

	var sum float64
	for _, c := range cs {
		sum += c.Share
	}
	require.InDelta(t, 1, sum, 1e-9)
}

func TestPriceTrapLoses(t *testing.T) {
	// trap lists a low input price but charges full price for cached input
	// and a dear output; fair charges more per uncached input token.
	const trapCatalog = `
models:
  - id: m
    endpoints:
      - {provider: trap, base_url: http://127.0.0.1:1/v1, price: {input: 0.10, cached_input: 0.10, output: 3.00}}
      - {provider: fair, base_url: http://127.0.0.1:2/v1, price: {input: 0.30, cached_input: 0.03, output: 1.00}}
`
	e := newCostEnv(t, trapCatalog, Options{Policy: PolicySmart})
	smart := e.decide(t, &switchboardv1.DecideRequest{Model: "m", Tokens: &switchboardv1.TokenEstimate{InputTokens: 10000}})
	require.Equal(t, "trap", smart.Endpoint.Provider, "priced on its list input price with nothing measured, the trap is cheapest")

	e = newCostEnv(t, trapCatalog, Options{})
	// Both read 80% of their prompts from cache and answer 500 tokens.
	e.serve("trap", 20, time.Second, 6*time.Second, 10000, 8000, 500)
	e.serve("fair", 20, time.Second, 6*time.Second, 10000, 8000, 500)
	cs := e.explained(t, 10000, 0)
	// The model's typical output is 500: trap 10000×0.10 + 500×3 = 2500
	// µUSD; fair 2000×0.30 + 8000×0.03 + 500×1 = 1340 µUSD.
	require.Less(t, cs["fair"].RoutingCostUsd, cs["trap"].RoutingCostUsd)
	require.Greater(t, cs["fair"].Share, 0.9)
	got := e.draws(t, 400)
	require.Greater(t, got["fair"], 360, "the fairly priced endpoint takes nearly all the traffic: %v", got)
}

func TestSharesFloorAndReproducibleDraws(t *testing.T) {
	setup := func() *costEnv {
		e := newCostEnv(t, costCatalog, Options{Seed: 99})
		// a and b alike; c 3x slower to first token.
		e.serve("a", 20, time.Second, 3*time.Second, 1000, 0, 100)
		e.serve("b", 20, time.Second, 3*time.Second, 1000, 0, 100)
		e.serve("c", 20, 3*time.Second, 5*time.Second, 1000, 0, 100)
		return e
	}
	e := setup()
	cs := e.explained(t, 1000, 100)
	require.InDelta(t, cs["a"].Share, cs["b"].Share, 1e-12)
	// c is far beyond the margin: its weight is almost 0, it keeps the 2%
	// floor; a and b share the rest.
	require.InDelta(t, 0.02, cs["c"].Share, 1e-3)
	require.InDelta(t, 0.49, cs["a"].Share, 1e-3)

	got := e.draws(t, 4000)
	require.InDelta(t, 0.49*4000, got["a"], 150)
	require.InDelta(t, 0.02*4000, got["c"], 40)
	require.Positive(t, got["c"], "the floor is real traffic")

	// Same seed, same decisions.
	e1, e2 := setup(), setup()
	for range 50 {
		req := &switchboardv1.DecideRequest{Model: "m", Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 100}}
		require.Equal(t, e1.decide(t, req).Endpoint.Provider, e2.decide(t, req).Endpoint.Provider)
	}
}

func TestBackoffAndRecovery(t *testing.T) {
	e := newCostEnv(t, costCatalog, Options{})
	for _, p := range []string{"a", "b", "c"} {
		e.serve(p, 40, time.Second, 3*time.Second, 1000, 0, 100)
	}
	before := e.explained(t, 1000, 100)["a"].Share
	// Five minutes later, a starts failing: 10 failures within the minute.
	e.now = e.now.Add(5 * time.Minute)
	e.fail("a", 10, outcomes.KindRateLimited)
	hit := e.explained(t, 1000, 100)["a"]
	require.Less(t, hit.Share, before/3, "its share drops at once")
	require.Contains(t, hit.Note, "backed off")
	// No more failures: the recent rate fades within minutes and the share
	// comes back, gradually.
	prev := hit.Share
	for range 3 {
		e.now = e.now.Add(time.Minute)
		s := e.explained(t, 1000, 100)["a"].Share
		require.GreaterOrEqual(t, s, prev)
		prev = s
	}
	e.now = e.now.Add(10 * time.Minute)
	late := e.explained(t, 1000, 100)["a"]
	require.NotContains(t, late.Note, "backed off", "the recent rate has faded")
	require.Contains(t, late.Note, "429 16.6%", "the longer-run 429 rate still prices a in")
	e.now = e.now.Add(time.Hour)
	require.InDelta(t, before, e.explained(t, 1000, 100)["a"].Share, 1e-3, "the 429s aged out: recovered")
}

func TestLearnedCap(t *testing.T) {
	e := newCostEnv(t, costCatalog, Options{})
	for _, p := range []string{"a", "b", "c"} {
		e.serve(p, 40, time.Second, 3*time.Second, 1000, 0, 100)
	}
	// Route 10 minutes at 3 requests a second (180 a minute): a third each.
	for range 1800 {
		e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 100}})
		e.now = e.now.Add(time.Second / 3)
	}
	load := e.oc.Endpoint("a/m").Load(e.now)
	require.InDelta(t, 60, load, 10)
	// a answers 429 at that load: its cap is set 10% below.
	e.fail("a", 1, outcomes.KindRateLimited)
	capRPM := e.oc.Endpoint("a/m").Read(e.now).Cap
	require.InDelta(t, 0.9*load, capRPM, 1e-9)
	cs := e.explained(t, 1000, 100)
	require.Zero(t, cs["a"].Share, "over its cap, a gets nothing")
	require.Contains(t, cs["a"].Note, "over its learned cap")

	// Keep routing 3/s: a's load settles near its cap, the rest goes elsewhere.
	for range 1800 {
		e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 100}})
		e.now = e.now.Add(time.Second / 3)
	}
	rose := e.oc.Endpoint("a/m").Read(e.now).Cap
	require.InDelta(t, 1.2*capRPM, rose, 1e-6, "10 minutes without a 429: the cap rose by 2% of itself a minute")
	// 15 minutes more: the cap is half as high again as learned, above
	// a's natural third.
	for range 2700 {
		e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 100}})
		e.now = e.now.Add(time.Second / 3)
	}
	require.InDelta(t, 1.5*capRPM, e.oc.Endpoint("a/m").Read(e.now).Cap, 1e-6)
	require.InDelta(t, 1.0/3, e.explained(t, 1000, 100)["a"].Share, 1e-9, "a's natural third is under its risen cap again")
}

func TestCapHoldsLoadDown(t *testing.T) {
	// a is far cheaper: it would take nearly everything, but it answered
	// 429 at 30 requests a minute.
	const cheapA = `
models:
  - id: m
    routing: {time_value_usd_per_hour: 0.01}
    endpoints:
      - {provider: a, base_url: http://127.0.0.1:1/v1, price: {input: 0.5, output: 1.0}}
      - {provider: b, base_url: http://127.0.0.1:2/v1, price: {input: 1.0, output: 2.0}}
`
	e := newCostEnv(t, cheapA, Options{})
	e.serve("a", 20, time.Second, 3*time.Second, 1000, 0, 100)
	e.serve("b", 20, time.Second, 3*time.Second, 1000, 0, 100)
	a := e.oc.Endpoint("a/m")
	for range 30 * 5 { // 30 a minute for 5 minutes
		a.Routed(e.now)
		e.now = e.now.Add(2 * time.Second)
	}
	e.fail("a", 1, outcomes.KindRateLimited)
	capRPM := a.Read(e.now).Cap
	// 2 requests a second (120 a minute) for 5 minutes.
	got := map[string]int{}
	for range 600 {
		got[e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 100}}).Endpoint.Provider]++
		e.now = e.now.Add(time.Second / 2)
	}
	require.InDelta(t, a.Read(e.now).Cap, a.Load(e.now), 4, "a's load stays at its cap (%.1f, learned %.1f)", a.Read(e.now).Cap, capRPM)
	require.Greater(t, got["b"], got["a"], "the rest goes to b: %v", got)
}

func TestErrorExclusionAndQualityTestTraffic(t *testing.T) {
	e := newCostEnv(t, costCatalog, Options{})
	for _, p := range []string{"a", "b", "c"} {
		e.serve(p, 40, time.Second, 3*time.Second, 1000, 0, 100)
	}
	e.fail("a", 40, outcomes.KindError) // a fails half its calls
	e.now = e.now.Add(2 * time.Minute)  // past the back-off: this is the error guard
	cs := e.explained(t, 1000, 100)
	require.Zero(t, cs["a"].Share)
	require.Contains(t, cs["a"].Note, "error rate far above its peers'")
	resp := e.decide(t, &switchboardv1.DecideRequest{Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 100}})
	require.Equal(t, "a", resp.Fallbacks[len(resp.Fallbacks)-1].Provider, "the very last fallback")

	// Idle, its record ages and its rate drifts back to its peers': it
	// gets traffic again, and what that traffic says decides.
	e.now = e.now.Add(40 * time.Minute)
	require.Positive(t, e.explained(t, 1000, 100)["a"].Share)

	// b's answers fail a quality check a third of the time: test traffic only.
	e = newCostEnv(t, costCatalog, Options{})
	e.serve("a", 40, time.Second, 3*time.Second, 1000, 0, 100)
	e.serve("c", 40, time.Second, 3*time.Second, 1000, 0, 100)
	e.serve("b", 20, time.Second, 3*time.Second, 1000, 0, 100)
	e.serve("b", 10, time.Second, 3*time.Second, 1000, 0, 100, "malformed_tool_call")
	cs = e.explained(t, 1000, 100)
	require.InDelta(t, 0.02, cs["b"].Share, 1e-12, "the floor, no more")
	require.Contains(t, cs["b"].Note, "test traffic only")
	require.Contains(t, cs["b"].Note, "[malformed_tool_call 33.3%]", "which check, how often")
	got := e.draws(t, 2000)
	require.InDelta(t, 40, got["b"], 25)
}

func TestRoutingCostSelection(t *testing.T) {
	const twoModels = `
models:
  - id: m
    routing: {policy: routing-cost}
    endpoints:
      - {provider: a, base_url: http://127.0.0.1:1/v1, price: {input: 1.0, output: 2.0}}
      - {provider: b, base_url: http://127.0.0.1:2/v1, price: {input: 1.1, output: 2.0}}
  - id: n
    endpoints:
      - {provider: a, base_url: http://127.0.0.1:1/v1, price: {input: 1.0, output: 2.0}}
      - {provider: b, base_url: http://127.0.0.1:2/v1, price: {input: 1.1, output: 2.0}}
`
	e := newCostEnv(t, twoModels, Options{Policy: PolicySmart})
	reason := func(req *switchboardv1.DecideRequest) switchboardv1.RouteReason {
		return e.decide(t, req).Decision.Reason
	}
	cost := switchboardv1.RouteReason_ROUTE_REASON_ROUTING_COST
	require.Equal(t, cost, reason(&switchboardv1.DecideRequest{Model: "m"}), "the model's setting")
	require.NotEqual(t, cost, reason(&switchboardv1.DecideRequest{Model: "n"}), "the deployment's default, smart")
	require.Equal(t, switchboardv1.RouteReason_ROUTE_REASON_FLOOR, reason(&switchboardv1.DecideRequest{Model: "m:floor"}))
	require.Equal(t, switchboardv1.RouteReason_ROUTE_REASON_NITRO, reason(&switchboardv1.DecideRequest{Model: "m:nitro"}))
	require.Equal(t, switchboardv1.RouteReason_ROUTE_REASON_USER_SORT, reason(&switchboardv1.DecideRequest{Model: "m",
		Provider: &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_PRICE}}))
	require.Equal(t, switchboardv1.RouteReason_ROUTE_REASON_USER_ORDER, reason(&switchboardv1.DecideRequest{Model: "m",
		Provider: &switchboardv1.ProviderPreferences{Order: []string{"b"}}}))
	resp := e.decide(t, &switchboardv1.DecideRequest{Model: "m", Provider: &switchboardv1.ProviderPreferences{Ignore: []string{"a"}}})
	require.Equal(t, cost, resp.Decision.Reason, "ignore filters; the policy picks among the rest")
	require.Equal(t, "b", resp.Endpoint.Provider)

	// The deployment default.
	e = newCostEnv(t, twoModels, Options{Policy: PolicyRoutingCost})
	require.Equal(t, cost, reason(&switchboardv1.DecideRequest{Model: "n"}))
	require.Contains(t, e.decide(t, &switchboardv1.DecideRequest{Model: "n"}).Decision.Summary, "policy=routing-cost")
	// An experiment's arm comes before the model's setting.
	e = newCostEnv(t, twoModels, Options{Arm: func(string, time.Time) (Policy, bool) { return PolicySmart, true }})
	require.NotEqual(t, cost, reason(&switchboardv1.DecideRequest{Model: "m"}))
}

func TestRoutingCostDoesNotBench(t *testing.T) {
	e := newCostEnv(t, costCatalog, Options{})
	for _, p := range []string{"a", "b", "c"} {
		e.serve(p, 40, time.Second, 3*time.Second, 1000, 0, 100)
	}
	e.cool.Refused("a/m", e.now)
	require.Positive(t, e.explained(t, 1000, 100)["a"].Share, "a cool-down does not bench under routing-cost: back-off and caps do its work")
	resp := e.decide(t, &switchboardv1.DecideRequest{Model: "m", Provider: &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_PRICE}, Explain: true})
	require.NotEqual(t, "a", resp.Endpoint.Provider, "an explicit sort is not the policy: the bench applies")
}

func TestTimeValueDerived(t *testing.T) {
	// Without a setting, time is priced at the model's median price over
	// its median wait. a: 1200 µUSD and 4 s; b: 2400 µUSD (twice the
	// rates) and 2 s; the medians are 1800 µUSD and 3 s: 600 µUSD/s. a
	// costs 1200 + 4×600 = 3600, b 2400 + 2×600 = 3600.
	const two = `
models:
  - id: m
    endpoints:
      - {provider: a, base_url: http://127.0.0.1:1/v1, price: {input: 1.0, output: 2.0}}
      - {provider: b, base_url: http://127.0.0.1:2/v1, price: {input: 2.0, output: 4.0}}
`
	e := newCostEnv(t, two, Options{})
	e.serve("a", 20, time.Second, 3*time.Second, 1000, 0, 100)
	e.serve("b", 20, 500*time.Millisecond, 1500*time.Millisecond, 1000, 0, 100)
	cs := e.explained(t, 1000, 100)
	require.InDelta(t, 0.0036, cs["a"].RoutingCostUsd, 1e-9)
	require.InDelta(t, 0.0036, cs["b"].RoutingCostUsd, 1e-9)
}

func TestRetryAfterPauses(t *testing.T) {
	e := newCostEnv(t, costCatalog, Options{})
	for _, p := range []string{"a", "b", "c"} {
		e.serve(p, 40, time.Second, 3*time.Second, 1000, 0, 100)
	}
	e.oc.Observe("a/m", outcomes.Call{Kind: outcomes.KindRateLimited, RetryAfter: 20 * time.Second}, e.rates["a"])
	cs := e.explained(t, 1000, 100)
	require.Zero(t, cs["a"].Share, "the provider asked for no calls for 20 s")
	require.Contains(t, cs["a"].Note, "as its 429's Retry-After asked")
	e.now = e.now.Add(20 * time.Second)
	require.Positive(t, e.explained(t, 1000, 100)["a"].Share, "and gets them again after")
}

func TestFollowUpPricedWhereItsCacheIs(t *testing.T) {
	e := newCostEnv(t, costCatalog, Options{})
	// Every endpoint reads 90% of its prompts from cache on other
	// conversations; only b holds this one.
	for _, p := range []string{"a", "b", "c"} {
		e.serve(p, 40, time.Second, 3*time.Second, 100000, 90000, 100)
	}
	h := uint64(0xfeed)
	e.r.o.Affinity.Record("b/m", h, 100000, e.now)
	req := func() *switchboardv1.DecideRequest {
		return &switchboardv1.DecideRequest{Model: "m", Explain: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: 100000, MaxOutputTokens: 100,
			Prefixes: []*switchboardv1.PromptPrefix{{Hash: h, Tokens: 100000}}}}
	}
	for range 50 {
		resp := e.decide(t, req())
		require.Equal(t, "b", resp.Endpoint.Provider, "a follow-up is not drawn away from its cache")
		for _, c := range resp.Decision.Candidates {
			// Priced per turn over this one and 4 more, the next ones at
			// the endpoint's 90% cache-hit rate (10000×1.0 + 90000×0.1 +
			// 100×2.0 = 19200 µUSD). This turn elsewhere: 100000
			// uncached at 1.0 + 100 at 2.0 = 100200 µUSD, what moving
			// costs; on b, all of it cached: 10200 µUSD.
			want := "price 0.03540000" // (100200 + 4×19200)/5 µUSD
			if c.Provider == "b" {
				want = "price 0.01740000" // (10200 + 4×19200)/5 µUSD
			}
			require.Contains(t, c.Note, want)
		}
	}
}

func TestThinFiguresBlendWithTheTypical(t *testing.T) {
	require.InDelta(t, 12, typical(12, 10, 3, 10, 5), 1e-12, "enough samples: its own")
	require.InDelta(t, 3, typical(0, 0, 3, 10, 5), 1e-12, "none: the model's typical")
	require.InDelta(t, (3*15+5*3)/8.0, typical(15, 3, 3, 10, 5), 1e-12, "three probes of a slow endpoint weigh against the typical")
	require.InDelta(t, 15, typical(15, 3, 0, 10, 5), 1e-12, "no typical figure: its own")

	// Through Decide: c was probed three times at 15 s; a and b are well
	// measured at 1 s. c is not taken for a 1 s endpoint.
	e := newCostEnv(t, costCatalog, Options{})
	e.serve("a", 20, time.Second, 3*time.Second, 1000, 0, 100)
	e.serve("b", 20, time.Second, 3*time.Second, 1000, 0, 100)
	for range 3 {
		e.stats.ObserveTTFT("c/m", tokens.BucketOf(1000), 15*time.Second, e.now)
	}
	cs := e.explained(t, 1000, 100)
	// TTFT (3×15 + 5×1)/8 = 6.25 s, and 100 tokens at the typical
	// 33.3 tokens/s (c has no throughput of its own): 9.25 s.
	require.Contains(t, cs["c"].Note, "wait 9.25s")
}

func TestMedianWithout(t *testing.T) {
	tests := []struct {
		name   string
		sorted []float64
		v      float64
		want   float64
	}{
		{name: "two: the other", sorted: []float64{0, 0.5}, v: 0.5, want: 0},
		{name: "three without the top", sorted: []float64{0.01, 0.02, 0.5}, v: 0.5, want: 0.015},
		{name: "three without the middle", sorted: []float64{0.01, 0.02, 0.5}, v: 0.02, want: 0.255},
		{name: "four without the bottom", sorted: []float64{1, 2, 3, 4}, v: 1, want: 3},
		{name: "ties", sorted: []float64{1, 1, 1, 9}, v: 1, want: 1},
		{name: "alone", sorted: []float64{7}, v: 7, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, medianWithout(tt.sorted, tt.v), 1e-12)
		})
	}
}
