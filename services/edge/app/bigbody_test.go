package app

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A body a little over the limit is read to its end and discarded before
// the 413, so a client still writing it is not reset mid-upload (it would
// see "connection reset by peer" instead of the answer) and may reuse the
// connection. A body far over the limit is not read: it is answered at
// once and its connection closed.
func TestOversizedBody(t *testing.T) {
	const limit = 64 << 10
	h := newHarness(t, 1, func(c *Config) { c.MaxBodyBytes = limit })
	send := func(t *testing.T, conn net.Conn, br *bufio.Reader, body string, declared int) *http.Response {
		t.Helper()
		_, err := fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", clientKey, declared)
		require.NoError(t, err)
		require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
		_, err = io.WriteString(conn, body)
		require.NoError(t, err, "the edge must read the whole body it is sent")
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
		return resp
	}

	t.Run("a little over: read, answered, connection kept", func(t *testing.T) {
		conn, err := net.Dial("tcp", h.edge.Addr())
		require.NoError(t, err)
		defer conn.Close()
		br := bufio.NewReader(conn)
		// Far more than the socket buffers hold, so a server that stopped
		// reading would block this write.
		big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2*limit-100) + `"}]}`
		resp := send(t, conn, br, big, len(big))
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
		require.False(t, resp.Close, "the connection stays usable")

		resp = send(t, conn, br, plainReq, len(plainReq))
		require.Equal(t, http.StatusOK, resp.StatusCode, "the same connection serves the next request")
	})

	t.Run("far over: answered without reading, connection closed", func(t *testing.T) {
		conn, err := net.Dial("tcp", h.edge.Addr())
		require.NoError(t, err)
		defer conn.Close()
		br := bufio.NewReader(conn)
		resp := send(t, conn, br, "", 100*limit) // headers only: the body never comes
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
		require.True(t, resp.Close)
	})
}
