package app

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// With a debug listener the decider measures its gRPC calls by method and
// status code, beside the Go runtime's and the process's metrics.
func TestRPCMetricsScraped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, c := startDecider(t, Config{Catalog: writeLimited(t, dir), DataDir: dir, DebugListen: "127.0.0.1:0"})
	t.Cleanup(d.Close)
	decideReserve(t, c, 0)
	decideReserve(t, c, 1)

	// The server records a call's duration as the call ends, after its
	// answer is on the wire: a client may have both answers before the
	// second is recorded, so the scrape is repeated until it is.
	var fams map[string]*dto.MetricFamily
	var decides []*dto.Metric
	require.Eventually(t, func() bool {
		fams = scrape(t, d.DebugAddr())
		decides = series(fams, "rpc_server_call_duration_seconds", map[string]string{"rpc_method": "switchboard.v1.RouterService/Decide", "rpc_response_status_code": "OK"})
		return len(decides) == 1 && decides[0].GetHistogram().GetSampleCount() >= 2
	}, 10*time.Second, 10*time.Millisecond, "two Decide samples recorded")
	require.Equal(t, uint64(2), decides[0].GetHistogram().GetSampleCount())
	for _, name := range []string{"go_goroutines", "go_gc_duration_seconds", "process_cpu_seconds_total"} {
		require.Contains(t, fams, name)
	}
}
