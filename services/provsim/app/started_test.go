package app

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A request whose client leaves while its body is still coming counts as
// received but never as a started call: the tests that wait for calls to
// reach a provider before cancelling them wait on Started, which a request
// cut this way never reaches.
func TestStartedCountsOnlyCallsWhoseBodyWasRead(t *testing.T) {
	p := startProvider(t, "", ModelConfig{ID: "m", DefaultOutputTokens: 5})
	conn, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Stats().Requests == 1 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool { return p.Stats().BadRequest == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Zero(t, p.Stats().Started)

	r := do(t, newClient(t), "POST", p.URL()+"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	require.Equal(t, 200, r.status, string(r.body))
	s := p.Stats()
	require.EqualValues(t, 1, s.Started)
	require.EqualValues(t, 1, s.Models["m"].Requests)
}
