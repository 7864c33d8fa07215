package app

import (
	"context"
	"time"
)

// restoreStats loads the routing statistics saved in etcd, so a restart
// does not send traffic back to "no data" routing.
func (d *Decider) restoreStats(ctx context.Context) error {
	shards, err := d.store.GetStats(ctx)
	if err != nil {
		return err
	}
	if err := d.stats.Restore(shards); err != nil {
		return err
	}
	d.logger.Info("routing statistics restored", "models", len(shards))
	return nil
}

// maintain refreshes aging statistics every second, expires cool-downs, and
// saves the statistics to etcd every StatsSnapshotInterval — off the request
// path, and only the shards that changed.
func (d *Decider) maintain(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	written := map[string]string{}
	lastSave := time.Now()
	save := func(ctx context.Context) {
		n, err := d.store.PutStats(ctx, d.stats.Snapshot(), written)
		if err != nil {
			d.logger.Warn("saving routing statistics", "err", err)
			return
		}
		if n > 0 {
			d.logger.Debug("routing statistics saved", "shards", n)
		}
	}
	for {
		select {
		case <-ctx.Done():
			// A last save on the way out, so a clean restart loses nothing.
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			save(sctx)
			cancel()
			return
		case <-tick.C:
		}
		d.stats.Refresh()
		d.cool.Expire(d.cfg.Now())
		d.broker.Expire(d.cfg.Now())
		if iv := d.cfg.StatsSnapshotInterval; iv > 0 && time.Since(lastSave) >= iv {
			lastSave = time.Now()
			save(ctx)
		}
	}
}
