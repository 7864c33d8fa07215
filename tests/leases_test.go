package tests

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	edgeapp "github.com/switchboard-ai/switchboard/services/edge/app"
)

// TestLeasesAdmitLocallyAndNeverOverAdmit runs three deciders with quota
// leases on, an edge on each of the two that do not own the broker, and a
// tenant limit of 300 requests a minute and a provider limit of 400 on the
// one endpoint. The deciders' clock stands still, so the buckets refill
// nothing and the counts are exact. A paced load first: most requests are
// admitted on the replicas' leases, with no forwarding hop. Then both edges
// send as fast as they can until the tenant's limit refuses: the provider
// saw exactly the requests answered 200, never more than the 300.
func TestLeasesAdmitLocallyAndNeverOverAdmit(t *testing.T) {
	clock := &fakeClock{}
	clock.Freeze()
	leases := func(c *deciderapp.Config) {
		c.NoProbes, c.Now, c.BrokerLeases = true, clock.Now, true
	}
	s := startStack(t, stackOptions{sim: simConfig, replicas: []string{"r1", "r2"}, tune: leases, tuneReplica: leases,
		edgeTo: func(s *stack) string { return s.replicas[0].Addr() },
		catalog: func(url func(string) string) string {
			return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - provider: alpha
        base_url: %[2]s
        upstream_model: %[3]s
        api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA
        price: {input: 0.10, cached_input: 0.05, output: 0.50}
        limits: [{unit: requests, per: minute, capacity: 400, scope: provider_project}]
workload_classes:
  interactive: {max_wait: 100ms}   # shorter than a request's refill (200 ms): refused at once, the clock stands still
tenants:
  - id: acme
    api_keys_sha256: [%[4]s]
    limits: [{unit: requests, per: minute, capacity: 300}]
`, model, url("alpha"), simModel, catalog.HashKey(testKey))
		}})
	require.True(t, s.decider.OwnsBroker(), "the first decider owns the broker")
	second := startEdgeWithAlpha(t, s.replicas[1].Addr())
	edges := []string{s.edge.URL(), second.URL()}

	var ok, refused atomic.Int64
	send := func(url string) int {
		code := postChat(t, url, testKey)
		switch code {
		case http.StatusOK:
			ok.Add(1)
		case http.StatusTooManyRequests:
			refused.Add(1)
		default:
			t.Errorf("unexpected status %d", code)
		}
		return code
	}
	// Paced: 2 clients per edge, one request every 100 ms each, for 4 s.
	var wg sync.WaitGroup
	for _, url := range edges {
		for range 2 {
			wg.Go(func() {
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for range 40 {
					<-tick.C
					send(url)
				}
			})
		}
	}
	wg.Wait()
	require.Zero(t, refused.Load(), "160 requests fit in 300")
	var lease, forwarded int64
	for _, r := range s.replicas {
		_, l, f := r.Admissions()
		lease, forwarded = lease+l, forwarded+f
	}
	require.Equal(t, ok.Load(), lease+forwarded)
	t.Logf("paced load: %d admitted on leases, %d forwarded (%.0f%% without a forwarding hop)", lease, forwarded, 100*float64(lease)/float64(lease+forwarded))
	require.Greater(t, lease, 2*forwarded, "most requests are admitted on the replicas' leases")

	// As fast as they can, until the tenant's limit refuses 20 in a row on
	// every client.
	for _, url := range edges {
		for range 4 {
			wg.Go(func() {
				for run := 0; run < 20; {
					if send(url) == http.StatusOK {
						run = 0
					} else {
						run++
					}
				}
			})
		}
	}
	wg.Wait()
	served := s.sim.Provider("alpha").Stats().Requests
	t.Logf("admitted %d of the tenant's 300, refused %d", ok.Load(), refused.Load())
	require.Equal(t, ok.Load(), served, "every admitted request, and only those, reached the provider")
	require.LessOrEqual(t, served, int64(300), "never more than the tenant's limit")
	require.Positive(t, refused.Load())
}

// startEdgeWithAlpha starts an edge in front of the decider at addr, with
// alpha's credential, closed when the test ends.
func startEdgeWithAlpha(t *testing.T, addr string) *edgeapp.Edge {
	t.Helper()
	args := append([]string{"--listen=127.0.0.1:0", "--decider=" + addr, edgeTokenFlag(t), "--report-flush-interval=20ms", failClosed}, rpcGuards...)
	ecfg, err := edgeapp.ParseFlags(args, func(string) string { return "" })
	require.NoError(t, err)
	ecfg.Getenv = func(k string) string { return map[string]string{"SWITCHBOARD_PROVIDER_KEY_ALPHA": alphaCred}[k] }
	e, err := edgeapp.Start(t.Context(), ecfg, quietLogger(nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// postChat sends a short chat request to the edge at url and returns its
// status.
func postChat(t *testing.T, url, key string) int {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/chat/completions",
		strings.NewReader(`{"model":"`+model+`","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Error(err)
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}
