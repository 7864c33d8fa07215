package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// pairSim is two simulated providers of the same model, equally fast, both
// with prompt caches. 25 ms to the first token: under 20 ms after the tests'
// thousands of uncached tokens would not be believed (observe.MinTTFT).
const pairSim = `
seed: 5
providers:
  - name: warm
    listen: 127.0.0.1:0
    models:
      - id: sim-model
        default_output_tokens: 4
        ttft: {base: 25ms}
        cache: {enabled: true, min_tokens: 256}
  - name: plain
    listen: 127.0.0.1:0
    models:
      - id: sim-model
        default_output_tokens: 4
        ttft: {base: 25ms}
        cache: {enabled: true, min_tokens: 256}
`

// startPair starts pairSim, a decider whose catalog prices warm and plain
// as given (YAML flow maps of input, cached_input, output), and an edge.
// tune adjusts the decider's configuration.
func startPair(t *testing.T, warmPrice, plainPrice string, tune func(*deciderapp.Config)) *stack {
	t.Helper()
	return startStack(t, stackOptions{sim: pairSim, tune: tune, catalog: func(url func(string) string) string {
		return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: warm,  base_url: %[2]s, upstream_model: sim-model, context_length: 200000, price: %[3]s}
      - {provider: plain, base_url: %[4]s, upstream_model: sim-model, context_length: 200000, price: %[5]s}
tenants:
  - {id: acme, api_keys_sha256: [%[6]s]}
  - {id: globex, api_keys_sha256: [%[7]s]}
`, model, url("warm"), warmPrice, url("plain"), plainPrice, catalog.HashKey(testKey), catalog.HashKey(otherKey))
	}})
}

// TestFreshPromptIsNotPricedAsCachedElsewhere reproduces a cached-token
// estimate taken from the wrong evidence: after one cached conversation on
// warm (cheap cache reads, dearer input), fresh long prompts were priced as
// if warm held them — by warm's hit rate on that other conversation — and
// all sent there at its full input price, though plain charges less for a
// prompt nobody has cached. A fresh prompt must go to plain; the
// conversation warm holds must stay there.
func TestFreshPromptIsNotPricedAsCachedElsewhere(t *testing.T) {
	p := startPair(t, "{input: 0.20, cached_input: 0.02, output: 0.80}", "{input: 0.12, cached_input: 0.06, output: 0.80}", nil)
	const size = 60 * 1024

	// One long conversation on warm, four turns: turns 2-4 read the
	// system prompt from warm's cache.
	system := `{"role":"system","content":"` + longPrompt(size) + `"}`
	msgs := system
	for turn := range 4 {
		msgs += fmt.Sprintf(`,{"role":"user","content":"question %d"}`, turn)
		// Streamed, as is plain's below: only a stream measures a first token.
		code, _, body := p.post(t, testKey, `{"model":"`+model+`","stream":true,"max_tokens":4,"provider":{"only":["warm"]},"messages":[`+msgs+`]}`)
		require.Equal(t, http.StatusOK, code, "%v", body)
		msgs += `,{"role":"assistant","content":"answer"}`
	}
	require.Positive(t, p.sim.Provider("warm").Stats().Models[simModel].CachedTokens, "warm really served from its cache")
	// plain served long prompts too (nothing cached), so both are measured
	// as equally fast at this size and both qualify.
	for i := range 2 {
		code, _, body := p.post(t, testKey, chat(fmt.Sprintf("plain-%d", i), size, `"stream":true,"provider":{"only":["plain"]},`))
		require.Equal(t, http.StatusOK, code, "%v", body)
	}

	// The decider learnt warm's hit rate: a caller that sends no prefixes
	// gets it as the estimate.
	require.Eventually(t, func() bool {
		resp, err := p.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
			Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: size, MaxOutputTokens: 4},
		})
		require.NoError(t, err)
		ok := len(resp.GetDecision().GetCandidates()) == 2
		for _, c := range resp.GetDecision().GetCandidates() {
			ok = ok && c.GetSamples() > 0
			if c.GetProvider() == "warm" {
				ok = ok && c.GetEstimatedCachedTokens() > size/2
			}
		}
		return ok
	}, waitFor, tick, "the decider learns warm's cache-hit rate and both speeds")

	// Fresh long prompts, from another tenant: cached nowhere.
	var got []string
	for i := range 6 {
		code, hdr, body := p.post(t, otherKey, chat(fmt.Sprintf("fresh-%d", i), size, ""))
		require.Equal(t, http.StatusOK, code, "%v", body)
		got = append(got, fmt.Sprint(body["provider"], " ", hdr.Get("x-switchboard-route")))
	}
	for _, g := range got {
		require.True(t, strings.HasPrefix(g, "plain "), "a fresh prompt goes to the cheaper uncached input: %q", got)
	}

	// The conversation's next turn is cached on warm, and priced so.
	msgs += `,{"role":"user","content":"question 5"}`
	code, hdr, body := p.post(t, testKey, `{"model":"`+model+`","max_tokens":4,"messages":[`+msgs+`]}`)
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, "warm", body["provider"], hdr.Get("x-switchboard-route"))

	// sort=price and :floor order by the same per-request cost.
	for _, extra := range []struct{ name, model, provider string }{
		{"sort=price", model, `"provider":{"sort":"price"},`},
		{":floor", model + ":floor", ``},
	} {
		b := strings.Replace(chat("fresh-"+extra.name, size, extra.provider), `"model":"`+model+`"`, `"model":"`+extra.model+`"`, 1)
		code, _, body := p.post(t, otherKey, b)
		require.Equal(t, http.StatusOK, code, "%v", body)
		require.Equal(t, "plain", body["provider"], extra.name)
	}
}
