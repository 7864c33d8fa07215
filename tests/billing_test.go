package tests

// End-to-end tests of hedging (a second endpoint for long
// streams, paid from a daily budget), retries on another endpoint before any
// byte reached the client, and billing: the real decider (embedded etcd), the real edge and
// the provider simulator on loopback, driven through the edge's HTTP API. What
// the client is billed is checked against the catalog's prices and the
// simulated providers' own counters, and every call against the activity log
// the tenant reads back.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
	"github.com/switchboard-ai/switchboard/tests/loadtest"
)

const (
	// otherKey is the API key of a second tenant, globex.
	otherKey = "sk-e2e-other-tenant-key"
	// exactUSD is the tolerance of "exactly": the cheapest token in the
	// catalog below costs 2e-8 USD, so any difference above float noise is
	// at least a whole token.
	exactUSD = 1e-12
	// waitFor bounds every wait for something asynchronous (records reach
	// the decider on the Report stream, a background writer stores them).
	waitFor = 20 * time.Second
	tick    = 20 * time.Millisecond
)

// simPrice is an endpoint's price, USD per million tokens.
type simPrice struct{ in, cached, out float64 }

// billPrices are the catalog prices of startBilling's endpoints; every
// expected bill below is computed from them.
var billPrices = map[string]simPrice{
	"alpha": {in: 0.10, cached: 0.05, out: 0.50},
	"beta":  {in: 0.20, cached: 0.02, out: 0.60},
	"gamma": {in: 0.25, cached: 0.10, out: 0.70},
}

var providers = []string{"alpha", "beta", "gamma"}

// bill is what an endpoint charges for a usage (docs/api.md, "Billing"):
// uncached input, cached input and output, each at its own price.
func bill(p simPrice, in, cached, out int64) float64 {
	return (float64(in-cached)*p.in + float64(cached)*p.cached + float64(out)*p.out) / 1e6
}

func billUsage(provider string, u *switchboardv1.Usage) float64 {
	return bill(billPrices[provider], u.GetInputTokens(), u.GetCachedInputTokens(), u.GetOutputTokens())
}

func promptTokens(content string) int64 {
	return tokens.Prompt([]tokens.Message{{Role: "user", Content: content}})
}

// startBilling starts the three simulated providers of simConfig behind a
// catalog of two tenants (acme: testKey, globex: otherKey); tune adjusts
// the decider's configuration (hedge budget, clock...). By default there
// are no probes (so the providers' counters only see client calls), no
// exploration and no hedging.
func startBilling(t *testing.T, tune func(*deciderapp.Config), edgeArgs ...string) *stack {
	t.Helper()
	return startStack(t, stackOptions{sim: simConfig, tune: tune, edgeArgs: edgeArgs, catalog: billingCatalog("")})
}

// billingCatalog is startBilling's catalog; acmeExtra is added to acme's
// entry (", limits: [...]").
func billingCatalog(acmeExtra string) func(url func(string) string) string {
	return func(url func(string) string) string {
		var eps strings.Builder
		for _, p := range providers {
			pr := billPrices[p]
			cred := ""
			if p == "alpha" {
				cred = ", api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA"
			}
			fmt.Fprintf(&eps, "      - {provider: %s, base_url: %s, upstream_model: %s, context_length: 200000%s, price: {input: %g, cached_input: %g, output: %g}}\n",
				p, url(p), simModel, cred, pr.in, pr.cached, pr.out)
		}
		// A list price well above every endpoint's, so the price guard
		// (above the usual price, a fast endpoint must cost at most half the
		// list price to win for speed) never takes a fast endpoint out of the hedge's choice.
		return fmt.Sprintf(`
models:
  - id: %s
    list_price: {input: 1.00, cached_input: 0.25, output: 4.00}
    endpoints:
%stenants:
  - {id: acme, api_keys_sha256: [%s]%s}
  - {id: globex, api_keys_sha256: [%s]}
`, model, eps.String(), catalog.HashKey(testKey), acmeExtra, catalog.HashKey(otherKey))
	}
}

// chatReq is one chat request to the edge.
type chatReq struct {
	content      string
	stream       bool
	includeUsage bool
	maxTokens    int
	provider     string // the provider object as raw JSON, "" for none
}

func (r chatReq) body() string {
	m := map[string]any{
		"model":    model,
		"messages": []map[string]string{{"role": "user", "content": r.content}},
	}
	if r.stream {
		m["stream"] = true
		if r.includeUsage {
			m["stream_options"] = map[string]bool{"include_usage": true}
		}
	}
	if r.maxTokens > 0 {
		m["max_tokens"] = r.maxTokens
	}
	if r.provider != "" {
		m["provider"] = json.RawMessage(r.provider)
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// answer is what the client got.
type answer struct {
	status int
	header http.Header
	// body is a JSON answer: the completion, or an error.
	body map[string]any
	// chunks are a streamed answer's events, in order, but for an error
	// event, which is errEvent.
	chunks   []map[string]any
	errEvent map[string]any
	// done is whether the stream ended with [DONE].
	done bool
}

func (s *stack) chat(t *testing.T, key string, r chatReq) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.edge.URL()+"/chat/completions", strings.NewReader(r.body()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if data == "[DONE]" {
				a.done = true
				continue
			}
			var ev map[string]any
			require.NoError(t, json.Unmarshal([]byte(data), &ev), "event: %s", data)
			if _, isErr := ev["error"]; isErr {
				a.errEvent = ev
				continue
			}
			a.chunks = append(a.chunks, ev)
		}
		require.NoError(t, sc.Err(), "the edge ends every stream cleanly, a broken one with an error event")
		return a
	}
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &a.body), "body: %s", raw)
	return a
}

// requestID is the edge's id of the request, in x-switchboard-request-id.
func (a answer) requestID(t *testing.T) string {
	t.Helper()
	id := a.header.Get("X-Switchboard-Request-Id")
	require.True(t, strings.HasPrefix(id, "gen-"), "request id %q", id)
	return id
}

// id is the completion id the client got: the body's, or every chunk's. It
// is the request id, the activity record's id.
func (a answer) id(t *testing.T) string {
	t.Helper()
	want := a.requestID(t)
	if a.body != nil {
		require.Equal(t, want, a.body["id"], "the completion id is the request id")
		return want
	}
	require.NotEmpty(t, a.chunks)
	for _, c := range a.chunks {
		require.Equal(t, want, c["id"], "every chunk carries the request id")
	}
	return want
}

// provider is the provider that served, checked to be the same in the
// header, the body and every chunk.
func (a answer) provider(t *testing.T) string {
	t.Helper()
	p := a.header.Get("X-Switchboard-Provider")
	if a.body != nil {
		require.Equal(t, p, a.body["provider"])
	}
	for _, c := range a.chunks {
		require.Equal(t, p, c["provider"], "every chunk names the provider")
	}
	return p
}

func (a answer) content() string {
	var b strings.Builder
	if a.body != nil {
		if ch, ok := a.body["choices"].([]any); ok && len(ch) > 0 {
			msg, _ := ch[0].(map[string]any)["message"].(map[string]any)
			s, _ := msg["content"].(string)
			b.WriteString(s)
		}
	}
	for _, c := range a.chunks {
		if ch, ok := c["choices"].([]any); ok && len(ch) > 0 {
			d, _ := ch[0].(map[string]any)["delta"].(map[string]any)
			s, _ := d["content"].(string)
			b.WriteString(s)
		}
	}
	return b.String()
}

// clientUsage is the usage the client was shown, with its cost.
type clientUsage struct {
	prompt, cached, completion int64
	cost                       float64
}

// usage returns the usage object of the answer (the body's, or the stream's
// usage chunk) and whether there was one.
func (a answer) usage(t *testing.T) (clientUsage, bool) {
	t.Helper()
	var u map[string]any
	if a.body != nil {
		u, _ = a.body["usage"].(map[string]any)
	}
	for _, c := range a.chunks {
		if cu, ok := c["usage"].(map[string]any); ok {
			u = cu
		}
	}
	if u == nil {
		return clientUsage{}, false
	}
	num := func(v any) int64 { f, _ := v.(float64); return int64(f) }
	out := clientUsage{prompt: num(u["prompt_tokens"]), completion: num(u["completion_tokens"])}
	if d, ok := u["prompt_tokens_details"].(map[string]any); ok {
		out.cached = num(d["cached_tokens"])
	}
	cost, ok := u["cost"].(float64)
	require.True(t, ok, "usage.cost is a number: %v", u)
	out.cost = cost
	return out, true
}

// get sends an authenticated GET to the edge. It does not use t, so it may
// run inside require.Eventually.
func (s *stack) get(key, pathAndQuery string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, s.edge.URL()+pathAndQuery, nil)
	if err != nil {
		return 0, nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// generation is GET /v1/generation?id=: the status and, on 200, the record.
func (s *stack) generation(key, id string) (int, *switchboardv1.ActivityRecord, error) {
	code, raw, err := s.get(key, "/generation?id="+url.QueryEscape(id))
	if err != nil || code != http.StatusOK {
		return code, nil, err
	}
	var out struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return code, nil, err
	}
	rec, err := loadtest.ParseGeneration(out.Data)
	return code, rec, err
}

// record waits until the activity log has the call and returns it.
func (s *stack) record(t *testing.T, key, id string) *switchboardv1.ActivityRecord {
	t.Helper()
	var rec *switchboardv1.ActivityRecord
	require.Eventually(t, func() bool {
		code, r, err := s.generation(key, id)
		rec = r
		return err == nil && code == http.StatusOK
	}, waitFor, tick, "call %s reaches the activity log", id)
	require.Equal(t, id, rec.GetId())
	return rec
}

// activity is one page of GET /v1/activity.
func (s *stack) activity(key, query string) (int, []*switchboardv1.ActivityRecord, string, error) {
	code, raw, err := s.get(key, "/activity?"+query)
	if err != nil || code != http.StatusOK {
		return code, nil, "", err
	}
	recs, next, err := loadtest.ParseActivityPage(raw)
	return code, recs, next, err
}

// waitActivity waits until the tenant's listing holds n calls and returns them.
func (s *stack) waitActivity(t *testing.T, key string, n int) []*switchboardv1.ActivityRecord {
	t.Helper()
	var recs []*switchboardv1.ActivityRecord
	require.Eventually(t, func() bool {
		code, r, _, err := s.activity(key, "limit=500")
		recs = r
		return err == nil && code == http.StatusOK && len(r) >= n
	}, waitFor, tick, "%d calls reach the activity log", n)
	require.Len(t, recs, n)
	return recs
}

// counts are one provider's counters for the simulated model.
func (s *stack) counts(p string) provsim.ModelStats {
	return s.sim.Provider(p).Stats().Models[simModel]
}

// waitCalls waits until the providers have counted want calls in all and
// returns their counters. A provider counts a call when its handler returns,
// which may be just after the client got the answer, or, for a call the edge
// cancelled, when the provider noticed.
func (s *stack) waitCalls(t *testing.T, want int64) map[string]provsim.ModelStats {
	t.Helper()
	var got map[string]provsim.ModelStats
	total := func() int64 {
		got = map[string]provsim.ModelStats{}
		var n int64
		for _, p := range providers {
			got[p] = s.counts(p)
			n += got[p].Requests
		}
		return n
	}
	require.Eventually(t, func() bool { return total() >= want }, waitFor, tick, "the providers count %d calls", want)
	require.Equal(t, want, total(), "no other call reached a provider")
	return got
}

// plan asks the decider, without side effects, what it would do with a
// streamed request of in prompt tokens.
func (s *stack) plan(t *testing.T, in int64) (*switchboardv1.ExplainResponse, error) {
	return s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model, Stream: true,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: in},
	})
}

// warm makes one real call on each of the providers with a prompt of about
// n tokens, so the decider measures them in that size bucket — the hedge
// policy only backs up a fast endpoint with another one measured fast. The
// call is streamed (only a stream measures a first token) and limited to
// its provider (provider.only), so it is never hedged.
func (s *stack) warm(t *testing.T, n int, ps ...string) {
	t.Helper()
	for _, p := range ps {
		a := s.chat(t, testKey, chatReq{content: "warm " + p + " " + longPrompt(n), maxTokens: 2, stream: true, provider: `{"only":["` + p + `"]}`})
		require.Equal(t, http.StatusOK, a.status, "%v", a.body)
		require.Equal(t, p, a.provider(t))
	}
}

// waitForHedgePlan waits until the decider would send a streamed request of
// in tokens to primary with a hedge of the given mode on hedge.
func (s *stack) waitForHedgePlan(t *testing.T, in int64, mode switchboardv1.HedgeMode, primary, hedge string) {
	t.Helper()
	require.Eventually(t, func() bool {
		r, err := s.plan(t, in)
		return err == nil && r.GetEndpoint().GetProvider() == primary &&
			r.GetHedge().GetMode() == mode && r.GetHedge().GetEndpoint().GetProvider() == hedge
	}, waitFor, tick, "the decider plans a %s hedge of %s on %s for %d tokens", mode, primary, hedge, in)
}

// fastModel is simConfig's model: fast, 8 tokens by default, cached.
func fastModel() provsim.ModelConfig {
	return provsim.ModelConfig{
		ID: simModel, DefaultOutputTokens: 8,
		TTFT:  provsim.TTFTConfig{Base: provsim.Duration(5 * time.Millisecond)},
		Cache: provsim.CacheConfig{Enabled: true, MinTokens: 256},
	}
}

// attemptOf returns the record's attempt on provider p.
func attemptOf(t *testing.T, rec *switchboardv1.ActivityRecord, p string) *switchboardv1.Attempt {
	t.Helper()
	for _, a := range rec.GetAttempts() {
		if a.GetProvider() == p {
			return a
		}
	}
	require.Failf(t, "no attempt", "no attempt on %s in %v", p, rec.GetAttempts())
	return nil
}

// requireBilledAsServed checks the client's bill: the serving endpoint's
// price times the usage its provider reported, nothing added, the same in
// the answer, the record and the served attempt.
func requireBilledAsServed(t *testing.T, a answer, rec *switchboardv1.ActivityRecord, provider string) {
	t.Helper()
	require.Equal(t, provider, rec.GetProvider())
	require.Equal(t, attemptOf(t, rec, provider).GetEndpointId(), rec.GetEndpointId())
	require.True(t, rec.GetUsage().GetReported(), "the provider reported its usage")
	want := billUsage(provider, rec.GetUsage())
	require.InDelta(t, want, rec.GetCostUsd(), exactUSD, "record cost = %s's price x its usage", provider)
	require.InDelta(t, rec.GetCostUsd(), rec.GetUsage().GetCostUsd(), exactUSD)
	require.InDelta(t, rec.GetCostUsd(), attemptOf(t, rec, provider).GetCostUsd(), exactUSD, "the served attempt's cost is the bill")
	if u, ok := a.usage(t); ok {
		require.Equal(t, rec.GetUsage().GetInputTokens(), u.prompt)
		require.Equal(t, rec.GetUsage().GetCachedInputTokens(), u.cached)
		require.Equal(t, rec.GetUsage().GetOutputTokens(), u.completion)
		require.InDelta(t, bill(billPrices[provider], u.prompt, u.cached, u.completion), u.cost, exactUSD, "usage.cost = price x usage")
		require.InDelta(t, rec.GetCostUsd(), u.cost, exactUSD, "the client sees what the log says")
	}
}

func TestHedgingBacksUpASlowPrimary(t *testing.T) {
	s := startBilling(t, func(c *deciderapp.Config) {
		c.HedgeBudgetUSD = 100
		c.HedgeBudgetBurst = 24 * time.Hour // unpaced: the same at any hour
		c.HedgeDelay = 300 * time.Millisecond
	})
	const delayedTokens, immediateTokens = 40 * 1024, 130 * 1024

	// Both alpha (the cheapest) and beta are measured fast at both sizes.
	s.warm(t, delayedTokens, "alpha", "beta")
	s.warm(t, immediateTokens, "alpha", "beta")
	s.waitForHedgePlan(t, delayedTokens, switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, "alpha", "beta")
	s.waitForHedgePlan(t, immediateTokens, switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, "alpha", "beta")

	// Now alpha is slow on every call; the decider still believes it fast.
	slow := fastModel()
	slow.TTFT.Base = provsim.Duration(5 * time.Second)
	require.NoError(t, s.sim.Provider("alpha").SetModel(slow))
	calls := int64(4) // the warm-up calls; each hedged request adds two
	var budgetSpent float64

	t.Run("delayed: a second endpoint after the hedge delay", func(t *testing.T) {
		c0 := s.waitCalls(t, calls)
		alpha0, beta0 := c0["alpha"], c0["beta"]
		content := "delayed hedge " + longPrompt(delayedTokens)
		a := s.chat(t, testKey, chatReq{content: content, stream: true, includeUsage: true, maxTokens: 6})
		require.Equal(t, http.StatusOK, a.status, "%v", a.body)
		require.True(t, a.done, "a complete stream")
		require.Nil(t, a.errEvent)
		require.Equal(t, "beta", a.provider(t), "the fast hedge's tokens stream to the client")
		require.Len(t, strings.Fields(a.content()), 6)
		id := a.id(t)

		rec := s.record(t, testKey, id)
		require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_OK, rec.GetStatus())
		require.EqualValues(t, http.StatusOK, rec.GetHttpStatus())
		require.True(t, rec.GetStream())
		require.Equal(t, "acme", rec.GetTenantId())
		require.Len(t, rec.GetAttempts(), 2, "%v", rec.GetAttempts())
		primary, hedge := rec.GetAttempts()[0], rec.GetAttempts()[1]
		require.Equal(t, "alpha", primary.GetProvider())
		require.False(t, primary.GetHedge())
		require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, primary.GetOutcome(), "the slow leg is cancelled")
		require.Nil(t, primary.GetTtft(), "no token came from the slow leg")
		require.Equal(t, "beta", hedge.GetProvider())
		require.True(t, hedge.GetHedge())
		require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, hedge.GetOutcome())
		// A lower bound, not a timing: the hedge may not start before the delay.
		require.GreaterOrEqual(t, hedge.GetStartTime().AsTime().Sub(primary.GetStartTime().AsTime()), 300*time.Millisecond,
			"the hedge started after the hedge delay")

		h := rec.GetHedge()
		require.True(t, h.GetUsed())
		require.Equal(t, switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, h.GetMode())
		require.Equal(t, hedge.GetEndpointId(), h.GetWinnerEndpointId())
		require.Equal(t, primary.GetEndpointId(), h.GetLoserEndpointId())
		require.Positive(t, h.GetLoserCostUsd())
		// docs/routing.md, "Hedging": a cancelled leg counts as its prompt at the
		// endpoint's uncached input price, paid from the hedge budget.
		require.InDelta(t, bill(billPrices["alpha"], promptTokens(content), 0, 0), h.GetLoserCostUsd(), exactUSD)
		require.InDelta(t, h.GetLoserCostUsd(), primary.GetCostUsd(), exactUSD)

		// The client pays the winner's price for the winner's usage: the
		// cancelled leg is not on its bill.
		requireBilledAsServed(t, a, rec, "beta")
		u, ok := a.usage(t)
		require.True(t, ok)
		require.Equal(t, promptTokens(content), u.prompt)
		require.EqualValues(t, 6, u.completion)
		require.InDelta(t, bill(billPrices["beta"], u.prompt, u.cached, u.completion), rec.GetCostUsd(), exactUSD)

		// What the providers saw: beta served exactly the billed usage;
		// alpha's call was cancelled, never completed.
		calls += 2
		c1 := s.waitCalls(t, calls)
		alpha1, beta1 := c1["alpha"], c1["beta"]
		require.Equal(t, beta0.Requests+1, beta1.Requests)
		require.Equal(t, beta0.Outcomes.OK+1, beta1.Outcomes.OK)
		require.Equal(t, u.prompt, beta1.PromptTokens-beta0.PromptTokens)
		require.Equal(t, u.cached, beta1.CachedTokens-beta0.CachedTokens)
		require.Equal(t, u.completion, beta1.CompletionTokens-beta0.CompletionTokens)
		require.Equal(t, alpha0.Requests+1, alpha1.Requests)
		require.Equal(t, alpha0.Outcomes.Cancelled+alpha0.Outcomes.Hang+1, alpha1.Outcomes.Cancelled+alpha1.Outcomes.Hang,
			"alpha saw its call cancelled")
		require.Equal(t, alpha0.Outcomes.OK, alpha1.Outcomes.OK, "the slow call never completed")
		require.Equal(t, alpha0.CompletionTokens, alpha1.CompletionTokens)

		// The loser is paid from the hedge budget: once the record is in,
		// the estimate charged when the hedge was granted is settled to the
		// loser's cost (the first hedge of this system).
		spent, _, granted, refused := s.decider.HedgeBudget()
		require.EqualValues(t, 1, granted)
		require.Zero(t, refused)
		require.InDelta(t, h.GetLoserCostUsd(), spent, exactUSD)
		budgetSpent = spent
	})

	t.Run("immediate: both endpoints at once over 128k", func(t *testing.T) {
		c0 := s.waitCalls(t, calls)
		alpha0, beta0 := c0["alpha"], c0["beta"]
		content := "immediate hedge " + longPrompt(immediateTokens)
		a := s.chat(t, testKey, chatReq{content: content, stream: true, includeUsage: true, maxTokens: 4})
		require.Equal(t, http.StatusOK, a.status, "%v", a.body)
		require.True(t, a.done)
		require.Equal(t, "beta", a.provider(t), "alpha is slow: beta's first token wins")
		rec := s.record(t, testKey, a.id(t))

		h := rec.GetHedge()
		require.True(t, h.GetUsed())
		require.Equal(t, switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, h.GetMode())
		require.Len(t, rec.GetAttempts(), 2, "%v", rec.GetAttempts())
		alpha, beta := attemptOf(t, rec, "alpha"), attemptOf(t, rec, "beta")
		require.NotEqual(t, alpha.GetHedge(), beta.GetHedge(), "one leg is the hedge")
		require.Equal(t, beta.GetEndpointId(), h.GetWinnerEndpointId())
		require.Equal(t, alpha.GetEndpointId(), h.GetLoserEndpointId(), "one is the loser")
		require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, alpha.GetOutcome())
		require.Positive(t, h.GetLoserCostUsd())
		requireBilledAsServed(t, a, rec, "beta")

		// Both providers got the request: neither waited for the other.
		calls += 2
		c1 := s.waitCalls(t, calls)
		require.Equal(t, beta0.Requests+1, c1["beta"].Requests)
		require.Equal(t, alpha0.Requests+1, c1["alpha"].Requests)
		require.Equal(t, alpha0.Outcomes.Cancelled+alpha0.Outcomes.Hang+1, c1["alpha"].Outcomes.Cancelled+c1["alpha"].Outcomes.Hang,
			"alpha saw its call cancelled")
		require.Equal(t, alpha0.CompletionTokens, c1["alpha"].CompletionTokens)

		spent, _, granted, _ := s.decider.HedgeBudget()
		require.EqualValues(t, 2, granted)
		require.InDelta(t, budgetSpent+h.GetLoserCostUsd(), spent, exactUSD, "both losers, and nothing else, paid from the budget")
		budgetSpent = spent
	})

	t.Run("the client leaves during the race and pays nothing", func(t *testing.T) {
		// Neither leg answers before the client leaves, which it does once
		// both legs reached their providers, however long that took.
		stuck := fastModel()
		stuck.TTFT.Base = provsim.Duration(10 * time.Minute)
		require.NoError(t, s.sim.Provider("alpha").SetModel(stuck))
		require.NoError(t, s.sim.Provider("beta").SetModel(stuck))
		c0 := s.waitCalls(t, calls)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		body := chatReq{content: "leaving " + longPrompt(immediateTokens), stream: true, includeUsage: true, maxTokens: 4}.body()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.edge.URL()+"/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+testKey)
		errc := make(chan error, 1)
		// A provider counts a call as started once it has read its body: a
		// request counted on arrival may still lose its body to the client
		// leaving, and never be recorded as a call.
		arrived := func() int64 {
			return s.sim.Provider("alpha").Stats().Started + s.sim.Provider("beta").Stats().Started
		}
		arrived0 := arrived()
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		require.Eventually(t, func() bool { return arrived() == arrived0+2 }, waitFor, tick, "both legs reach their providers")
		cancel()
		require.Error(t, <-errc, "no answer before the client gives up")

		// The id is not known to the client; the newest call in its log is this one.
		var rec *switchboardv1.ActivityRecord
		require.Eventually(t, func() bool {
			code, recs, _, err := s.activity(testKey, "limit=1")
			if err != nil || code != http.StatusOK || len(recs) == 0 || recs[0].GetStatus() != switchboardv1.CallStatus_CALL_STATUS_CLIENT_CANCELLED {
				return false
			}
			rec = recs[0]
			return true
		}, waitFor, tick, "the abandoned call reaches the activity log")
		require.Zero(t, rec.GetCostUsd(), "nothing was delivered: the client pays nothing")
		require.Len(t, rec.GetAttempts(), 2)
		h := rec.GetHedge()
		require.True(t, h.GetUsed())
		hedgeLeg := rec.GetAttempts()[1]
		require.True(t, hedgeLeg.GetHedge())
		require.Equal(t, hedgeLeg.GetEndpointId(), h.GetLoserEndpointId(), "the hedge leg is the extra call the budget paid")
		require.Positive(t, h.GetLoserCostUsd())
		for _, at := range rec.GetAttempts() {
			require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, at.GetOutcome())
		}
		calls += 2
		c1 := s.waitCalls(t, calls)
		for _, p := range []string{"alpha", "beta"} {
			require.Equal(t, c0[p].Outcomes.Cancelled+c0[p].Outcomes.Hang+1, c1[p].Outcomes.Cancelled+c1[p].Outcomes.Hang, "%s saw its call cancelled", p)
		}
		spent, _, _, _ := s.decider.HedgeBudget()
		require.InDelta(t, budgetSpent+h.GetLoserCostUsd(), spent, exactUSD)
	})
}

// fakeClock is the decider's injected clock: real time plus an offset the
// test moves forward, or, once frozen, a fixed time plus that offset.
type fakeClock struct {
	mu     sync.Mutex
	offset time.Duration
	frozen bool
	at     time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen {
		return c.at.Add(c.offset)
	}
	return time.Now().Add(c.offset)
}

// Freeze stops the clock where it is; only Advance moves it on.
func (c *fakeClock) Freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.offset, c.frozen = time.Now().Add(c.offset), 0, true
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

func TestBudgetForHedgesRunsOutAndRefillsAtUTCMidnight(t *testing.T) {
	// The decider's clock starts at 23:55 UTC on the day before today:
	// behind the real clock, so the edge's (real) report times are never
	// in its past beyond the statistics' 15-minute window.
	now := time.Now().UTC()
	start := now.Truncate(24 * time.Hour).Add(-5 * time.Minute)
	clock := &fakeClock{offset: start.Sub(now)}

	const n = 40 * 1024
	contents := []string{"budget-1 " + longPrompt(n), "budget-2 " + longPrompt(n), "budget-3 " + longPrompt(n)}
	in := promptTokens(contents[0])
	// AcquireHedge charges the larger of the two legs' possible loser costs
	// (beta's, at 0.20/M). The budget holds that once, not twice — whichever
	// leg loses the first race, and whether or not it was settled yet.
	estimate := bill(billPrices["beta"], in, 0, 0)
	budget := 1.2 * estimate

	s := startBilling(t, func(c *deciderapp.Config) {
		c.HedgeBudgetUSD = budget
		// Unpaced: this test is about the day's amount and its refill at
		// midnight, which pacing would hold back to an hour's share just
		// after it.
		c.HedgeBudgetBurst = 24 * time.Hour
		// Both legs at once from 32k: the hedge is asked for whatever the
		// providers' speed, which keeps this test about the budget.
		c.HedgeImmediateFrom = 32 * 1024
		c.Now = clock.Now
	})
	s.warm(t, n, "alpha", "beta")
	s.waitForHedgePlan(t, in, switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, "alpha", "beta")

	calls := int64(2) // the warm-up calls
	hedged := func(content string) *switchboardv1.ActivityRecord {
		t.Helper()
		a := s.chat(t, testKey, chatReq{content: content, stream: true, includeUsage: true, maxTokens: 3})
		require.Equal(t, http.StatusOK, a.status, "%v", a.body)
		require.True(t, a.done)
		rec := s.record(t, testKey, a.id(t))
		requireBilledAsServed(t, a, rec, a.provider(t))
		return rec
	}

	// The first long request is hedged.
	rec := hedged(contents[0])
	require.True(t, rec.GetHedge().GetUsed(), "%v", rec.GetHedge())
	require.Len(t, rec.GetAttempts(), 2)
	calls += 2
	s.waitCalls(t, calls)
	spent, daily, granted, refused := s.decider.HedgeBudget()
	require.InDelta(t, budget, daily, exactUSD)
	require.EqualValues(t, 1, granted)
	require.Zero(t, refused)
	require.InDelta(t, rec.GetHedge().GetLoserCostUsd(), spent, exactUSD, "the loser's cost is what the budget paid")

	// The budget is spent: the next one uses one endpoint.
	rec = hedged(contents[1])
	require.False(t, rec.GetHedge().GetUsed(), "%v", rec.GetHedge())
	require.Empty(t, rec.GetHedge().GetLoserEndpointId())
	require.Zero(t, rec.GetHedge().GetLoserCostUsd())
	require.Len(t, rec.GetAttempts(), 1, "%v", rec.GetAttempts())
	calls++
	s.waitCalls(t, calls) // only one provider was called (checked again at the end)
	spent2, _, granted, refused := s.decider.HedgeBudget()
	require.EqualValues(t, 1, granted)
	require.GreaterOrEqual(t, refused, int64(1))
	require.Equal(t, spent, spent2, "an unhedged request costs the budget nothing")

	// Past 00:00 UTC the budget is whole again. Minutes, not hours: the
	// routing statistics age with the same clock.
	clock.Advance(6 * time.Minute)
	require.Equal(t, start.Add(24*time.Hour).Format(time.DateOnly), clock.Now().UTC().Format(time.DateOnly), "a new UTC day")
	spent, _, _, _ = s.decider.HedgeBudget()
	require.Zero(t, spent, "a new day starts with nothing spent")
	s.waitForHedgePlan(t, in, switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, "alpha", "beta")

	rec = hedged(contents[2])
	require.True(t, rec.GetHedge().GetUsed(), "%v", rec.GetHedge())
	require.Len(t, rec.GetAttempts(), 2)
	calls += 2
	s.waitCalls(t, calls)
	spent, _, granted2, refused2 := s.decider.HedgeBudget()
	require.EqualValues(t, 2, granted2)
	require.Equal(t, refused, refused2)
	require.InDelta(t, rec.GetHedge().GetLoserCostUsd(), spent, exactUSD)
}

func TestRetriesGoToADifferentEndpointEachTime(t *testing.T) {
	// One refusal benches an endpoint (the first-refusal rule), so the
	// second request shows benched endpoints kept as fallbacks.
	s := startBilling(t, func(c *deciderapp.Config) { c.CooldownRule = "first-refusal" })
	// alpha and beta, the two cheapest, answer every call with a 503.
	for _, p := range []string{"alpha", "beta"} {
		m := fastModel()
		m.Faults = []provsim.FaultConfig{{Kind: "unavailable", Rate: 1}}
		require.NoError(t, s.sim.Provider(p).SetModel(m))
	}

	a := s.chat(t, testKey, chatReq{content: "retry me please", maxTokens: 5})
	require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	require.Equal(t, "gamma", a.provider(t), "the healthy third endpoint served")
	rec := s.record(t, testKey, a.id(t))

	require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_OK, rec.GetStatus())
	require.Len(t, rec.GetAttempts(), 3, "%v", rec.GetAttempts())
	seen := map[string]bool{}
	for i, want := range []struct {
		provider string
		outcome  switchboardv1.Outcome
		status   int32
	}{
		{"alpha", switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, 503},
		{"beta", switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, 503},
		{"gamma", switchboardv1.Outcome_OUTCOME_OK, 200},
	} {
		at := rec.GetAttempts()[i]
		require.Equal(t, want.provider, at.GetProvider(), "attempt %d", i)
		require.Equal(t, want.outcome, at.GetOutcome(), "attempt %d", i)
		require.Equal(t, want.status, at.GetHttpStatus(), "attempt %d", i)
		require.False(t, seen[at.GetEndpointId()], "attempt %d goes to an endpoint not tried yet", i)
		seen[at.GetEndpointId()] = true
		if i > 0 {
			require.False(t, at.GetStartTime().AsTime().Before(rec.GetAttempts()[i-1].GetStartTime().AsTime()), "attempts in order")
		}
		if want.outcome != switchboardv1.Outcome_OUTCOME_OK {
			require.NotEmpty(t, at.GetError())
			require.Zero(t, at.GetCostUsd(), "a failed attempt costs nothing")
		}
	}
	// Only the third endpoint's call is billed.
	requireBilledAsServed(t, a, rec, "gamma")
	u, ok := a.usage(t)
	require.True(t, ok)
	require.Equal(t, u.cost, rec.GetCostUsd())
	c := s.waitCalls(t, 3)
	require.EqualValues(t, 1, c["alpha"].Outcomes.Unavailable)
	require.EqualValues(t, 1, c["beta"].Outcomes.Unavailable)
	g := c["gamma"]
	require.EqualValues(t, 1, g.Outcomes.OK)
	require.Equal(t, rec.GetUsage().GetInputTokens(), g.PromptTokens)
	require.Equal(t, rec.GetUsage().GetOutputTokens(), g.CompletionTokens)

	// The refusals benched alpha and beta: once the decider knows, the next
	// request goes to gamma in one attempt. The benched endpoints stay behind
	// it as fallbacks, so a failure of gamma would still have somewhere to go.
	require.Eventually(t, func() bool {
		r, err := s.plan(t, 10)
		if err != nil || r.GetEndpoint().GetProvider() != "gamma" || len(r.GetFallbacks()) != 2 {
			return false
		}
		return r.GetFallbacks()[0].GetProvider() == "alpha" && r.GetFallbacks()[1].GetProvider() == "beta"
	}, waitFor, tick, "alpha and beta cool down")
	a = s.chat(t, testKey, chatReq{content: "after the cool-down", stream: true, includeUsage: true, maxTokens: 3})
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, "gamma", a.provider(t))
	rec = s.record(t, testKey, a.id(t))
	require.Len(t, rec.GetAttempts(), 1)
	requireBilledAsServed(t, a, rec, "gamma")
	c = s.waitCalls(t, 4)
	require.EqualValues(t, 1, c["alpha"].Requests)
	require.EqualValues(t, 1, c["beta"].Requests)
}

func TestAllFailCostsNothing(t *testing.T) {
	s := startBilling(t, nil)
	// The directive makes every provider answer 503.
	a := s.chat(t, testKey, chatReq{content: "[[provsim:fault=unavailable]] nobody can", stream: true, includeUsage: true, maxTokens: 5})
	require.Equal(t, http.StatusServiceUnavailable, a.status, "%v", a.body)
	e, ok := a.body["error"].(map[string]any)
	require.True(t, ok, "OpenAI error JSON: %v", a.body)
	for _, p := range providers {
		require.Contains(t, e["message"], p, "the message lists every attempt")
	}
	rec := s.record(t, testKey, a.requestID(t))

	require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_FAILED, rec.GetStatus())
	require.EqualValues(t, http.StatusServiceUnavailable, rec.GetHttpStatus())
	require.Zero(t, rec.GetCostUsd(), "a call that fails on every attempt costs 0")
	require.Zero(t, rec.GetUsage().GetCostUsd())
	require.Zero(t, rec.GetUsage().GetInputTokens()+rec.GetUsage().GetOutputTokens())
	require.Empty(t, rec.GetEndpointId(), "no endpoint served")
	require.NotEmpty(t, rec.GetError())
	require.Len(t, rec.GetAttempts(), 3, "%v", rec.GetAttempts())
	var got []string
	for _, at := range rec.GetAttempts() {
		got = append(got, at.GetProvider())
		require.Equal(t, switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, at.GetOutcome())
		require.EqualValues(t, 503, at.GetHttpStatus())
		require.Zero(t, at.GetCostUsd())
		require.NotEmpty(t, at.GetError())
	}
	require.Equal(t, providers, got, "every endpoint, cheapest first, each once")
	c := s.waitCalls(t, 3)
	for _, p := range providers {
		require.EqualValues(t, 1, c[p].Outcomes.Unavailable, p)
	}
}

func TestMidStreamFailureBillsWhatWasDelivered(t *testing.T) {
	s := startBilling(t, nil)
	content := "[[provsim:fault=drop]] one two three four five six"
	const maxTokens = 50
	a := s.chat(t, testKey, chatReq{content: content, stream: true, includeUsage: true, maxTokens: maxTokens})
	require.Equal(t, http.StatusOK, a.status)
	require.False(t, a.done, "no [DONE] after a broken stream")
	require.NotNil(t, a.errEvent, "the stream ends with an error event")
	require.Equal(t, "stream_interrupted", a.errEvent["error"].(map[string]any)["code"])
	require.NotEmpty(t, strings.TrimSpace(a.content()), "some tokens were delivered")
	require.Equal(t, "alpha", a.provider(t))
	rec := s.record(t, testKey, a.id(t))

	require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_INTERRUPTED, rec.GetStatus())
	require.EqualValues(t, http.StatusOK, rec.GetHttpStatus())
	require.Equal(t, "alpha", rec.GetProvider())
	require.Len(t, rec.GetAttempts(), 1, "no retry once bytes reached the client")
	require.Equal(t, switchboardv1.Outcome_OUTCOME_DROPPED, rec.GetAttempts()[0].GetOutcome())
	u := rec.GetUsage()
	t.Logf("interrupted call billed for %v (reported=%v)", u, u.GetReported())
	require.Positive(t, u.GetOutputTokens())
	require.Less(t, u.GetOutputTokens(), int64(maxTokens))
	if !u.GetReported() {
		// The edge's estimate: its prompt estimate in, the text the client
		// really got out.
		require.Equal(t, promptTokens(content), u.GetInputTokens(), "the estimate bills the prompt estimate")
		require.Equal(t, tokens.Text(a.content()), u.GetOutputTokens(), "the estimate bills the delivered text")
	}
	full := bill(billPrices["alpha"], promptTokens(content), 0, maxTokens)
	require.Positive(t, rec.GetCostUsd())
	require.Less(t, rec.GetCostUsd(), full, "less than the full answer would have cost")
	require.InDelta(t, billUsage("alpha", u), rec.GetCostUsd(), exactUSD)
	if cu, ok := a.usage(t); ok {
		require.InDelta(t, rec.GetCostUsd(), cu.cost, exactUSD)
	}

	c := s.waitCalls(t, 1) // no retry after bytes reached the client
	require.EqualValues(t, 1, c["alpha"].Outcomes.Drop)
}

func TestBillingMatchesProvidersCounts(t *testing.T) {
	s := startBilling(t, nil)
	// Three conversations, each sent several times so that later turns are
	// served from the providers' prompt caches, spread over the providers
	// by smart routing and by the client's own provider options.
	prompts := []string{
		"first topic " + longPrompt(600),
		"second topic " + longPrompt(1500),
		"third topic " + longPrompt(3000),
	}
	routes := []string{"", "", `{"only":["beta"]}`, `{"only":["gamma"]}`, `{"order":["gamma","beta"]}`}
	type sent struct {
		id     string
		answer answer
	}
	var calls []sent
	for i := range 20 {
		r := chatReq{
			content:      prompts[i%len(prompts)],
			stream:       i%2 == 0,
			includeUsage: i%4 == 0,
			maxTokens:    []int{0, 3, 5, 9}[i%4], // 0: the provider's default length
			provider:     routes[i%len(routes)],
		}
		a := s.chat(t, testKey, r)
		require.Equal(t, http.StatusOK, a.status, "call %d: %v", i, a.body)
		require.True(t, a.body != nil || a.done, "call %d complete", i)
		calls = append(calls, sent{id: a.id(t), answer: a})
	}

	recs := s.waitActivity(t, testKey, len(calls))
	byID := map[string]*switchboardv1.ActivityRecord{}
	for _, r := range recs {
		byID[r.GetId()] = r
	}
	for i, c := range calls {
		rec := byID[c.id]
		require.NotNil(t, rec, "call %d (%s) is in the activity log", i, c.id)
		require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_OK, rec.GetStatus())
		require.Len(t, rec.GetAttempts(), 1)
		requireBilledAsServed(t, c.answer, rec, c.answer.provider(t))
	}

	// The activity log against the providers' own counts, provider by
	// provider and in total; the bill against their prices.
	var billed, charged float64
	var logIn, logCached, logOut, simIn, simCached, simOut int64
	usedProviders := 0
	counts := s.waitCalls(t, int64(len(calls)))
	for _, p := range providers {
		var in, cached, out int64
		for _, r := range recs {
			if r.GetProvider() == p {
				in += r.GetUsage().GetInputTokens()
				cached += r.GetUsage().GetCachedInputTokens()
				out += r.GetUsage().GetOutputTokens()
				billed += r.GetCostUsd()
			}
		}
		st := counts[p]
		require.Equal(t, st.PromptTokens, in, "%s: prompt tokens", p)
		require.Equal(t, st.CachedTokens, cached, "%s: cached tokens", p)
		require.Equal(t, st.CompletionTokens, out, "%s: completion tokens", p)
		require.Equal(t, st.Requests, st.Outcomes.OK, "%s: every call completed", p)
		charged += bill(billPrices[p], st.PromptTokens, st.CachedTokens, st.CompletionTokens)
		logIn, logCached, logOut = logIn+in, logCached+cached, logOut+out
		simIn, simCached, simOut = simIn+st.PromptTokens, simCached+st.CachedTokens, simOut+st.CompletionTokens
		if st.Requests > 0 {
			usedProviders++
		}
	}
	require.Equal(t, simIn, logIn)
	require.Equal(t, simCached, logCached)
	require.Equal(t, simOut, logOut)
	require.Positive(t, logCached, "repeated prompts were served from cache")
	require.Equal(t, 3, usedProviders, "every provider served some calls")
	require.InDelta(t, charged, billed, 1e-9, "the bill sums to what the providers charge")
	require.Equal(t, fmt.Sprintf("%.2f", charged), fmt.Sprintf("%.2f", billed), "to the cent")
	t.Logf("%d calls, %d prompt (%d cached) and %d completion tokens, billed %.10f USD", len(recs), logIn, logCached, logOut, billed)
}

func TestTenantIsolationOfTheActivityLog(t *testing.T) {
	s := startBilling(t, nil)
	var idsA []string
	for i := range 2 {
		a := s.chat(t, testKey, chatReq{content: fmt.Sprintf("acme call %d", i), maxTokens: 2})
		require.Equal(t, http.StatusOK, a.status, "%v", a.body)
		idsA = append(idsA, a.id(t))
	}
	b := s.chat(t, otherKey, chatReq{content: "globex call", stream: true, maxTokens: 2})
	require.Equal(t, http.StatusOK, b.status)
	idB := b.id(t)

	recA := s.record(t, testKey, idsA[0])
	require.Equal(t, "acme", recA.GetTenantId())
	recB := s.record(t, otherKey, idB)
	require.Equal(t, "globex", recB.GetTenantId())

	// Another tenant's call is as unknown as a call that never was.
	notFound := func(key, id string) map[string]any {
		code, raw, err := s.get(key, "/generation?id="+url.QueryEscape(id))
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, code, "%s", raw)
		var body map[string]any
		require.NoError(t, json.Unmarshal(raw, &body))
		e := body["error"].(map[string]any)
		require.NotContains(t, string(raw), "acme")
		return map[string]any{"type": e["type"], "code": e["code"], "param": e["param"]}
	}
	require.Equal(t, notFound(otherKey, "gen-doesnotexist"), notFound(otherKey, idsA[0]))
	notFound(testKey, idB)

	// Each tenant's listing has its own calls only.
	recsA := s.waitActivity(t, testKey, 2)
	recsB := s.waitActivity(t, otherKey, 1)
	require.Equal(t, idB, recsB[0].GetId())
	require.Equal(t, "globex", recsB[0].GetTenantId())
	var gotA []string
	for _, r := range recsA {
		require.Equal(t, "acme", r.GetTenantId())
		gotA = append(gotA, r.GetId())
	}
	require.ElementsMatch(t, idsA, gotA)

	// No key, or a wrong one, reads nothing.
	for _, key := range []string{"", "sk-wrong"} {
		for _, path := range []string{"/activity", "/generation?id=" + idsA[0]} {
			code, raw, err := s.get(key, path)
			require.NoError(t, err)
			require.Equal(t, http.StatusUnauthorized, code, "key %q %s: %s", key, path, raw)
			require.NotContains(t, string(raw), idsA[0])
		}
	}
}

func TestActivityPagingAndCompletionIDs(t *testing.T) {
	s := startBilling(t, nil)
	var ids []string
	for i := range 5 {
		a := s.chat(t, testKey, chatReq{content: fmt.Sprintf("page call %d", i), stream: i%2 == 1, includeUsage: i == 3, maxTokens: 2})
		require.Equal(t, http.StatusOK, a.status, "%v", a.body)
		// The completion id the client got is the request id and the
		// activity record's id.
		id := a.id(t)
		require.Equal(t, id, s.record(t, testKey, id).GetId())
		ids = append(ids, id)
	}
	slices.Reverse(ids) // newest first
	all := s.waitActivity(t, testKey, len(ids))
	var listed []string
	for _, r := range all {
		listed = append(listed, r.GetId())
	}
	require.Equal(t, ids, listed, "newest first")

	// Pages of two follow the cursor to the end, each call exactly once.
	var paged []string
	var sizes []int
	cursor := ""
	for range 10 {
		q := url.Values{"limit": {"2"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		code, recs, next, err := s.activity(testKey, q.Encode())
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		sizes = append(sizes, len(recs))
		for _, r := range recs {
			paged = append(paged, r.GetId())
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, []int{2, 2, 1}, sizes)
	require.Equal(t, ids, paged)

	// A page that holds everything has no next cursor.
	code, recs, next, err := s.activity(testKey, "limit=5")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, recs, 5)
	require.Empty(t, next)

	// A cursor is the tenant's own: another tenant cannot page with it.
	_, _, next, err = s.activity(testKey, "limit=1")
	require.NoError(t, err)
	require.NotEmpty(t, next)
	code, recs, _, _ = s.activity(otherKey, "limit=1&cursor="+url.QueryEscape(next))
	require.Equal(t, http.StatusBadRequest, code, "%v", recs)
	for _, bad := range []string{"limit=0", "limit=501", "limit=x"} {
		code, _, _, _ := s.activity(testKey, bad)
		require.Equal(t, http.StatusBadRequest, code, bad)
	}
}
