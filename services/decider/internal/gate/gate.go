// Package gate is the decider's one catalog gate: it parses a catalog and
// derives and checks every view the decider keeps of it before any is
// stored or applied, so a catalog is taken whole or refused whole, at
// start-up and on a change from etcd alike; and Current publishes the
// views of the catalog applied, together, with one atomic store.
package gate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

// Views is one catalog with every view the decider derives from it: the
// routing index, the auth index, the rate-limit broker's configuration
// and the key set edges are told. The broker's configuration and the key
// set can refuse a catalog; the routing and auth indexes take whatever
// catalog.Parse accepts (FuzzCatalogParts holds every part to that).
// Immutable once prepared and versioned (At).
type Views struct {
	// Catalog is the parsed, validated catalog.
	Catalog *catalog.Catalog
	// Source is the catalog's YAML as stored, credential digests included:
	// show it only through catalog.Elide.
	Source []byte
	// Revision is the etcd revision the catalog was stored at.
	Revision int64
	// Broker is the rate-limit broker's configuration: the one broker.New
	// takes.
	Broker broker.Config
	// Limits is Broker checked: the one Broker.Apply takes on a catalog
	// change, which then cannot fail.
	Limits *broker.Plan
	// Keys is the key set edges are told, versioned by Revision.
	Keys *switchboardv1.KeySet
	// Routing is the routing index routing.Router reads.
	Routing *routing.Index
	// Auth is the index of callers, tenants and API keys auth.Authenticator reads.
	Auth *auth.Index
}

// Gate prepares catalogs for one decider: its routing indexes are bound to
// that decider's statistics.
type Gate struct {
	src routing.Sources
}

// New returns a gate whose routing indexes are bound to src.
func New(src routing.Sources) *Gate { return &Gate{src: src} }

// Prepare parses data and derives and checks every view. Parse errors name
// their line; a view's refusal refuses the catalog.
func (g *Gate) Prepare(data []byte) (*Views, error) {
	c, err := catalog.Parse(data)
	if err != nil {
		return nil, err
	}
	bcfg, err := broker.FromCatalog(c)
	if err != nil {
		return nil, fmt.Errorf("catalog limits: %w", err)
	}
	limits, err := broker.Prepare(bcfg)
	if err != nil {
		return nil, fmt.Errorf("catalog limits: %w", err)
	}
	keys, err := KeySet(c)
	if err != nil {
		return nil, err
	}
	return &Views{Catalog: c, Source: data, Broker: bcfg, Limits: limits, Keys: keys, Routing: routing.NewIndex(c, g.src), Auth: auth.NewIndex(c)}, nil
}

// At sets the etcd revision the catalog was stored at, which versions the
// key set, and returns v.
func (v *Views) At(rev int64) *Views {
	v.Revision = rev
	v.Keys.Version = uint64(max(rev, 0))
	return v
}

// KeySet is what edges are told of the catalog's API keys: the first 64
// bits of each key's SHA-256, so they refuse an unknown key before reading
// its request without learning enough to present a valid one. Its version
// is left to At.
func KeySet(c *catalog.Catalog) (*switchboardv1.KeySet, error) {
	ks := &switchboardv1.KeySet{}
	for _, t := range c.Tenants {
		for _, k := range t.APIKeysSHA256 {
			p, err := catalog.KeyPrefix(k)
			if err != nil {
				return nil, fmt.Errorf("tenant %s: key %s: %w", t.ID, catalog.KeyID(k), err)
			}
			ks.KeyPrefixes = append(ks.KeyPrefixes, p)
		}
	}
	return ks, nil
}

// Current is the catalog a decider applies: one Views, replaced whole by
// one atomic store, from which routing (Routing), auth (PinAuth) and the
// report hub (Keys) each read. No reader can see the routes of one catalog
// with the callers or keys of another, as it could when each part kept its
// own pointer, stored one after the other; and one RPC reads one Views
// throughout (Pin).
//
// The rate-limit broker keeps its limits outside the views (its buckets
// carry state), so Apply changes them and stores the views in one step,
// under mu, which Pin reads through: no call pins the old views while the
// new limits already run. A call pinned before the step finishes on the
// views it pinned, with the limits in force when it reaches the broker.
type Current struct {
	mu sync.RWMutex // held by Apply; Pin reads under it
	v  atomic.Pointer[Views]
}

// NewCurrent returns the holder of the catalog applied, v.
func NewCurrent(v *Views) *Current {
	c := &Current{}
	c.v.Store(v)
	return c
}

// Load returns the views of the catalog applied.
func (c *Current) Load() *Views { return c.v.Load() }

// Apply applies v in one step: apply, which must not fail (it applies what
// v checked: the broker's Limits), then the store of v; every part reads v
// from the next call on, and calls in flight finish on the views they
// pinned.
func (c *Current) Apply(v *Views, apply func(*Views)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	apply(v)
	c.v.Store(v)
}

// Routing returns the routing index of the catalog applied
// (routing.Options.Catalog).
func (c *Current) Routing() *routing.Index { return c.v.Load().Routing }

type viewsKey struct{}

// FromContext returns the views a call pinned (Current.Pin); nil when ctx
// carries none.
func FromContext(ctx context.Context) *Views {
	v, _ := ctx.Value(viewsKey{}).(*Views)
	return v
}

// Pin returns the views ctx carries, when a part of the same call pinned
// them already, else the views of the catalog applied now, with ctx
// carrying them: each part of one call that reads the catalog through Pin
// (the authentication interceptor, then the handler) reads the same one,
// so a catalog applied while the call runs cannot give it its caller or
// identity from one catalog and its route from the next.
func (c *Current) Pin(ctx context.Context) (context.Context, *Views) {
	if v := FromContext(ctx); v != nil {
		return ctx, v
	}
	c.mu.RLock()
	v := c.v.Load()
	c.mu.RUnlock()
	if v == nil {
		return ctx, nil
	}
	return context.WithValue(ctx, viewsKey{}, v), v
}

// PinAuth is Pin for auth.New: the auth index of the views pinned.
func (c *Current) PinAuth(ctx context.Context) (context.Context, *auth.Index) {
	ctx, v := c.Pin(ctx)
	if v == nil {
		return ctx, nil
	}
	return ctx, v.Auth
}

// Keys returns the key set of the catalog applied (report.Options.Keys).
func (c *Current) Keys() *switchboardv1.KeySet { return c.v.Load().Keys }
