package app

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
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
	dir := t.TempDir()
	p := filepath.Join(dir, "catalog.yaml")
	require.NoError(t, os.WriteFile(p, swapCatalog("a"), 0o600))
	d, _ := startDecider(t, Config{Catalog: p, DataDir: dir})
	t.Cleanup(d.Close)
	base := int64(d.KeySetVersion())
	catalogs := [2][]byte{swapCatalog("a"), swapCatalog("b")}
	const swaps = 400

	var stop atomic.Bool
	var torn atomic.Int64
	var checked atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				before := d.KeySetVersion()
				models := d.router.ListModels()
				_, errA := d.authn.Resolve(&switchboardv1.Identity{ApiKeySha256: catalog.HashKey("key-a")})
				after := d.KeySetVersion()
				if before != after {
					continue
				}
				checked.Add(1)
				want := "a"
				if (int64(before)-base)%2 == 1 {
					want = "b"
				}
				if models[0].GetId() != "model-"+want || (errA == nil) != (want == "a") {
					torn.Add(1)
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
	require.Positive(t, checked.Load(), "no read fell between two swaps")
	require.Zero(t, torn.Load(), "reads that saw routing and auth of one catalog with the key set of another (of %d)", checked.Load())
}
