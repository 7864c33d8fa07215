package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// Markers that every simulated provider refuses, each with the answer of
// one failure class.
const (
	poison500 = "POISON-500" // a 500: a retryable overload, as a crash on the input looks
	poison403 = "POISON-403" // a bare 403: a policy refusal without an account code
	poison400 = "POISON-400" // a 400 content refusal: the request itself
	poison429 = "POISON-429" // a plain 429: each provider's capacity
	poison402 = "POISON-402" // a billing refusal: each account's, unless every account refuses this one request
)

// poisonSimConfig is three providers serving three models, every one of
// which refuses the poison markers.
func poisonSimConfig() string {
	refusals := `        refusals:
          - {match: ` + poison500 + `, status: 500, message: "internal error"}
          - {match: ` + poison403 + `, status: 403, type: permission_error, code: content_blocked, message: "blocked"}
          - {match: ` + poison400 + `, status: 400, code: content_policy_violation, message: "content policy"}
          - {match: ` + poison429 + `, status: 429, type: requests, code: rate_limit_exceeded, message: "slow down"}
          - {match: ` + poison402 + `, status: 402, type: billing_error, code: billing_hard_limit_reached, message: "no credit for this"}
`
	var b strings.Builder
	b.WriteString("seed: 7\nproviders:\n")
	for _, p := range []string{"alpha", "beta", "gamma"} {
		fmt.Fprintf(&b, "  - name: %s\n    listen: 127.0.0.1:0\n    models:\n", p)
		for _, m := range []string{"sim-model", "sim-other", "sim-third"} {
			fmt.Fprintf(&b, "      - id: %s\n        ttft: {base: 5ms}\n        default_output_tokens: 8\n%s", m, refusals)
		}
	}
	return b.String()
}

// startPoisonSystem starts provsim, a decider and an edge on a catalog of
// three models and two tenants (acme, globex). alpha is the cheapest
// everywhere. alpha's endpoints of vendor/sim-model and vendor/sim-third
// share one provider account (one credential, one project); its endpoint
// of vendor/sim-other is another account of the same provider (its own
// credential and project).
func startPoisonSystem(t *testing.T) *stack {
	t.Helper()
	return startStack(t, stackOptions{sim: poisonSimConfig(),
		providerKeys: map[string]string{
			"SWITCHBOARD_PROVIDER_KEY_ALPHA":       "alpha-team1-credential",
			"SWITCHBOARD_PROVIDER_KEY_ALPHA_TEAM2": "alpha-team2-credential",
		},
		catalog: func(url func(string) string) string {
			return fmt.Sprintf(`
models:
  - id: vendor/sim-model
    endpoints:
      - {provider: alpha, base_url: %[1]s, upstream_model: sim-model, api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA, price: {input: 0.10, output: 0.50}}
      - {provider: beta,  base_url: %[2]s, upstream_model: sim-model, price: {input: 0.20, output: 0.60}}
      - {provider: gamma, base_url: %[3]s, upstream_model: sim-model, price: {input: 0.25, output: 0.70}}
  - id: vendor/sim-third
    endpoints:
      - {provider: alpha, base_url: %[1]s, upstream_model: sim-third, api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA, price: {input: 0.10, output: 0.50}}
      - {provider: gamma, base_url: %[3]s, upstream_model: sim-third, price: {input: 0.25, output: 0.70}}
  - id: vendor/sim-other
    endpoints:
      - {provider: alpha, base_url: %[1]s, upstream_model: sim-other, api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA_TEAM2, provider_project: team2, price: {input: 0.10, output: 0.50}}
      - {provider: gamma, base_url: %[3]s, upstream_model: sim-other, price: {input: 0.25, output: 0.70}}
tenants:
  - {id: acme, api_keys_sha256: [%[4]s]}
  - {id: globex, api_keys_sha256: [%[5]s]}
`, url("alpha"), url("beta"), url("gamma"), catalog.HashKey(testKey), catalog.HashKey(otherKey))
		}})
}

func askModel(modelID, content string) string {
	return `{"model":"` + modelID + `","max_tokens":4,"messages":[{"role":"user","content":"` + content + `"}]}`
}

// providerCalls is how many calls every provider received for a model.
func providerCalls(s *stack, simModelID string) int64 {
	var n int64
	for _, p := range []string{"alpha", "beta", "gamma"} {
		n += s.sim.Provider(p).Stats().Models[simModelID].Requests
	}
	return n
}

// heard waits until the decider has ingested every call report the edge
// queued so far: a request served by alpha is reported after them, on the
// same stream, and alpha's sample count grows once its report is in.
func heard(t *testing.T, s *stack) {
	t.Helper()
	before := candidates(t, s.decider.Addr())["alpha"].GetSamples()
	// Streamed: only a stream measures a first token, which is the sample
	// counted.
	code, hdr, body := s.post(t, otherKey, `{"model":"`+model+`","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"a barrier"}]}`)
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, "alpha", hdr.Get("X-Switchboard-Provider"), "%v", body)
	require.Eventually(t, func() bool {
		return candidates(t, s.decider.Addr())["alpha"].GetSamples() > before
	}, waitFor, tick, "the decider hears of the barrier request")
}

// TestPoisonRequestBenchesNothing reproduces one request that benched the
// fleet: a request that every provider refused (a 500 on a poison input, a
// bare 403) put every endpoint into a cool-down and a route pause, so every
// later request of every tenant was answered 429 provider_paused with
// Retry-After: 600. A request that fails on two providers with the same
// error is the request's failure: the client hears it at once, after at
// most two calls, without a Retry-After, and another tenant's normal
// request is routed exactly as before it.
func TestPoisonRequestBenchesNothing(t *testing.T) {
	s := startPoisonSystem(t)
	code, _, body := s.post(t, otherKey, askModel(model, "hello"))
	require.Equal(t, http.StatusOK, code, "%v", body)
	before := body["provider"]
	require.Equal(t, "alpha", before, "the cheapest serves")

	for _, tc := range []struct {
		marker string
		status int
	}{
		{marker: poison500, status: http.StatusInternalServerError}, // the providers' status
		{marker: poison403, status: http.StatusBadGateway},          // a policy status says nothing the client can act on
		// Two provider accounts refusing this one request for billing at
		// once refuse the request, not their accounts: no account is paused.
		{marker: poison402, status: http.StatusBadGateway},
	} {
		t.Run(tc.marker, func(t *testing.T) {
			calls := providerCalls(s, simModel)
			code, h, body := s.post(t, testKey, askModel(model, "please "+tc.marker+" now"))
			require.Equal(t, tc.status, code, "%v", body)
			require.Empty(t, h.Get("Retry-After"), "nothing to wait for: the request fails everywhere")
			e, _ := body["error"].(map[string]any)
			require.NotNil(t, e, "an OpenAI error: %v", body)
			require.Contains(t, e["message"], "failed on 2 providers with the same error")
			require.Equal(t, "request_failed_on_providers", e["code"])
			require.Equal(t, int64(2), providerCalls(s, simModel)-calls, "two calls, then the client hears it")

			heard(t, s)
			for _, c := range candidates(t, s.decider.Addr()) {
				require.NotContains(t, c.GetNote(), "cooling down", "%s benched for the request's failure", c.GetProvider())
			}
			code, h, body = s.post(t, otherKey, askModel(model, "hello again"))
			require.Equal(t, http.StatusOK, code, "%v", body)
			require.Equal(t, before, body["provider"], "routed as before the poison request")
			require.Equal(t, "0", h.Get("X-Switchboard-Retries"))
		})
	}

	t.Run(poison400, func(t *testing.T) {
		// The request itself, said by the first provider: one call, the
		// provider's error as is, nothing benched (as before).
		calls := providerCalls(s, simModel)
		code, h, body := s.post(t, testKey, askModel(model, poison400))
		require.Equal(t, http.StatusBadRequest, code, "%v", body)
		require.Empty(t, h.Get("Retry-After"))
		require.Equal(t, int64(1), providerCalls(s, simModel)-calls)
		heard(t, s)
		code, _, body = s.post(t, otherKey, askModel(model, "hello again"))
		require.Equal(t, http.StatusOK, code, "%v", body)
		require.Equal(t, before, body["provider"])
	})

	t.Run(poison429, func(t *testing.T) {
		// Rate limits are each provider's capacity, not the request's: the
		// request tries every provider, as before, and hears a 429 with the
		// soonest Retry-After.
		calls := providerCalls(s, simModel)
		code, _, body := s.post(t, testKey, askModel(model, poison429))
		require.Equal(t, http.StatusTooManyRequests, code, "%v", body)
		require.Equal(t, int64(3), providerCalls(s, simModel)-calls, "every provider is tried")
	})
}

// TestAccountRefusalPausesThatAccountOnly: a spend-limit refusal by one
// provider account pauses every endpoint of that account, whatever the
// model, and no endpoint of another account, even at the same provider.
func TestAccountRefusalPausesThatAccountOnly(t *testing.T) {
	s := startPoisonSystem(t)
	for _, m := range []string{"vendor/sim-model", "vendor/sim-third", "vendor/sim-other"} {
		code, _, body := s.post(t, testKey, askModel(m, "hello"))
		require.Equal(t, http.StatusOK, code, "%v", body)
		require.Equal(t, "alpha", body["provider"], "%s: the cheapest serves", m)
	}
	require.NoError(t, s.sim.Provider("alpha").SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8,
		Faults: []provsim.FaultConfig{{Kind: provsim.FaultSpendLimit, Rate: 1}}}))

	code, h, body := s.post(t, testKey, askModel(model, "hello"))
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, "beta", body["provider"], "the next provider serves")
	require.Equal(t, "1", h.Get("X-Switchboard-Retries"))
	// The held refusal is charged to alpha's account by a second
	// reconciliation on the Report stream once the request ended: wait for
	// it to be applied before asking for the account's other model.
	require.Eventually(t, func() bool { return s.edge.UnackedReconciles() == 0 }, 10*time.Second, 20*time.Millisecond,
		"the account's pause is applied")

	// The same account's endpoint of another model is paused too: not even
	// called.
	third := s.sim.Provider("alpha").Stats().Models["sim-third"].Requests
	code, h, body = s.post(t, otherKey, askModel("vendor/sim-third", "hello"))
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, "gamma", body["provider"], "alpha's account is paused for every model")
	require.Equal(t, "0", h.Get("X-Switchboard-Retries"))
	require.Equal(t, third, s.sim.Provider("alpha").Stats().Models["sim-third"].Requests, "alpha/sim-third not called")

	// Another account of the same provider serves as before.
	code, _, body = s.post(t, otherKey, askModel("vendor/sim-other", "hello"))
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, "alpha", body["provider"], "alpha's other account is not paused")
	// And the other providers' endpoints of the refused model are not.
	code, h, body = s.post(t, otherKey, askModel(model, "hello"))
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, "beta", body["provider"])
	require.Equal(t, "0", h.Get("X-Switchboard-Retries"))
}
