package app

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakedecider"
)

// rawRequest opens a connection and sends a chat request's headers,
// announcing a body of size bytes, and the first sent bytes of body. The
// rest is never sent: a slow (or stalled) client.
func rawRequest(t *testing.T, addr, auth string, size int, sent string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	hdr := "POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n"
	if auth != "" {
		hdr += "Authorization: Bearer " + auth + "\r\n"
	}
	_, err = fmt.Fprintf(conn, "%sContent-Length: %d\r\n\r\n%s", hdr, size, sent)
	require.NoError(t, err)
	return conn
}

// readResponse reads the answer on conn; the deadline only guards against
// a hang (an answer that never comes fails the test).
func readResponse(t *testing.T, conn net.Conn) *http.Response {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "no answer")
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// A body that trickles in is cut after the body read timeout with a 408,
// and its connection closed.
func TestSlowBodyIsCut(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.BodyReadTimeout = 200 * time.Millisecond })
	conn := rawRequest(t, h.edge.Addr(), clientKey, 1000, `{"model":"org/model",`)
	resp := readResponse(t, conn)
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	require.True(t, resp.Close, "the connection is closed, not drained")
	require.Empty(t, h.ups[0].Requests())
}

// A request without a usable key is refused before a byte of its body is
// read, and the connection closed rather than drained.
func TestBodyOfMissingKeyIsNeverRead(t *testing.T) {
	h := newHarness(t, 1, nil)
	for _, auth := range []string{"", "not a key"} {
		conn := rawRequest(t, h.edge.Addr(), auth, 100000, "")
		resp := readResponse(t, conn)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.True(t, resp.Close, "the connection is closed, not drained")
	}
}

// Bodies of API keys the edge has not yet seen accepted are read a few at
// a time; beyond the cap such requests are refused without reading their
// body, while keys already accepted are not held back.
func TestUnverifiedBodiesAreCapped(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.MaxUnverifiedBodies = 2; c.BodyReadTimeout = time.Minute })
	// clientKey is accepted once: from then on it is verified.
	require.Equal(t, http.StatusOK, h.chat(plainReq, authed()).status)

	// Two stalled bodies of unknown keys take both slots...
	rawRequest(t, h.edge.Addr(), "sk-unknown-1", 1000, "{")
	rawRequest(t, h.edge.Addr(), "sk-unknown-2", 1000, "{")
	// ...so, once they hold them, another unknown key is refused at once,
	// its body unread. (Until they do, a probe with its whole body is
	// served; each probe uses a fresh key, never verified.)
	probe := 0
	require.Eventually(t, func() bool {
		probe++
		conn := rawRequest(t, h.edge.Addr(), fakedecider.TestKey(probe), len(plainReq), plainReq)
		resp := readResponse(t, conn)
		return resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" && resp.Close
	}, 60*time.Second, 20*time.Millisecond) // a bound on waiting, generous for a machine busy building other tests' binaries
	conn := rawRequest(t, h.edge.Addr(), "sk-unknown-3", 1000, "")
	require.Equal(t, http.StatusServiceUnavailable, readResponse(t, conn).StatusCode, "refused without waiting for the body")

	// A verified key still gets through.
	require.Equal(t, http.StatusOK, h.chat(plainReq, authed()).status)
}

// A key the decider refused is refused again without its body being read.
func TestBodyOfRefusedKeyIsNeverRead(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.fd.SetDecide(func(*switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
		return nil, status.Error(codes.Unauthenticated, "invalid API key")
	})
	conn := rawRequest(t, h.edge.Addr(), "sk-revoked", len(plainReq), plainReq)
	require.Equal(t, http.StatusUnauthorized, readResponse(t, conn).StatusCode)
	conn = rawRequest(t, h.edge.Addr(), "sk-revoked", 100000, "")
	resp := readResponse(t, conn)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.True(t, resp.Close)
}
