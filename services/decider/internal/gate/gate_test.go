package gate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

// FuzzCatalogParts holds every part of the decider to the catalog's
// validation: whatever catalog.Parse accepts, the gate accepts (the
// broker's configuration, the key set), the broker is built from it, and
// the routing and auth indexes take it.
func FuzzCatalogParts(f *testing.F) {
	for _, p := range []string{"../../../../deploy/local/catalog.yaml"} {
		if data, err := os.ReadFile(filepath.Clean(p)); err == nil {
			f.Add(data)
		}
	}
	key := func(c string) string { return strings.Repeat(c, 64) }
	f.Add([]byte(`models:
  - id: m
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}, provider_project: p,
         limits: [{unit: requests, per: minute, capacity: 1, scope: provider_project, ramp: {max_increase: 1, period: 1s}},
                  {unit: concurrent_requests, capacity: 3}]}
  - id: n
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}, provider_project: p,
         limits: [{unit: requests, per: minute, capacity: 1, scope: provider_project, ramp: {max_increase: 1, period: 1s}}]}
partners:
  - {id: r, limits: [{unit: usd, per: day, capacity: 5, ramp: {max_increase: 0.5, period: 24h}}]}
tenants:
  - id: t
    partner: r
    weight: 2
    api_keys_sha256: [` + key("a") + `]
    api_keys: [{sha256: ` + key("b") + `, class: batch}]
    limits:
      - {unit: requests, per: day, capacity: 100, ramp: {max_increase: 0.5, period: 500ms}}
      - {unit: usd, per: day, capacity: 1, reset_at: "07:00", scope: api_key}
      - {unit: requests, per: minute, capacity: 10, scope: app, scope_key: web/prod}
workload_classes:
  batch: {max_wait: 1m, max_depth: 10, overload: fallback, fallback_model: n, weight: 1}
`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := catalog.Parse(data)
		if err != nil {
			return
		}
		v, err := New(routing.Sources{}).Prepare(data)
		if err != nil {
			t.Fatalf("catalog.Parse accepts what the gate refuses: %v", err)
		}
		if _, err := broker.New(v.Broker, broker.Options{}); err != nil {
			t.Fatalf("the broker refuses what the gate accepts: %v", err)
		}
		if _, err := broker.FromCatalog(c); err != nil {
			t.Fatalf("catalog.Parse accepts what the broker refuses: %v", err)
		}
		cur := NewCurrent(v)
		routing.New(nil, routing.Options{Catalog: cur.Routing}).ListModels()
		_, idx := cur.PinAuth(t.Context())
		_, _ = idx.Resolve(nil)
	})
}

// TestCatalogGate: a catalog one part refuses is refused whole, before
// anything derived from it is kept, and a valid one yields every view.
func TestPrepare(t *testing.T) {
	const ok = `models:
  - id: m
    endpoints: [{provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}]
tenants:
  - id: t
    api_keys_sha256: [` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `]
    limits: [{unit: requests, per: day, capacity: 100, ramp: {max_increase: 0.5, period: 1m}}]
`
	g := New(routing.Sources{})
	v, err := g.Prepare([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	v.At(7)
	if v.Revision != 7 || v.Keys.Version != 7 || len(v.Keys.KeyPrefixes) != 1 || v.Keys.KeyPrefixes[0] != 0x0123456789abcdef {
		t.Fatalf("views %+v, key set %v", v, v.Keys)
	}
	if len(v.Broker.Buckets) != 1 || v.Broker.Buckets[0].Ramp == nil {
		t.Fatalf("broker config %+v", v.Broker)
	}
	_, err = g.Prepare([]byte(strings.Replace(ok, "period: 1m", "period: 500ms", 1)))
	if err == nil || !strings.Contains(err.Error(), "line 7: tenants[0].limits[0].ramp.period") {
		t.Fatalf("err = %v, want the ramp period's line", err)
	}
}

// TestPin: the first Pin of a call reads the views applied and its context
// carries them; a later Pin of that context returns the same views though
// another catalog was applied in between, and an unpinned context reads
// the new one.
func TestPin(t *testing.T) {
	const yaml = "models:\n  - id: m\n    endpoints: [{provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}]\n"
	g := New(routing.Sources{})
	a, err := g.Prepare([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.Prepare([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cur := NewCurrent(a)
	if FromContext(t.Context()) != nil {
		t.Fatal("a context no one pinned carries views")
	}
	ctx, v := cur.Pin(t.Context())
	if v != a || FromContext(ctx) != a {
		t.Fatalf("pinned %p, context carries %p, want A %p", v, FromContext(ctx), a)
	}
	var applied *Views
	cur.Apply(b, func(v *Views) {
		applied = v
		if cur.Load() != a {
			t.Error("the views were stored before the apply ran")
		}
	})
	if applied != b || cur.Load() != b {
		t.Fatal("Apply did not apply B")
	}
	if _, idx := cur.PinAuth(ctx); idx != a.Auth {
		t.Fatal("a pinned call read the auth index of the catalog applied after it was pinned")
	}
	if _, v := cur.Pin(t.Context()); v != b {
		t.Fatal("a new call did not read the catalog applied")
	}
	if _, idx := NewCurrent(nil).PinAuth(t.Context()); idx != nil {
		t.Fatal("no catalog applied, yet an auth index")
	}
}
