package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// sharedPrefixTokens is the size of the system prompt the tests share
// between requests: long enough that reading it from cache decides the
// price.
const sharedPrefixTokens = 20000

// samplesAt is how many calls of about n prompt tokens the decider has
// learnt from, per provider.
func (s *stickySystem) samplesAt(t *testing.T, n int64) map[string]int64 {
	t.Helper()
	resp, err := s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: n, MaxOutputTokens: 4},
	})
	require.NoError(t, err)
	out := map[string]int64{}
	for _, c := range resp.GetDecision().GetCandidates() {
		out[c.GetProvider()] = c.GetSamples()
	}
	return out
}

// sharedPrompt is a request after the shared system prompt and tool block:
// extra (routing options with their trailing comma, or empty), then the
// messages after the system prompt.
func sharedPrompt(extra string, msgs ...string) string {
	body := `{"model":"` + model + `",` + extra + `"max_tokens":4,` +
		`"tools":[{"type":"function","function":{"name":"grep","parameters":{"type":"object"}}}],` +
		`"messages":[{"role":"system","content":"` + longPrompt(sharedPrefixTokens) + `"}`
	for i, m := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		body += fmt.Sprintf(`,{"role":"%s","content":"%s"}`, role, m)
	}
	return body + "]}"
}

// TestSharedSystemPromptPricedWhereItIsCached reproduces shared prefixes
// being invisible: two endpoints both served a long system prompt (and
// tool block) to earlier questions; warm reads it from cache at
// $0.0013/M, plain — a reseller, the cheaper for uncached input — at
// $0.07/M. Every new question after that system prompt differs only in
// its last message, so the decider, which knew only each served prompt's
// whole hash, found no evidence and priced it uncached everywhere: all of
// them went to plain, paying about 50 times more for the system prompt.
// New questions must go where the shared prefix is cheapest to read, and
// be read from cache there.
func TestSharedSystemPromptPricedWhereItIsCached(t *testing.T) {
	s := startSticky(t, "{input: 0.20, cached_input: 0.0013, output: 0.80}", "{input: 0.10, cached_input: 0.07, output: 0.80}")
	size := int64(sharedPrefixTokens)

	// Earlier questions after the system prompt, routed to each endpoint:
	// both hold the system prompt in cache, and both are measured (equally
	// fast), so both qualify for the policy.
	for i := range 2 {
		for _, p := range []string{"warm", "plain"} {
			got, _ := s.post(t, otherKey, sharedPrompt(`"provider":{"only":["`+p+`"]},`, fmt.Sprintf("earlier question %d on %s", i, p)))
			require.Equal(t, p, got)
		}
	}
	require.Eventually(t, func() bool {
		n := s.samplesAt(t, size)
		return n["warm"] >= 2 && n["plain"] >= 2
	}, waitFor, tick, "the decider took in the earlier calls' reports")
	require.Positive(t, s.sim.Provider("plain").Stats().Models[simModel].CachedTokens, "plain really holds the system prompt in cache")
	warmCached := s.sim.Provider("warm").Stats().Models[simModel].CachedTokens
	require.Positive(t, warmCached, "warm really holds the system prompt in cache")

	// New questions from another tenant, after the same system prompt.
	var got []string
	for i := range 8 {
		p, route := s.post(t, testKey, sharedPrompt("", fmt.Sprintf("new question %d", i)))
		got = append(got, p+" "+route)
		require.Eventually(t, func() bool {
			n := s.samplesAt(t, size)
			return n["warm"]+n["plain"] >= int64(5+i)
		}, waitFor, tick, "new question %d reported", i)
	}
	for _, g := range got {
		require.True(t, strings.HasPrefix(g, "warm "), "a new question goes where its system prompt is cheapest to read: %q", got)
		require.NotContains(t, g, "sticky=", "a shared system prompt is no conversation: %q", got)
	}
	require.Greater(t, s.sim.Provider("warm").Stats().Models[simModel].CachedTokens, warmCached+7*(size/2),
		"warm read the shared system prompt from its cache for the new questions")
}
