package app

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// A client that stops reading a stream blocks the edge's writes. The edge
// cuts it after the write timeout and records the call as the client's
// doing: cancelled by the client, not a provider timeout (which would bench
// a healthy provider). The idle timeout, shorter than the write timeout
// here, measures the provider's silence only, not time spent blocked on
// the client.
func TestClientThatStopsReadingIsBlamed(t *testing.T) {
	h := newHarness(t, 2, func(c *Config) {
		// Generous against a loaded machine: only the order matters, the
		// provider's idle timeout expiring first while a write is blocked.
		c.IdleTimeout = time.Second
		c.WriteTimeout = 2 * time.Second
	})
	h.ups[0].SetMode(fakeupstream.Endless)

	conn, err := net.Dial("tcp", h.edge.Addr())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", clientKey, len(streamReq), streamReq)
	// ...and never reads the answer.

	reps := h.waitReports(1)
	require.Equal(t, h.eps[0].GetId(), reps[0].GetEndpointId())
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, reps[0].GetOutcome(), reps[0].GetError())
	require.Contains(t, reps[0].GetError(), "client stopped reading")
	require.Empty(t, h.ups[1].Requests(), "nothing is retried once the answer started")

	var rec *switchboardv1.ActivityRecord
	require.Eventually(t, func() bool {
		recs := h.fd.ActivityRecords()
		if len(recs) == 0 {
			return false
		}
		rec = recs[0]
		return true
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_CLIENT_CANCELLED, rec.GetStatus())
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, rec.GetAttempts()[0].GetOutcome())
}
