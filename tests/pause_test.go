package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// candidates asks the decider what it would do for a short prompt, without
// side effects, by provider.
func candidates(t *testing.T, addr string) map[string]*switchboardv1.Candidate {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), asOperator)
	require.NoError(t, err)
	defer conn.Close()
	resp, err := switchboardv1.NewDeciderClient(conn).Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 100},
	})
	require.NoError(t, err)
	out := map[string]*switchboardv1.Candidate{}
	for _, c := range resp.GetDecision().GetCandidates() {
		out[c.GetProvider()] = c
	}
	return out
}

// TestRetryAfterPausesThatEndpointForThatLong reproduces a pause out of
// proportion to what the provider said: one 429 with Retry-After: 1 from
// alpha benched it for the full 15-minute cool-down. It must be paused for
// about a second, requests must go around it meanwhile (never refused while
// beta can serve), and it must serve again once the second has passed.
func TestRetryAfterPausesThatEndpointForThatLong(t *testing.T) {
	s := startSystem(t, "--report-flush-interval=20ms")
	alpha := s.sim.Provider("alpha")
	ask := `{"model":"` + model + `","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`
	// alpha, the cheapest, serves and is measured (a stream measures its
	// first token): the smart policy knows it.
	measure := `{"model":"` + model + `","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`
	require.Eventually(t, func() bool {
		code, hdr, _ := s.post(t, testKey, measure)
		return code == http.StatusOK && candidates(t, s.decider.Addr())["alpha"].GetSamples() > 0 && hdr.Get("X-Switchboard-Provider") == "alpha"
	}, waitFor, tick)

	require.NoError(t, alpha.SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8,
		Faults: []provsim.FaultConfig{{Kind: provsim.FaultRateLimit, Rate: 1, RetryAfter: provsim.Duration(time.Second)}}}))
	code, _, body := s.post(t, testKey, ask)
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, "beta", body["provider"], "alpha's 429 is retried on the next endpoint")
	require.NoError(t, alpha.SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8}))

	// The decider heard of the 429 (the edge reports it on its stream).
	require.Eventually(t, func() bool {
		return strings.Contains(candidates(t, s.decider.Addr())["alpha"].GetNote(), "cooling down")
	}, waitFor, tick, "the decider pauses alpha")

	// Requests go around alpha while it is paused, and it serves again once
	// the provider's Retry-After has passed — not a quarter of an hour later.
	deadline := time.Now().Add(waitFor)
	for poll := time.NewTicker(100 * time.Millisecond); ; <-poll.C {
		code, _, body := s.post(t, testKey, ask)
		require.Equal(t, http.StatusOK, code, "no request is refused while another endpoint can serve: %v", body)
		if body["provider"] == "alpha" {
			poll.Stop()
			break
		}
		require.True(t, time.Now().Before(deadline), "alpha is used again after its 1s Retry-After: %s", candidates(t, s.decider.Addr())["alpha"].GetNote())
	}
	require.Equal(t, int64(1), alpha.Stats().Models[simModel].Outcomes.RateLimited)
}

// TestCoolDownsLeaveFallbacks reproduces a request that ran out of
// endpoints because of cool-downs: once every endpoint had refused a call
// (one request that failed everywhere), a request whose first endpoint
// failed again was answered "all 1 attempts failed" — the edge dropped
// every benched fallback — while beta and gamma were healthy. A cooled-down
// endpoint is tried after the others, never dropped.
func TestCoolDownsLeaveFallbacks(t *testing.T) {
	// One refusal benches an endpoint under the first-refusal rule: one
	// request that failed everywhere benches every endpoint.
	s := startSystemWith(t, systemOptions{cooldownRule: "first-refusal"}, "--report-flush-interval=20ms")
	code, _, body := s.post(t, testKey, `{"model":"`+model+`","max_tokens":4,"messages":[{"role":"user","content":"[[provsim:fault=unavailable]]"}]}`)
	require.Equal(t, http.StatusServiceUnavailable, code, "every provider overloaded: %v", body)
	// Every endpoint is benched, at the decider and at the edge.
	require.Eventually(t, func() bool {
		return strings.Count(s.logText(), "endpoint cooling down") >= 3
	}, waitFor, tick, "the edge hears of the three cool-downs")

	// alpha fails again; beta and gamma are healthy.
	require.NoError(t, s.sim.Provider("alpha").SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8,
		Faults: []provsim.FaultConfig{{Kind: provsim.FaultUnavailable, Rate: 1}}}))
	// The broker paused the three after their 503s (a back-off of about a
	// second): until then a request is refused before any call.
	require.Eventually(t, func() bool {
		code, _, body = s.post(t, testKey, `{"model":"`+model+`","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`)
		require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, code, "%v", body)
		return code == http.StatusOK
	}, waitFor, tick, "a healthy endpoint serves once the pauses end")
	// beta, unless its pause (its jitter) outlasted gamma's.
	require.Contains(t, []any{"beta", "gamma"}, body["provider"])
}
