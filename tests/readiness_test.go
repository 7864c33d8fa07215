package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	"github.com/switchboard-ai/switchboard/tests/freezer"
)

// frozenReplica starts a decider (the owner, on an embedded etcd) and a
// replica that reaches that etcd through a freezer, with an edge on the
// replica unless noEdge; the freezer thaws before the replica closes, as a
// decider stops against a live etcd.
func frozenReplica(t *testing.T, id string, noEdge bool) (*stack, *freezer.Proxy) {
	t.Helper()
	var f *freezer.Proxy
	s := startStack(t, stackOptions{noEdge: noEdge, replicas: []string{id + "-replica"},
		catalog: func(func(string) string) string {
			return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1, upstream_model: %[2]s, price: {input: 0.1, output: 0.5}}
tenants:
  - id: acme
    api_keys_sha256: [%[3]s]
`, model, simModel, catalog.HashKey(testKey))
		},
		tune: func(c *deciderapp.Config) { c.ID = id + "-owner" },
		replicaEtcd: func(s *stack) string {
			f = startFreezer(t, strings.TrimPrefix(s.decider.EtcdEndpoint(), "http://"))
			return "http://" + f.Addr()
		},
		edgeTo: func(s *stack) string { return s.replicas[0].Addr() }})
	t.Cleanup(func() { f.Set(false) })
	return s, f
}

// An edge is ready only while its decider can admit: with the decider's etcd
// out of reach (here frozen), /readyz answers 503 with the reason within a
// few seconds, and 200 again once etcd is back. Before, /readyz stayed 200
// through the outage: the decider's health said only that it was up.
func TestReadinessFollowsTheDecidersEtcd(t *testing.T) {
	s, f := frozenReplica(t, "ready", false)
	edge := s.edge
	readyz := func() (int, map[string]string) {
		resp, err := http.Get("http://" + edge.Addr() + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]string
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}
	require.Eventually(t, func() bool { code, _ := readyz(); return code == http.StatusOK }, 20*time.Second, 50*time.Millisecond,
		"ready while etcd answers")

	f.Set(true)
	var body map[string]string
	require.Eventually(t, func() bool {
		var code int
		code, body = readyz()
		return code == http.StatusServiceUnavailable
	}, 20*time.Second, 50*time.Millisecond, "not ready while the decider's etcd is out of reach")
	require.Equal(t, "not_ready", body["status"])
	require.Contains(t, body["reason"], "admission")

	f.Set(false)
	require.Eventually(t, func() bool { code, _ := readyz(); return code == http.StatusOK }, 30*time.Second, 50*time.Millisecond,
		"ready again once etcd is back")
}

// A decider whose etcd does not answer still stops within its own bounds
// (each final write has a timeout): before, a replica campaigning behind
// the owner waited in the election's resignation for etcd to come back.
func TestDeciderStopsWhileItsEtcdIsFrozen(t *testing.T) {
	s, f := frozenReplica(t, "frozen", true)
	d := s.replicas[0]
	f.Set(true)
	closed := make(chan struct{})
	go func() { d.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(45 * time.Second):
		f.Set(false)
		<-closed
		t.Fatal("the decider waited for its frozen etcd to stop")
	}
}
