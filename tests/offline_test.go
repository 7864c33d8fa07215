package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// offlineStream is the interactive request of the offline tests, the same
// kind each time (model, prompt size, options): streamed, so the decider's
// statistics take its first token.
var offlineStream = chatReq{content: "hi", stream: true, includeUsage: true, maxTokens: 8}

// offlineBatch is the batch request of the offline tests.
const offlineBatch = `{"model":"` + model + `","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`

// errorCode sends body in class cls (none: the key's), and returns the answer's status and
// error code. It does not use t, so it may run inside require.Eventually.
func (s *stack) errorCode(body, cls string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, s.edge.URL()+"/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	if cls != "" {
		req.Header.Set("X-Switchboard-Workload", cls)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Error.Code, nil
}

// With every decider gone, an edge serves the kinds of requests the
// decider answered within --offline-grace as it last answered them, within
// its local share of the tenant's requests per minute, and says so in the
// route header; a class not served offline fails closed, and so does every
// class once the grace is over. When the decider is back, the calls served
// offline are in the tenant's activity with the cost the client was billed,
// and in the routing statistics.
func TestEdgeServesOfflineWithinGrace(t *testing.T) {
	const grace = 15 * time.Second
	s := startStack(t, stackOptions{sim: simConfig, restartable: true,
		edgeArgs: []string{"--offline-grace=" + grace.String(), "--offline-classes=interactive=3", "--offline-endpoint-rpm=600"},
		catalog: func(url func(string) string) string {
			return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: %[2]s, upstream_model: %[3]s, api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA, price: {input: 0.10, output: 0.50}}
tenants:
  - id: acme
    api_keys_sha256: [%[4]s]
`, model, url("alpha"), simModel, catalog.HashKey(testKey))
		}})

	// The decider answers: one interactive and one batch request.
	a := s.chat(t, testKey, offlineStream)
	require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	require.NotContains(t, a.header.Get("X-Switchboard-Route"), "offline")
	code, ecode, err := s.errorCode(offlineBatch, "batch")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, ecode)
	s.decider.Close()

	// Fail closed: the batch class is not served offline.
	began := time.Now()
	code, ecode, err = s.errorCode(offlineBatch, "batch")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "decider_unavailable", ecode)
	t.Logf("a class that fails closed: %d %s in %s", code, ecode, time.Since(began))

	// Served offline: the tenant's share, 3 a minute on this one edge.
	type served struct {
		id   string
		cost float64
	}
	var offline []served
	for range 3 {
		began := time.Now()
		a := s.chat(t, testKey, offlineStream)
		require.Equal(t, http.StatusOK, a.status, "%v", a.body)
		require.True(t, strings.HasPrefix(a.header.Get("X-Switchboard-Route"), "offline: "), a.header.Get("X-Switchboard-Route"))
		require.Equal(t, "alpha", a.header.Get("X-Switchboard-Provider"))
		u, ok := a.usage(t)
		require.True(t, ok)
		require.Positive(t, u.cost)
		offline = append(offline, served{id: a.header.Get("X-Request-Id"), cost: u.cost})
		t.Logf("served offline in %s", time.Since(began))
	}
	a = s.chat(t, testKey, offlineStream)
	require.Equal(t, http.StatusTooManyRequests, a.status, "%v", a.body)
	e, _ := a.body["error"].(map[string]any)
	require.Equal(t, "rate_limit_exceeded", e["code"])
	require.Contains(t, e["message"], "offline share of the tenant's requests per minute is spent")
	require.NotEmpty(t, a.header.Get("Retry-After"))

	// Past the grace every request fails closed again; not before.
	code, ecode, err = s.errorCode(offlineStream.body(), "")
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, code, "the same request is still refused by the share: %s", ecode)
	require.Eventually(t, func() bool {
		code, ecode, err := s.errorCode(offlineStream.body(), "")
		return err == nil && code == http.StatusServiceUnavailable && ecode == "decider_unavailable"
	}, grace+waitFor, 200*time.Millisecond, "fails closed once the last answer is older than the grace")

	// The decider comes back; the calls served offline reach its activity
	// log, billed as the client was told, and its statistics.
	s.restartDecider(t, nil)
	recs := s.waitActivity(t, testKey, 2+len(offline))
	require.Len(t, recs, 2+len(offline), "only the calls served are recorded")
	byID := map[string]float64{}
	for _, r := range recs {
		byID[r.GetId()] = r.GetCostUsd()
	}
	for _, o := range offline {
		cost, ok := byID[o.id]
		require.True(t, ok, "the call %s served offline is in the activity log", o.id)
		require.InDelta(t, o.cost, cost, 1e-9, "billed as the client was told")
	}
	require.Eventually(t, func() bool {
		resp, err := s.rpc.Explain(t.Context(), &switchboardv1.ExplainRequest{
			Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model, Tokens: &switchboardv1.TokenEstimate{InputTokens: 10},
		})
		for _, c := range resp.GetDecision().GetCandidates() {
			if err == nil && c.GetProvider() == "alpha" && c.GetSamples() >= int64(len(offline)) {
				return true
			}
		}
		return false
	}, waitFor, tick, "the calls served offline are in the routing statistics")
}
