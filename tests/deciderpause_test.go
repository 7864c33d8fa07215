package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	"github.com/switchboard-ai/switchboard/tests/freezer"
)

// startFreezer starts a freezer (tests/freezer) in front of target, every
// connection held by a freeze, closed when the test ends.
func startFreezer(t *testing.T, target string) *freezer.Proxy {
	t.Helper()
	f, err := freezer.Start(target, nil)
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return f
}

// A decider that stops answering — a paused process, a cut network — must
// not hold a client whose request the edge sent it: a Decide that may wait
// in an admission queue has a deadline of many minutes, so only the edge's
// pings on the connection can tell. The client gets a 503 once two of them
// went unanswered (--decider-keepalive), not when its queue wait would have
// ended.
func TestUnansweringDeciderFailsTheRequestsWaitingOnIt(t *testing.T) {
	var f *freezer.Proxy
	sys := startStack(t, stackOptions{sim: slowSimConfig, catalog: func(url func(string) string) string {
		return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: %[2]s, upstream_model: %[3]s, price: {input: 0.1, output: 0.5}}
tenants:
  - id: acme
    api_keys_sha256: [%[4]s]
`, model, url("alpha"), simModel, catalog.HashKey(testKey))
	}, tune: func(c *deciderapp.Config) { c.ID, c.Seed, c.ShutdownTimeout = "e2e-freeze", 0, 0 },
		edgeTo: func(s *stack) string {
			f = startFreezer(t, s.decider.Addr())
			return f.Addr()
		},
		edgeArgs: []string{"--decider-keepalive=5s"}, ownDeadlines: true,
	})
	edge := sys.edge
	body := `{"model":"` + model + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	code, _, _ := sys.post(t, testKey, body)
	require.Equal(t, http.StatusOK, code, "answered while the decider answers")

	f.Set(true)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, edge.URL()+"/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", raw)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
	require.Equal(t, "decider_unavailable", e.Error.Code)
}
