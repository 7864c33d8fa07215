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
)

// An edge is ready only while its decider can admit: with the decider's etcd
// out of reach (here frozen), /readyz answers 503 with the reason within a
// few seconds, and 200 again once etcd is back. Before, /readyz stayed 200
// through the outage: the decider's health said only that it was up.
func TestReadinessFollowsTheDecidersEtcd(t *testing.T) {
	dir := t.TempDir()
	cat := fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1, upstream_model: %[2]s, price: {input: 0.1, output: 0.5}}
tenants:
  - id: acme
    api_keys_sha256: [%[3]s]
`, model, simModel, catalog.HashKey(testKey))
	owner := startDecider(t, deciderapp.Config{Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: dir,
		Catalog: writeCatalog(t, dir, cat), ID: "ready-owner", Exploration: -1})
	f := startFreezer(t, strings.TrimPrefix(owner.EtcdEndpoint(), "http://"))
	d := startDecider(t, deciderapp.Config{Listen: "127.0.0.1:0", Etcd: []string{"http://" + f.Addr()},
		DataDir: t.TempDir(), ID: "ready-replica", Exploration: -1})
	t.Cleanup(func() { f.Set(false) }) // before d closes: a decider stops against a live etcd
	edge := startEdge(t, d.Addr())

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
	dir := t.TempDir()
	cat := fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1, upstream_model: %[2]s, price: {input: 0.1, output: 0.5}}
tenants:
  - id: acme
    api_keys_sha256: [%[3]s]
`, model, simModel, catalog.HashKey(testKey))
	owner := startDecider(t, deciderapp.Config{Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: dir,
		Catalog: writeCatalog(t, dir, cat), ID: "frozen-owner", Exploration: -1})
	f := startFreezer(t, strings.TrimPrefix(owner.EtcdEndpoint(), "http://"))
	d, err := deciderapp.Start(t.Context(), deciderapp.Config{Listen: "127.0.0.1:0", Etcd: []string{"http://" + f.Addr()},
		DataDir: t.TempDir(), ID: "frozen-replica", Exploration: -1, TokenFile: tokenFile(t, testReplicaToken)}, quietLogger(nil))
	require.NoError(t, err)
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
