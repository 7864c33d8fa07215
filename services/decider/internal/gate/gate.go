// Package gate is the decider's one catalog gate: it parses a catalog and
// derives and checks every view the decider keeps of it before any is
// stored or applied, so a catalog is taken whole or refused whole, at
// start-up and on a change from etcd alike.
package gate

import (
	"fmt"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

// Views is one catalog with the views derived from it that can refuse it:
// the rate-limit broker's configuration and the key set edges are told.
// The routing and auth indexes are built from Catalog and take whatever
// catalog.Parse accepts (FuzzCatalogParts holds every part to that).
// Immutable once prepared and versioned (At).
type Views struct {
	// Catalog is the parsed, validated catalog.
	Catalog *catalog.Catalog
	// Revision is the etcd revision the catalog was stored at.
	Revision int64
	// Broker is the rate-limit broker's configuration: one broker.New and
	// Broker.Reconfigure take.
	Broker broker.Config
	// Keys is the key set edges are told, versioned by Revision.
	Keys *switchboardv1.KeySet
}

// Prepare parses data and derives and checks every view. Parse errors name
// their line; a view's refusal refuses the catalog.
func Prepare(data []byte) (*Views, error) {
	c, err := catalog.Parse(data)
	if err != nil {
		return nil, err
	}
	bcfg, err := broker.FromCatalog(c)
	if err != nil {
		return nil, fmt.Errorf("catalog limits: %w", err)
	}
	keys, err := KeySet(c)
	if err != nil {
		return nil, err
	}
	return &Views{Catalog: c, Broker: bcfg, Keys: keys}, nil
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
