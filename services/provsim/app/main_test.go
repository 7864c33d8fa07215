package app

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/switchboard-ai/switchboard/services/provsim/internal/chatapi"
)

// TestMain fails the package if any test leaves a goroutine behind: a hung
// request, a stream or a server that Close did not end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startProvider starts a one-provider simulator on a free loopback port and
// closes it when the test ends.
func startProvider(t *testing.T, apiKey string, models ...ModelConfig) *Provider {
	t.Helper()
	sim, err := Start(t.Context(), Config{
		Seed:      1,
		Providers: []ProviderConfig{{Name: "p", Listen: "127.0.0.1:0", APIKey: apiKey, Models: models}},
	}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	return sim.Provider("p")
}

// newClient returns an HTTP client whose idle connections are closed when the
// test ends, so goleak sees no keep-alive goroutines.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, c *http.Client, method, url, body string, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func chatBody(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func userMsg(model, content string) map[string]any {
	return map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": content}}}
}

func decodeError(t *testing.T, b []byte) chatapi.ErrorDetail {
	t.Helper()
	// Decode strictly into the envelope to prove the exact shape.
	var raw map[string]map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &raw), string(b))
	require.Contains(t, raw, "error")
	for _, k := range []string{"message", "type", "param", "code"} {
		require.Contains(t, raw["error"], k)
	}
	require.Equal(t, "null", string(raw["error"]["param"]))
	var e chatapi.ErrorBody
	require.NoError(t, json.NewDecoder(bytes.NewReader(b)).Decode(&e))
	return e.Error
}
