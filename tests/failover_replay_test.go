package tests

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// brokerOwnerPrefix is where the deciders elect the broker's owner; the
// oldest key under it owns the broker and names its address.
const brokerOwnerPrefix = "/switchboard/v1/broker/owner"

// brokerOwner returns the election key that owns the broker: the address it
// names and its lease ("" and 0 when nobody owns it).
func brokerOwner(t *testing.T, cli *clientv3.Client) (string, clientv3.LeaseID) {
	t.Helper()
	resp, err := cli.Get(t.Context(), brokerOwnerPrefix, append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
	require.NoError(t, err)
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestReconciliationsReachEveryNextOwner: three deciders on one etcd, an
// edge connected to one that does not own the broker. Requests complete
// and are reconciled by an owner that never snapshots them; it crashes. The
// next owner restored a snapshot in which the requests still hold their
// slots, and the edge's stream, to a replica that survives, never breaks:
// the edge must still send the new owner what the old one applied, so the
// tenant is admitted again (at its learning-mode capacity) as soon as the
// new owner took over, with no traffic in between, not after the slots'
// 2-minute TTL.
func TestReconciliationsReachEveryNextOwner(t *testing.T) {
	const sessionTTL = 3 * time.Second
	// The first owner, which also runs the etcd, saves its state every
	// second; the two others, once owners, never within the test: what
	// they apply is in no snapshot. The edge talks to the third only.
	r := startStack(t, stackOptions{sim: slowSimConfig, catalog: concurrencyCatalog(4), replicas: []string{"second", "third"},
		tune: func(c *deciderapp.Config) { c.ID, c.Seed, c.BrokerSessionTTL = "first", 0, sessionTTL },
		tuneReplica: func(c *deciderapp.Config) {
			c.Seed, c.BrokerSessionTTL, c.BrokerSnapshotInterval = 0, sessionTTL, time.Hour
		},
		edgeTo:       func(s *stack) string { return s.replicas[1].Addr() },
		ownDeadlines: true,
	})
	// second campaigns before third: owns the broker next.
	first, second, third := r.decider, r.replicas[0], r.replicas[1]
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{first.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	owner, lease := brokerOwner(t, cli)
	require.Equal(t, first.Addr(), owner)

	// 100 tokens at 20 a second: the calls outlive the first owner.
	var streams []*liveStream
	for range 4 {
		s, code := r.openStream(t, 100)
		require.Equal(t, http.StatusOK, code)
		streams = append(streams, s)
	}
	_, code := r.openStream(t, 30)
	require.Equal(t, http.StatusTooManyRequests, code, "four in flight: the fifth is refused")
	require.Eventually(t, func() bool {
		resp, err := cli.Get(t.Context(), "/switchboard/v1/broker/snapshot")
		if err != nil || len(resp.Kvs) == 0 {
			return false
		}
		for _, s := range streams {
			if !strings.Contains(string(resp.Kvs[0].Value), s.id) {
				return false
			}
		}
		return true
	}, waitFor, tick, "the first owner's snapshot holds the four reservations")

	// The first owner's session ends (its process paused past the TTL):
	// it writes nothing more, and the second owns the broker, restoring
	// the snapshot with the four slots held.
	_, err = cli.Revoke(t.Context(), lease)
	require.NoError(t, err)
	require.Eventually(t, func() bool { owner, _ := brokerOwner(t, cli); return owner == second.Addr() }, waitFor, tick)
	// The calls were still running when the first owner lost the broker:
	// it gave none of the four slots back (its memory stays as it was).
	found := false
	for _, l := range first.TenantLimits("acme") {
		if l.Unit == "concurrent_requests" {
			found = true
			require.Zero(t, l.Remaining, "no call ended before the first owner lost the broker")
		}
	}
	require.True(t, found)
	saved, err := third.BrokerSnapshotVersion(t.Context())
	require.NoError(t, err)

	// The calls end; the second owner applies their reconciliations (the
	// edge's acknowledgements say so) and saves nothing.
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Go(func() { s.finish(t) })
	}
	wg.Wait()
	require.Eventually(t, r.edgeSettled, waitFor, tick, "every reconciliation acknowledged")
	s, code := r.openStream(t, 2)
	require.Equal(t, http.StatusOK, code, "the second owner freed the slots")
	s.finish(t)
	require.Eventually(t, r.edgeSettled, waitFor, tick)
	v, err := third.BrokerSnapshotVersion(t.Context())
	require.NoError(t, err)
	require.Equal(t, saved, v, "the reconciliations came after the last snapshot")

	// The second owner crashes: no final snapshot. The third takes over once
	// its session's lease expires, restoring the first owner's snapshot, in
	// which the four slots are still held.
	crash := time.Now()
	second.Kill()
	var admitted []*liveStream
	leave := func() {
		for _, s := range admitted {
			s.leave()
		}
		admitted = nil
	}
	defer leave()
	// Learning mode keeps half of the 4 free: two streams together, once
	// every slot was given back. Polled here rather than in
	// require.Eventually, whose condition may still run after it gave up.
	deadline := crash.Add(sessionTTL + time.Second)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for len(admitted) < 2 {
		leave()
		for range 2 {
			s, code := r.openStream(t, 30)
			if code != http.StatusOK {
				break
			}
			admitted = append(admitted, s)
		}
		if len(admitted) == 2 {
			break
		}
		require.True(t, time.Now().Before(deadline),
			"the tenant is admitted at its learning-mode capacity within the session TTL and a second (%d of 2 after %v)",
			len(admitted), time.Since(crash).Round(time.Millisecond))
		<-poll.C
	}
	t.Logf("admitted at learning-mode capacity %v after the crash", time.Since(crash).Round(time.Millisecond))
	_, code = r.openStream(t, 30)
	require.Equal(t, http.StatusTooManyRequests, code, "a third is held back by learning mode")
	owner, _ = brokerOwner(t, cli)
	require.Equal(t, third.Addr(), owner)
}

// concurrencyCatalog is the catalog of the replica tests: one model
// served by the simulator's alpha, with no queueing, and tenant acme
// (testKey) allowed capacity requests in flight.
func concurrencyCatalog(capacity int) func(url func(string) string) string {
	return func(url func(string) string) string {
		return fmt.Sprintf(`
workload_classes:
  interactive: {max_depth: 0}
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: %[2]s, upstream_model: %[3]s, price: {input: 1, output: 2}}
tenants:
  - id: acme
    api_keys_sha256: [%[4]s]
    limits: [{unit: concurrent_requests, capacity: %[5]d}]
`, model, url("alpha"), simModel, catalog.HashKey(testKey), capacity)
	}
}
