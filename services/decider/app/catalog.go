package app

import (
	"context"
	"fmt"
	"os"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/gate"
)

// loadCatalog passes the --catalog file through the gate and only then
// stores it, or passes the stored one; either way the catalog is parsed
// once.
func (d *Decider) loadCatalog(ctx context.Context) (*gate.Views, error) {
	if d.cfg.Catalog == "" {
		data, rev, err := d.store.GetCatalog(ctx)
		if err != nil {
			return nil, err
		}
		v, err := d.gate.Prepare(data)
		if err != nil {
			return nil, fmt.Errorf("stored catalog: %w", err)
		}
		return v.At(rev), nil
	}
	data, err := os.ReadFile(d.cfg.Catalog)
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	v, err := d.gate.Prepare(data)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", d.cfg.Catalog, err)
	}
	rev, err := d.store.PutCatalog(ctx, data)
	if err != nil {
		return nil, err
	}
	return v.At(rev), nil
}

// onCatalog applies a catalog another replica or an operator stored, once
// the gate took it whole: everything that can refuse it is checked first
// (gate.Gate.Prepare, the broker's limits included), then the broker's
// limits and the views of routing, auth and the key set are applied in one
// step (gate.Current.Apply), so no call pins the old views while the new
// limits run. A catalog the gate refuses is counted and logged, and the
// current one kept in every part.
func (d *Decider) onCatalog(data []byte, rev int64) {
	v, err := d.gate.Prepare(data)
	if err != nil {
		d.refused.Add(1)
		d.logger.Error("catalog refused; keeping the current one in every part", "revision", rev, "err", err)
		return
	}
	d.catalog.Apply(v.At(rev), func(v *gate.Views) { d.broker.Apply(v.Limits) })
	d.hub.KeysChanged()
	d.hub.Broadcast(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Config{Config: &switchboardv1.ConfigCommand{CatalogRevision: rev}}})
	d.logger.Info("catalog updated", "revision", rev, "models", len(v.Catalog.Models))
}

// CatalogsRefused returns how many catalog changes from etcd the gate
// refused, each keeping the catalog applied before it.
func (d *Decider) CatalogsRefused() int64 { return d.refused.Load() }

// KeySetVersion returns the version of the key set edges are told: the
// etcd revision of the catalog applied.
func (d *Decider) KeySetVersion() uint64 { return d.catalog.Keys().Version }
