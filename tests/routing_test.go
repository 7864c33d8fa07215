package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// The smart-routing scenario: cheap is the cheapest but slow on long
// prompts; fast is fast at every size and has the cheapest cache reads;
// reseller has cheaper uncached input than fast but charges 50x more for
// cache reads, and is slow above 128k.
const smartSim = `
seed: 11
providers:
  - name: cheap
    listen: 127.0.0.1:0
    models:
      - id: sim-model
        default_output_tokens: 4
        ttft: {base: 20ms, by_bucket: {"32k-128k": {base: 2500ms}, ">128k": {base: 4s}}}
        cache: {enabled: true, min_tokens: 256}
  - name: fast
    listen: 127.0.0.1:0
    models:
      - id: sim-model
        default_output_tokens: 4
        ttft: {base: 60ms}
        cache: {enabled: true, min_tokens: 256}
  - name: reseller
    listen: 127.0.0.1:0
    models:
      - id: sim-model
        default_output_tokens: 4
        ttft: {base: 80ms, by_bucket: {"32k-128k": {base: 400ms}, ">128k": {base: 3s}}}
        cache: {enabled: true, min_tokens: 256}
`

func startSmart(t *testing.T) *stack {
	t.Helper()
	return startStack(t, stackOptions{sim: smartSim, restartable: true,
		catalog: func(url func(string) string) string {
			return fmt.Sprintf(`
models:
  - id: %[1]s
    list_price: {input: 1.00, cached_input: 0.25, output: 4.00}
    endpoints:
      - {provider: cheap,    base_url: %[2]s, upstream_model: sim-model, context_length: 200000, price: {input: 0.10, cached_input: 0.05,   output: 0.50}}
      - {provider: fast,     base_url: %[3]s, upstream_model: sim-model, context_length: 200000, price: {input: 0.30, cached_input: 0.0013, output: 1.10}}
      - {provider: reseller, base_url: %[4]s, upstream_model: sim-model, context_length: 200000, price: {input: 0.25, cached_input: 0.07,   output: 1.00}}
tenants:
  - {id: acme, api_keys_sha256: [%[5]s]}
`, model, url("cheap"), url("fast"), url("reseller"), catalog.HashKey(testKey))
		},
		tune: func(c *deciderapp.Config) {
			// Probes at one size per long bucket, often enough to warm up in a
			// few seconds, rarely enough to leave the CPU to the test (-race
			// makes a 500 KB prompt costly to move around).
			c.ProbeInterval, c.ProbeSizes = time.Second, []int64{40 * 1024, 130 * 1024}
			c.Cooldown, c.CooldownErrors, c.CooldownWindow = 15*time.Minute, 1, time.Minute
			c.StatsSnapshotInterval = time.Hour // only the final save on shutdown: the restart test proves it
			// Stop at once: probes answered during a drain delay would change
			// the statistics after the restart test read them.
			c.NoDrainDelay = true
		}})
}

// explain asks the decider what it would do, without side effects.
func (s *stack) explain(t *testing.T, in int64, prefixes ...*switchboardv1.PromptPrefix) map[string]*switchboardv1.Candidate {
	t.Helper()
	resp, err := s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: in, Prefixes: prefixes},
	})
	require.NoError(t, err)
	out := map[string]*switchboardv1.Candidate{}
	for _, c := range resp.Decision.Candidates {
		out[c.Provider] = c
	}
	return out
}

func (s *stack) waitForSpeedData(t *testing.T, sizes ...int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, in := range sizes {
			for _, c := range s.explain(t, in) {
				if c.Samples == 0 {
					return false
				}
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "probes measure every endpoint at every probe size")
}

// chat sends one request of about n prompt tokens; uniq makes it miss caches.
func chat(uniq string, n int, extra string) string {
	return `{"model":"` + model + `",` + extra + `"max_tokens":4,"messages":[{"role":"user","content":"` + uniq + " " + longPrompt(n) + `"}]}`
}

func TestSmartRoutingScenario(t *testing.T) {
	s := startSmart(t)

	// Before any data: the cheapest.
	code, hdr, body := s.post(t, testKey, chat("a", 100, ""))
	require.Equal(t, 200, code, "%v", body)
	require.Equal(t, "cheap", body["provider"])
	require.Contains(t, hdr.Get("x-switchboard-route"), "reason=cheapest_no_data")

	// Probes fill the long buckets; real calls the short one.
	s.waitForSpeedData(t, 40*1024, 130*1024)

	// Short prompts go to the cheap one: it is fast on them.
	code, hdr, body = s.post(t, testKey, chat("b", 100, ""))
	require.Equal(t, 200, code, "%v", body)
	require.Equal(t, "cheap", body["provider"], hdr.Get("x-switchboard-route"))

	// 32k-128k: cheap is too slow; the cheapest fast one for this exact
	// uncached mix is the reseller (cheaper uncached input than fast).
	code, hdr, body = s.post(t, testKey, chat("c", 60*1024, ""))
	require.Equal(t, 200, code, "%v", body)
	require.Equal(t, "reseller", body["provider"], hdr.Get("x-switchboard-route"))
	require.Contains(t, hdr.Get("x-switchboard-route"), "bucket=32k-128k reason=cheapest_qualifying")
	cands := s.explain(t, 60*1024)
	require.False(t, cands["cheap"].Qualified)
	require.Contains(t, cands["cheap"].Note, "too slow")

	// >128k: the reseller is slow there too; the fast one serves.
	code, hdr, body = s.post(t, testKey, chat("d", 130*1024, ""))
	require.Equal(t, 200, code, "%v", body)
	require.Equal(t, "fast", body["provider"], hdr.Get("x-switchboard-route"))
	require.Contains(t, hdr.Get("x-switchboard-route"), "bucket=>128k")

	// A long cached conversation avoids the reseller: turn 1 was served by
	// both fast and the reseller (pinned), so both hold it in cache; priced
	// where the cache is, fast's $0.0013 cache reads beat the reseller's
	// $0.07 even though the reseller's uncached input is cheaper.
	conv := `"messages":[{"role":"system","content":"` + longPrompt(60*1024) + `"},{"role":"user","content":"turn one"}`
	for _, p := range []string{"fast", "reseller"} {
		code, _, body = s.post(t, testKey, `{"model":"`+model+`","max_tokens":4,"provider":{"only":["`+p+`"]},`+conv+`]}`)
		require.Equal(t, 200, code, "%v", body)
		require.Equal(t, p, body["provider"])
	}
	turn2 := `{"model":"` + model + `","max_tokens":4,` + conv + `,{"role":"assistant","content":"ok"},{"role":"user","content":"turn two"}]}`
	code, hdr, body = s.post(t, testKey, turn2)
	require.Equal(t, 200, code, "%v", body)
	require.Equal(t, "fast", body["provider"], hdr.Get("x-switchboard-route"))
	usage := body["usage"].(map[string]any)
	cached := usage["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	require.Greater(t, cached, float64(50*1024), "the provider really served it from cache")

	// max_price works with smart routing: only cheap is under the cap, slow or not.
	code, _, body = s.post(t, testKey, chat("e", 60*1024, `"provider":{"max_price":{"prompt":0.2}},`))
	require.Equal(t, 200, code, "%v", body)
	require.Equal(t, "cheap", body["provider"])

	// User overrides bypass smart routing; provider.ignore only filters,
	// and smart routing picks among the rest (cheap is too slow here).
	for _, tt := range []struct{ name, extra, modelSuffix, want string }{
		{"order", `"provider":{"order":["cheap"]},`, "", "cheap"},
		{"sort latency", `"provider":{"sort":"latency"},`, "", "fast"},
		{"ignore filters, smart routing picks among the rest", `"provider":{"ignore":["reseller"]},`, "", "fast"},
		{"floor", ``, ":floor", "cheap"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := strings.Replace(chat("f"+tt.name, 60*1024, tt.extra), `"model":"`+model+`"`, `"model":"`+model+tt.modelSuffix+`"`, 1)
			code, hdr, body := s.post(t, testKey, b)
			require.Equal(t, 200, code, "%v", body)
			require.Equal(t, tt.want, body["provider"], hdr.Get("x-switchboard-route"))
		})
	}

	// The full explanation is one header away.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.edge.URL()+"/chat/completions", strings.NewReader(chat("g", 60*1024, "")))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("x-switchboard-debug", "1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	dbg := resp.Header.Get("x-switchboard-route-debug")
	for _, want := range []string{`"typical_ttft":`, `"cost":`, `"reason":"`, "too slow", "cheap", "fast", "reseller"} {
		require.Contains(t, dbg, want)
	}

	// Probes were paid by the operator, and accounted.
	probes, usd := s.decider.ProbeCost()
	require.Positive(t, probes)
	require.Positive(t, usd)
}

func TestRoutingStatsSurviveDeciderRestart(t *testing.T) {
	s := startSmart(t)
	s.waitForSpeedData(t, 40*1024)
	before := s.explain(t, 60*1024)

	// Restart the decider on the same address and data, without probes: what
	// it knows after the restart comes from the snapshot saved in etcd.
	s.decider.Close()
	s.restartDecider(t, func(c *deciderapp.Config) { c.NoProbes = true }) // the catalog comes back from etcd too

	after := s.explain(t, 60*1024)
	for p, c := range before {
		require.Positive(t, after[p].Samples, p)
		require.Equal(t, c.TypicalTtft.AsDuration(), after[p].TypicalTtft.AsDuration(), p)
	}
	// The edge reconnects on its own and long prompts keep avoiding the slow one.
	require.Eventually(t, func() bool {
		code, _, body := s.post(t, testKey, chat("after-restart", 60*1024, ""))
		return code == 200 && body["provider"] == "reseller"
	}, 15*time.Second, 100*time.Millisecond)
}
