package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/telemetry"
)

// A response that names a fallback model is counted by that model, once
// the handler has answered; one that does not is not counted.
func TestFallbackServedCounted(t *testing.T) {
	m, err := telemetry.NewMetrics("switchboard-edge", "v0", true)
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Shutdown(t.Context())) }()
	em, err := newEdgeMetrics(m)
	require.NoError(t, err)
	h := em.handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fb := r.URL.Query().Get("fallback"); fb != "" {
			w.Header().Set(headerFallbackModel, fb)
		}
		w.WriteHeader(http.StatusOK)
	}))
	for _, q := range []string{"?fallback=vendor/small", "?fallback=vendor/small", "", "?fallback=%22bad%20model%22"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/chat/completions"+q, nil))
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	require.Contains(t, body, `switchboard_edge_fallback_served_total{model="vendor/small"} 2`)
	require.Contains(t, body, `switchboard_edge_fallback_served_total{model="other"} 1`, "a value that is no model id is not a label")
}

// The edge's debug listener serves its metrics; the API port does not.
func TestMetricsOnDebugListener(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.DebugListen = ":0" })
	resp, err := h.client.Get("http://" + h.edge.DebugAddr() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `target_info{service_name="switchboard-edge"`)

	resp, err = h.client.Get("http://" + h.edge.Addr() + "/metrics")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.NotEqual(t, http.StatusOK, resp.StatusCode, "the API port serves no metrics")
}
