package app

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

// swapCatalog is catalog A (odd revisions) or B (even): each its own
// model and its own tenant's key, so routing, auth and the key set each
// say which one they are reading.
func swapCatalog(name string) []byte {
	return []byte(fmt.Sprintf(`
models:
  - id: model-%[1]s
    endpoints: [{provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 1, output: 1}}]
tenants:
  - {id: tenant-%[1]s, api_keys_sha256: [%[2]s]}
`, name, catalog.HashKey("key-"+name)) + testCallers())
}

// TestCatalogSwapIsOneSnapshot: while catalogs A and B replace each other,
// a reader never sees the routes of one with the callers or the key set of
// the other. The reader checks the key set's version (the catalog's
// revision) before and after reading routing and auth: when it did not
// change, no catalog was applied in between, so routing and auth must be
// that revision's catalog.
func TestCatalogSwapIsOneSnapshot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "catalog.yaml")
	require.NoError(t, os.WriteFile(p, swapCatalog("a"), 0o600))
	d, _ := startDecider(t, Config{Catalog: p, DataDir: dir})
	t.Cleanup(d.Close)
	base := int64(d.KeySetVersion())
	catalogs := [2][]byte{swapCatalog("a"), swapCatalog("b")}
	const swaps = 400

	var torn atomic.Int64
	var checked atomic.Int64
	swapping(d, catalogs, swaps, 2, func() bool {
		before := d.KeySetVersion()
		models := d.router.ListModels()
		_, idx := d.catalog.PinAuth(t.Context())
		_, errA := idx.Resolve(&switchboardv1.Identity{ApiKeySha256: catalog.HashKey("key-a")})
		after := d.KeySetVersion()
		if before != after {
			return true
		}
		checked.Add(1)
		want := "a"
		if (int64(before)-base)%2 == 1 {
			want = "b"
		}
		if models[0].GetId() != "model-"+want || (errA == nil) != (want == "a") {
			torn.Add(1)
		}
		return true
	})
	require.Positive(t, checked.Load(), "no read fell between two swaps")
	require.Zero(t, torn.Load(), "reads that saw routing and auth of one catalog with the key set of another (of %d)", checked.Load())
}

// tornCatalog is catalog A or B of TestDecideIsOneCatalog: the same API
// key, the same model, but A gives the key to tenant-a and routes the
// model to provider alpha, B gives it to tenant-b and routes it to beta.
func tornCatalog(name, provider string) []byte {
	return []byte(fmt.Sprintf(`
models:
  - id: model-m
    endpoints: [{provider: %[2]s, base_url: http://127.0.0.1:1/v1, price: {input: 1, output: 1}}]
tenants:
  - {id: tenant-%[1]s, api_keys_sha256: [%[3]s]}
`, name, provider, catalog.HashKey("key-m")) + testCallers())
}

// TestDecideIsOneCatalog: while catalogs A and B replace each other, every
// Decide answers wholly from one of them: the tenant its identity resolved
// to and the endpoint it chose come from the same catalog, never tenant-a
// routed to beta or tenant-b to alpha. Authentication, identity and
// routing each reading the catalog applied at that instant would let a
// swap land between them.
func TestDecideIsOneCatalog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "catalog.yaml")
	require.NoError(t, os.WriteFile(p, tornCatalog("a", "alpha"), 0o600))
	d, client := startDecider(t, Config{Catalog: p, DataDir: dir})
	t.Cleanup(d.Close)
	catalogs := [2][]byte{tornCatalog("a", "alpha"), tornCatalog("b", "beta")}
	want := map[string]string{"tenant-a": "alpha/model-m", "tenant-b": "beta/model-m"}
	const swaps = 2000

	var torn, answered atomic.Int64
	swapping(d, catalogs, swaps, 8, func() bool {
		resp, err := client.Decide(t.Context(), &switchboardv1.DecideRequest{
			Model: "model-m", Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey("key-m")},
		})
		if !assert.NoError(t, err) {
			return false
		}
		answered.Add(1)
		if want[resp.GetIdentity().GetTenantId()] != resp.GetEndpoint().GetId() {
			torn.Add(1)
		}
		return true
	})
	t.Logf("%d Decide answers, %d torn, over %d swaps", answered.Load(), torn.Load(), swaps)
	require.Positive(t, answered.Load())
	require.Zero(t, torn.Load(), "Decide answers whose tenant and endpoint came from different catalogs (of %d)", answered.Load())
}

// swapping applies catalogs[1] and catalogs[0] to d in turn, swaps times,
// at the revisions after d's, while readers goroutines each call read
// until the swaps are done or it returns false; it returns once every
// reader stopped.
func swapping(d *Decider, catalogs [2][]byte, swaps, readers int, read func() bool) {
	base := int64(d.KeySetVersion())
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			for !stop.Load() {
				if !read() {
					return
				}
			}
		})
	}
	for i := range swaps {
		rev := base + int64(i) + 1
		d.onCatalog(catalogs[(rev-base)%2], rev)
	}
	stop.Store(true)
	wg.Wait()
}

// depthCatalog is a catalog whose interactive class may queue depth
// requests: a figure both the broker (its queue contract) and the auth
// index (the contract admission reads) take from it.
func depthCatalog(depth int) []byte {
	return []byte(fmt.Sprintf(`
models:
  - id: model-m
    endpoints: [{provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 1, output: 1}}]
workload_classes:
  interactive: {max_wait: 1s, max_depth: %d}
tenants:
  - {id: tenant-a, api_keys_sha256: [%s]}
`, depth, catalog.HashKey("key-a")) + testCallers())
}

// TestCatalogAppliesInOneStep: a catalog change applies the broker's
// limits and the views calls pin in one step. Catalog n queues n
// interactive requests; a reader reads the broker's contract, then pins
// the views: as no call can pin views while the broker already runs a
// newer catalog, the broker it read before never ran a newer one than the
// views it then pinned. Applying the broker first and the views after it,
// each on its own, let a call pin the old views while the new limits ran.
func TestCatalogAppliesInOneStep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "catalog.yaml")
	require.NoError(t, os.WriteFile(p, depthCatalog(1), 0o600))
	d, _ := startDecider(t, Config{Catalog: p, DataDir: dir})
	t.Cleanup(d.Close)
	base := int64(d.KeySetVersion())
	const swaps = 3000

	var stop atomic.Bool
	var ahead, checked atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				ran := d.broker.Contract(broker.ClassInteractive).MaxDepth
				_, v := d.catalog.Pin(t.Context())
				k, ok := v.Auth.Contract(switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE)
				if !assert.True(t, ok) {
					return
				}
				checked.Add(1)
				if ran > k.MaxDepth {
					ahead.Add(1)
				}
			}
		})
	}
	for i := range swaps {
		d.onCatalog(depthCatalog(2+i), base+int64(i)+1)
	}
	stop.Store(true)
	wg.Wait()
	require.Zero(t, d.CatalogsRefused())
	require.Positive(t, checked.Load())
	require.Zero(t, ahead.Load(), "calls that pinned a catalog older than the broker's (of %d)", checked.Load())
}
