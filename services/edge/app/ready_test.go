package app

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// /healthz is liveness: 200 while the process works, whatever the decider
// does. /readyz is readiness: 200 only while the edge can serve — the
// decider reachable, serving (its catalog loaded) and able to admit — and
// 503 from the moment shutdown starts.
func TestReadiness(t *testing.T) {
	h := newHarness(t, 1, nil)
	ready := func() (int, map[string]string) {
		r := h.do(t.Context(), http.MethodGet, "/readyz", "", nil)
		var body map[string]string
		require.NoError(t, json.Unmarshal([]byte(r.body), &body), r.body)
		require.NotEmpty(t, r.header.Get("X-Request-Id"))
		return r.status, body
	}
	live := func() int { return h.do(t.Context(), http.MethodGet, "/healthz", "", nil).status }
	waitReady := func(want int) map[string]string {
		var body map[string]string
		require.Eventually(t, func() bool {
			var code int
			code, body = ready()
			return code == want
		}, 10*time.Second, 10*time.Millisecond, "readyz %d", want)
		return body
	}

	body := waitReady(http.StatusOK)
	require.Equal(t, "ready", body["status"])

	// The decider goes away: every request would get 503, so not ready;
	// still alive.
	h.fd.Stop()
	body = waitReady(http.StatusServiceUnavailable)
	require.Equal(t, "not_ready", body["status"])
	require.NotEmpty(t, body["reason"])
	require.Equal(t, http.StatusOK, live())

	// Back, but not serving yet (a decider still loading its catalog).
	h.fd.SetServing(false)
	h.fd.Restart()
	require.Eventually(t, func() bool {
		code, body := ready()
		return code == http.StatusServiceUnavailable && strings.Contains(body["reason"], "NOT_SERVING")
	}, 10*time.Second, 10*time.Millisecond, "not ready while the decider is not serving")
	h.fd.SetServing(true)
	waitReady(http.StatusOK)
	require.Equal(t, http.StatusOK, h.chat(plainReq, authed()).status)

	// Up, but unable to admit (its etcd lost, no broker owner, its state
	// not saved): every chat would be refused, so not ready.
	h.fd.SetAdmitting(false)
	body = waitReady(http.StatusServiceUnavailable)
	require.Contains(t, body["reason"], "admission")
	require.Contains(t, body["reason"], "NOT_SERVING")
	h.fd.SetAdmitting(true)
	waitReady(http.StatusOK)

	// Shutdown starts: not ready at once, still alive, still serving.
	h.edge.api.SetDraining()
	code, body := ready()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "shutting_down", body["status"])
	require.Equal(t, http.StatusOK, live())
	require.Equal(t, http.StatusOK, h.chat(plainReq, authed()).status)
}

// The shutdown grace is a setting: a stream in flight when shutdown starts
// finishes whole within it.
func TestCloseLetsStreamsFinish(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.ShutdownGrace = time.Minute; c.FirstTokenTimeout = time.Minute })
	gate := make(chan struct{})
	h.ups[0].SetGate(gate)
	got := make(chan reply, 1)
	go func() { got <- h.chat(streamReq, authed()) }()
	<-h.ups[0].Arrived()
	closed := make(chan error, 1)
	go func() { closed <- h.edge.Close() }()
	// Shutdown has begun once the listener refuses new connections.
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", h.edge.Addr())
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	}, 5*time.Second, 10*time.Millisecond)
	close(gate)
	r := <-got
	require.Equal(t, http.StatusOK, r.status)
	evs := sseData(t, r.body)
	require.Equal(t, "[DONE]", evs[len(evs)-1])
	require.NoError(t, <-closed)
	h.client.CloseIdleConnections()
}

// A stream still running when the grace ends is cut, and Close returns.
func TestCloseCutsStreamsAfterTheGrace(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.ShutdownGrace = 50 * time.Millisecond; c.IdleTimeout = time.Minute })
	h.ups[0].SetMode(fakeupstream.HangMidStream)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, h.edge.URL()+"/chat/completions", strings.NewReader(streamReq))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+clientKey)
	resp, err := h.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(resp.Body) // cut short: the error is expected
		got <- string(b)
	}()
	require.ErrorContains(t, h.edge.Close(), "graceful shutdown")
	h.edge.closeErr = nil // asserted; the harness closes again at cleanup
	require.NotContains(t, <-got, "[DONE]")
	h.client.CloseIdleConnections()
}
