package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// startCost starts simYAML's providers and a decider whose default policy
// is routing-cost and whose catalog serves model from them: routing is the
// model's routing settings, endpoints has one line per endpoint with %[n]s
// for the URL of the n-th provider of names.
func startCost(t *testing.T, simYAML, routing, endpoints string, names []string, tune func(*deciderapp.Config)) *stack {
	t.Helper()
	return startStack(t, stackOptions{sim: simYAML, restartable: true,
		catalog: func(url func(string) string) string {
			urls := make([]any, len(names))
			for i, n := range names {
				urls[i] = url(n)
			}
			return fmt.Sprintf("models:\n  - id: %s\n    routing: %s\n    endpoints:\n", model, routing) + fmt.Sprintf(endpoints, urls...) +
				fmt.Sprintf("tenants:\n  - {id: acme, api_keys_sha256: [%s]}\n", catalog.HashKey(testKey))
		},
		tune: func(c *deciderapp.Config) {
			c.StatsSnapshotInterval = time.Hour
			c.RoutingPolicy = "routing-cost"
			if tune != nil {
				tune(c)
			}
		}})
}

// explainCost is the decider's dry-run view of a request of in prompt tokens.
func (s *stack) explainCost(t *testing.T, in int64) map[string]*switchboardv1.Candidate {
	t.Helper()
	resp, err := s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: in},
	})
	require.NoError(t, err)
	require.Equal(t, switchboardv1.RouteReason_ROUTE_REASON_ROUTING_COST, resp.GetDecision().GetReason())
	out := map[string]*switchboardv1.Candidate{}
	for _, c := range resp.GetDecision().GetCandidates() {
		out[c.GetProvider()] = c
	}
	return out
}

// servedBy posts one chat request and returns the provider that answered; it
// is safe to call from any goroutine (errors are returned, not failed).
func (s *stack) servedBy(ctx context.Context, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.edge.URL()+"/chat/completions", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, raw)
	}
	return resp.Header.Get("x-switchboard-provider"), nil
}

// The price trap: trap lists the lowest input price but charges full price
// for cached input and three times fair's price for output. Priced on list
// input alone it looks cheapest; once both are measured (their real
// cache-hit rates and outputs), the routing-cost policy sends the traffic
// to fair.
func TestRoutingCostAvoidsThePriceTrap(t *testing.T) {
	const sim = `
seed: 3
providers:
  - name: trap
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, default_output_tokens: 64, tokens_per_second: 20000, ttft: {base: 20ms}, cache: {enabled: true, min_tokens: 256}}
  - name: fair
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, default_output_tokens: 64, tokens_per_second: 20000, ttft: {base: 20ms}, cache: {enabled: true, min_tokens: 256}}
`
	// Waiting is priced low: both answer equally fast, and on a loaded
	// test machine their measured speeds differ by noise alone.
	s := startCost(t, sim, "{time_value_usd_per_hour: 0.0001}", `      - {provider: trap, base_url: %[1]s, upstream_model: sim-model, price: {input: 0.10, cached_input: 0.10, output: 3.00}}
      - {provider: fair, base_url: %[2]s, upstream_model: sim-model, price: {input: 0.30, cached_input: 0.03, output: 1.00}}
`, []string{"trap", "fair"}, nil)

	const in = 4096
	before := s.explainCost(t, in)
	require.Less(t, before["trap"].GetRoutingCostUsd(), before["fair"].GetRoutingCostUsd(),
		"with nothing measured, list input prices make the trap look cheaper")

	// A conversation-like prompt: a long shared system prompt each
	// provider caches, a short new question. provider.only pins the
	// measuring traffic to each endpoint in turn (only filters; the policy
	// picks among what is left).
	system := longPrompt(in)
	body := func(i int, only string) string {
		pin := ""
		if only != "" {
			pin = `"provider":{"only":["` + only + `"]},`
		}
		return `{"model":"` + model + `",` + pin + `"messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"question ` + fmt.Sprint(i) + `"}]}`
	}
	for i := range 12 {
		for _, p := range []string{"trap", "fair"} {
			got, err := s.servedBy(t.Context(), body(i, p))
			require.NoError(t, err)
			require.Equal(t, p, got)
		}
	}
	require.Eventually(t, func() bool {
		c := s.explainCost(t, in)
		return c["fair"].GetRoutingCostUsd() < c["trap"].GetRoutingCostUsd()
	}, 20*time.Second, 50*time.Millisecond, "once measured, fair is cheaper per good answer")
	after := s.explainCost(t, in)
	require.Greater(t, after["fair"].GetShare(), 0.9, "%s", after["trap"].GetNote())

	got := map[string]int{}
	for i := range 30 {
		p, err := s.servedBy(t.Context(), body(100+i, ""))
		require.NoError(t, err)
		got[p]++
	}
	require.GreaterOrEqual(t, got["fair"], 26, "the fairly priced endpoint takes the traffic: %v", got)
}

// The learned cap: small is the cheapest endpoint but takes only 3
// requests a second. Under steady traffic the decider learns the load at
// which it starts answering 429 and keeps what it sends there near that
// load; the rest goes to big.
func TestRoutingCostLearnsACap(t *testing.T) {
	const sim = `
seed: 5
providers:
  - name: small
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, default_output_tokens: 4, ttft: {base: 10ms}, limits: {requests_per_second: 3}}
  - name: big
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, default_output_tokens: 4, ttft: {base: 10ms}}
`
	// Time is priced low so that price decides and the cap, not the 429
	// penalty, is what holds small back.
	s := startCost(t, sim, "{time_value_usd_per_hour: 0.0001}", `      - {provider: small, base_url: %[1]s, upstream_model: sim-model, price: {input: 0.10, output: 0.40}}
      - {provider: big,   base_url: %[2]s, upstream_model: sim-model, price: {input: 0.20, output: 0.80}}
`, []string{"small", "big"}, func(c *deciderapp.Config) {
		c.RoutingCostLoadWindow = 2 * time.Second
		c.RoutingCostHalfLife = 30 * time.Second
	})

	// Steady traffic, 15 requests a second, until the test ends.
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	var served = map[string]int{}
	tick := time.NewTicker(time.Second / 15)
	wg.Go(func() {
		defer tick.Stop()
		var inner sync.WaitGroup
		defer inner.Wait()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			inner.Go(func() {
				p, err := s.servedBy(ctx, `{"model":"`+model+`","max_tokens":4,"messages":[{"role":"user","content":"load `+fmt.Sprint(i)+`"}]}`)
				mu.Lock()
				defer mu.Unlock()
				if err != nil && ctx.Err() == nil {
					errs = append(errs, err)
				}
				served[p]++
			})
		}
	})
	stop := func() {
		cancel()
		wg.Wait()
	}
	defer stop()

	// The decider learns a cap for small.
	require.Eventually(t, func() bool {
		return strings.Contains(s.explainCost(t, 10)["small"].GetNote(), "learned cap")
	}, 30*time.Second, 100*time.Millisecond, "a cap is learned from small's 429s")

	// Let it settle for 60 more requests, then measure what small is sent
	// over the next 90.
	small := s.sim.Provider("small")
	done := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range served {
			n += v
		}
		return n
	}
	waitFor := func(n int) {
		require.Eventually(t, func() bool { return done() >= n }, 30*time.Second, 20*time.Millisecond)
	}
	waitFor(done() + 60)
	first := small.Stats().Models["sim-model"].Outcomes
	mu.Lock()
	bigBefore := served["big"]
	mu.Unlock()
	start := time.Now()
	waitFor(done() + 90)
	last := small.Stats().Models["sim-model"].Outcomes
	elapsed := time.Since(start).Seconds()
	stop()
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, errs, "every request was answered (a 429 retries on big)")

	ok, limited := last.OK-first.OK, last.RateLimited-first.RateLimited
	capacity := 3 * elapsed
	t.Logf("over %.1fs: small answered %d and refused %d (capacity %.0f); big answered %d", elapsed, ok, limited, capacity, served["big"]-bigBefore)
	require.LessOrEqual(t, float64(ok+limited), 1.5*capacity+5, "small is sent about what it can take, not the cheapest's whole share")
	require.GreaterOrEqual(t, float64(ok), 0.3*capacity, "and it keeps being used up to its cap")
	require.LessOrEqual(t, float64(limited), 0.35*float64(ok+limited)+3, "few of those are refused")
	require.Greater(t, served["big"]-bigBefore, int(ok), "the rest goes to big")
}
