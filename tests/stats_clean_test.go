package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// startStats starts the providers of simYAML, each an endpoint of model at
// the given input price (USD per million tokens), in that order, behind a
// decider probing every probeInterval (0: no probes) at the decider's
// default probe sizes.
func startStats(t *testing.T, simYAML string, probeInterval time.Duration, providers []string, inputPrices []string) *stack {
	t.Helper()
	return startStack(t, stackOptions{sim: simYAML,
		catalog: func(url func(string) string) string {
			eps := ""
			for i, p := range providers {
				eps += fmt.Sprintf("      - {provider: %s, base_url: %s, upstream_model: sim-model, context_length: 200000, price: {input: %s, output: 1.00}}\n",
					p, url(p), inputPrices[i])
			}
			return fmt.Sprintf("models:\n  - id: %s\n    endpoints:\n%stenants:\n  - {id: acme, api_keys_sha256: [%s]}\n", model, eps, catalog.HashKey(testKey))
		},
		tune: func(c *deciderapp.Config) {
			c.ProbeInterval = probeInterval // the decider's default sizes
			c.Cooldown, c.CooldownErrors, c.CooldownWindow = 15*time.Minute, 1, time.Minute
			c.StatsSnapshotInterval = time.Hour
		}})
}

// candidates is the decider's explanation of a request of in prompt
// tokens with the given routing preferences, by provider.
func (s *stack) candidates(t *testing.T, in int64, prefs *switchboardv1.ProviderPreferences) map[string]*switchboardv1.Candidate {
	t.Helper()
	resp, err := s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model, Provider: prefs,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: in, MaxOutputTokens: 4},
	})
	require.NoError(t, err)
	out := map[string]*switchboardv1.Candidate{}
	for _, c := range resp.GetDecision().GetCandidates() {
		out[c.GetProvider()] = c
	}
	return out
}

// served posts body and returns the provider that served it.
func (s *stack) served(t *testing.T, body string) string {
	t.Helper()
	code, hdr, out := s.post(t, testKey, body)
	require.Equal(t, http.StatusOK, code, "%v", out)
	return hdr.Get("X-Switchboard-Provider")
}

// shortChat is a short prompt of one question; extra is spliced into the
// body (a trailing comma included).
func shortChat(question, extra string, maxTokens int) string {
	return fmt.Sprintf(`{"model":%q,%s"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, model, extra, maxTokens, question)
}

// TestNonStreamedCallsLeaveFirstTokenAlone: a non-streamed answer arrives
// whole, so its duration says when the last token came, not the first.
// Long non-streamed answers served beside streams leave the endpoint's
// first-token figure where the streams put it.
func TestNonStreamedCallsLeaveFirstTokenAlone(t *testing.T) {
	s := startStats(t, `
seed: 3
providers:
  - name: steady
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 20ms}, tokens_per_second: 400}
`, 0, []string{"steady"}, []string{"0.10"})

	const streams = 3
	for i := range streams {
		require.Equal(t, "steady", s.served(t, shortChat(fmt.Sprint("stream ", i), `"stream":true,`, 4)))
	}
	require.Eventually(t, func() bool { return s.candidates(t, 100, nil)["steady"].GetSamples() == streams }, waitFor, tick)

	// Six answers of 200 tokens each, not streamed: each takes half a
	// second at 400 tokens/s, 25 times the first token's 20 ms.
	shortest := time.Duration(1<<63 - 1)
	for i := range 6 {
		start := time.Now()
		require.Equal(t, "steady", s.served(t, shortChat(fmt.Sprint("whole ", i), "", 200)))
		shortest = min(shortest, time.Since(start))
	}
	// One more stream: its report follows the others' on the edge's
	// report stream, so once it is counted every report before it is too.
	require.Equal(t, "steady", s.served(t, shortChat("stream last", `"stream":true,`, 4)))
	require.Eventually(t, func() bool {
		return s.decider.ReportsReceived() >= streams+7 && s.candidates(t, 100, nil)["steady"].GetSamples() >= streams+1
	}, waitFor, tick)

	c := s.candidates(t, 100, nil)["steady"]
	require.Equal(t, int64(streams+1), c.GetSamples(), "only the streams measured a first token")
	require.Less(t, c.GetTypicalTtft().AsDuration(), shortest,
		"the typical first token is the streams', below any non-streamed answer's whole duration")
}

// TestShortPromptsProbed: the decider's default probes cover every size
// bucket, short prompts included, so sort=latency sends a short prompt to
// the endpoint fastest on short prompts as soon as probes ran, before any
// traffic taught it; and probes stream, so they measure throughput too.
// The fast endpoint answers in 30 ms: a first token under 20 ms after the
// 2k-token probe is not believed (observe.MinTTFT).
func TestShortPromptsProbed(t *testing.T) {
	s := startStats(t, `
seed: 5
providers:
  - name: fast
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 30ms}, tokens_per_second: 2000}
  - name: slow
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 300ms}, tokens_per_second: 2000}
`, 2*time.Second, []string{"fast", "slow"}, []string{"0.30", "0.10"})

	// 2k and 20k tokens: the two buckets under 32k.
	require.Eventually(t, func() bool {
		for _, in := range []int64{2 * 1024, 20 * 1024} {
			for _, c := range s.candidates(t, in, nil) {
				if c.GetSamples() == 0 {
					return false
				}
			}
		}
		return true
	}, waitFor, tick, "probes measure every endpoint in the <8k and 8k-32k buckets")

	latency := &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_LATENCY}
	cs := s.candidates(t, 500, latency)
	require.Less(t, cs["fast"].GetTypicalTtft().AsDuration(), cs["slow"].GetTypicalTtft().AsDuration())
	for i := range 4 {
		require.Equal(t, "fast", s.served(t, shortChat(fmt.Sprint("short ", i), `"provider":{"sort":"latency"},`, 4)),
			"the short prompt goes to the endpoint fastest on short prompts")
	}
	require.Eventually(t, func() bool {
		cs := s.candidates(t, 500, nil)
		return cs["fast"].GetThroughput() > 0 && cs["slow"].GetThroughput() > 0
	}, waitFor, tick, "probes are streamed and measure each endpoint's output speed")
}

// TestThroughputUnknownIsNotLast: with sort=throughput, an endpoint that has
// served no stream yet has no throughput figure; it is ranked as the median
// of the measured endpoints, behind the faster and before the slower, not
// as the slowest.
func TestThroughputUnknownIsNotLast(t *testing.T) {
	s := startStats(t, `
seed: 7
providers:
  - name: quick
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 5ms}, tokens_per_second: 400}
  - name: plodding
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 5ms}, tokens_per_second: 50}
  - name: unseen
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 5ms}, tokens_per_second: 400}
`, 0, []string{"quick", "plodding", "unseen"}, []string{"0.30", "0.20", "0.10"})

	for _, p := range []string{"quick", "plodding"} {
		for i := range 2 {
			require.Equal(t, p, s.served(t, shortChat(fmt.Sprint(p, i), `"stream":true,"provider":{"only":["`+p+`"]},`, 16)))
		}
	}
	require.Eventually(t, func() bool {
		cs := s.candidates(t, 100, nil)
		return cs["quick"].GetThroughput() > 0 && cs["plodding"].GetThroughput() > 0
	}, waitFor, tick)
	cs := s.candidates(t, 100, &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_THROUGHPUT})
	require.Greater(t, cs["quick"].GetThroughput(), cs["plodding"].GetThroughput())
	require.Zero(t, cs["unseen"].GetThroughput(), "unseen has served no stream")

	resp, err := s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
		Provider: &switchboardv1.ProviderPreferences{Sort: switchboardv1.Sort_SORT_THROUGHPUT},
		Tokens:   &switchboardv1.TokenEstimate{InputTokens: 100, MaxOutputTokens: 4},
	})
	require.NoError(t, err)
	order := []string{resp.GetEndpoint().GetProvider()}
	for _, f := range resp.GetFallbacks() {
		order = append(order, f.GetProvider())
	}
	require.Equal(t, []string{"quick", "unseen", "plodding"}, order,
		"the unmeasured endpoint ranks as the median of the measured ones: behind the faster, before the slower")
	require.Contains(t, cs["unseen"].GetNote(), "no throughput figure yet: ranked as the median of the measured endpoints")

	// From outside: the fastest serves; when it refuses, the request's
	// next endpoint is the unmeasured one, not the slowest.
	sortTPS := `"provider":{"sort":"throughput"},`
	require.Equal(t, "quick", s.served(t, shortChat("q1", sortTPS, 4)))
	require.NoError(t, s.sim.Provider("quick").SetModel(provsim.ModelConfig{ID: "sim-model", TokensPerSecond: 400,
		Faults: []provsim.FaultConfig{{Kind: provsim.FaultRateLimit, Rate: 1}}}))
	require.Equal(t, "unseen", s.served(t, shortChat("q2", sortTPS, 4)))
}
