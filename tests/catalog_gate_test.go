package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// The catalogs of the gate tests: gateOld is applied; gateNew changes
// every part (a model, a tenant and its key, a limit) and is valid but
// for the ramp period given.
const (
	gateOldModel = "vendor/old-model"
	gateNewModel = "vendor/new-model"
	gateAcmeKey  = "sk-gate-acme"
	gateBetaKey  = "sk-gate-beta"
)

func gateOld() string {
	return withCallers(fmt.Sprintf(`
models:
  - id: %s
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.2, output: 0.8}}
tenants:
  - id: acme
    api_keys_sha256: [%s]
    limits: [{unit: requests, per: day, capacity: 100}]
`, gateOldModel, catalog.HashKey(gateAcmeKey)))
}

func gateNew(rampPeriod string) string {
	return withCallers(fmt.Sprintf(`
models:
  - id: %s
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.2, output: 0.8}}
  - id: %s
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.2, output: 0.8}}
tenants:
  - id: acme
    api_keys_sha256: [%s]
    limits:
      - unit: requests
        per: day
        capacity: 200
        ramp: {max_increase: 0.5, period: %s}
  - id: beta
    api_keys_sha256: [%s]
`, gateOldModel, gateNewModel, catalog.HashKey(gateAcmeKey), rampPeriod, catalog.HashKey(gateBetaKey)))
}

// gateRampLine is the line of the ramp in gateNew: the refusal names it.
func gateRampLine(t *testing.T) int {
	t.Helper()
	for i, l := range strings.Split(gateNew("1m"), "\n") {
		if strings.Contains(l, "ramp:") {
			return i + 1
		}
	}
	t.Fatal("gateNew has no ramp")
	return 0
}

// startGate starts a decider with gateOld on an embedded etcd, logging
// into logs, and an edge in front of it, once the edge has its key set.
func startGate(t *testing.T, logs *lockedWriter) *stack {
	t.Helper()
	s := startStack(t, stackOptions{catalog: func(func(string) string) string { return gateOld() }, deciderLog: logs,
		tune: func(c *deciderapp.Config) { c.ID = "gate" }})
	require.Eventually(t, func() bool { return s.edge.KeySetVersion() == s.decider.KeySetVersion() }, 10*time.Second, 10*time.Millisecond)
	return s
}

// modelIDs lists the models the decider offers the key's tenant.
func modelIDs(t *testing.T, c switchboardv1.RouterServiceClient, key string) ([]string, error) {
	t.Helper()
	resp, err := c.ListModels(t.Context(), &switchboardv1.ListModelsRequest{Identity: byKey(key)})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range resp.GetModels() {
		ids = append(ids, m.GetId())
	}
	return ids, nil
}

// requireOldCatalog asserts that every part of the decider still holds
// gateOld: its routes, its tenants and keys, its limits and the key set
// its edge was told.
func requireOldCatalog(t *testing.T, d *deciderapp.Decider, keySetVersion uint64, edgeURL string) {
	t.Helper()
	ops := operatorRPC(t, d.Addr())
	ids, err := modelIDs(t, ops, gateAcmeKey)
	require.NoError(t, err)
	require.Equal(t, []string{gateOldModel}, ids, "routes")
	_, err = modelIDs(t, ops, gateBetaKey)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "tenants: the new tenant's key is unknown (%v)", err)
	var limit float64
	for _, l := range d.TenantLimits("acme") {
		if l.Unit == "requests" && l.Window == "day" {
			limit = l.Limit
		}
	}
	require.Equal(t, 100.0, limit, "limits")
	require.Equal(t, keySetVersion, d.KeySetVersion(), "key set")
	require.Equal(t, 200, getModels(t, edgeURL, gateAcmeKey))
	require.Equal(t, 401, getModels(t, edgeURL, gateBetaKey), "the edge's key set")
}

// TestCatalogGateAtStart: a decider started with a catalog that parses but
// whose ramp period the rate-limit broker cannot take refuses to start,
// naming the line, and stores nothing: the replica already running on the
// same etcd keeps its catalog and sees no change.
func TestCatalogGateAtStart(t *testing.T) {
	logs := &lockedWriter{w: &bytes.Buffer{}}
	s := startGate(t, logs)
	first, e := s.decider, s.edge
	before := first.KeySetVersion()
	for _, period := range []string{"500ms", "48h"} {
		dir := t.TempDir()
		p := filepath.Join(dir, "catalog.yaml")
		require.NoError(t, os.WriteFile(p, []byte(gateNew(period)), 0o600))
		err := startRefused(t, deciderapp.Config{
			Listen: "127.0.0.1:0", Etcd: []string{first.EtcdEndpoint()}, DataDir: dir, Catalog: p, ID: "gate-" + period,
			ShutdownTimeout: 5 * time.Second,
		})
		require.ErrorContains(t, err, fmt.Sprintf("line %d", gateRampLine(t)), period)
		require.ErrorContains(t, err, "ramp.period", period)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{first.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	got, err := cli.Get(t.Context(), secCatalogKey)
	require.NoError(t, err)
	require.Len(t, got.Kvs, 1)
	require.Equal(t, gateOld(), string(got.Kvs[0].Value), "the refused catalog was stored")
	require.Zero(t, first.CatalogsRefused())
	requireOldCatalog(t, first, before, e.URL())
}

// TestCatalogGateOnChange: a catalog stored in etcd that routing would
// take but the rate-limit broker refuses (a ramp period under 1s) is
// refused whole: the running decider keeps the old catalog in every part,
// counts the refusal and logs why.
func TestCatalogGateOnChange(t *testing.T) {
	logs := &lockedWriter{w: &bytes.Buffer{}}
	s := startGate(t, logs)
	d, e := s.decider, s.edge
	before := d.KeySetVersion()

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{d.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	_, err = cli.Put(t.Context(), secCatalogKey, gateNew("500ms"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return d.CatalogsRefused() == 1 }, 10*time.Second, 10*time.Millisecond)
	requireOldCatalog(t, d, before, e.URL())
	logs.mu.Lock()
	text := logs.w.String()
	logs.mu.Unlock()
	require.Contains(t, text, "catalog refused")
	require.Contains(t, text, "ramp.period")

	// A valid catalog after it applies in every part.
	_, err = cli.Put(t.Context(), secCatalogKey, gateNew("1m"))
	require.NoError(t, err)
	ops := operatorRPC(t, d.Addr())
	require.Eventually(t, func() bool {
		ids, err := modelIDs(t, ops, gateBetaKey)
		return err == nil && len(ids) == 2
	}, 10*time.Second, 10*time.Millisecond)
	require.Greater(t, d.KeySetVersion(), before)
	require.Equal(t, 1, int(d.CatalogsRefused()))
}
