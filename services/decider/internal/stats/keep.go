package stats

import (
	"context"
	"log/slog"
	"time"
)

// Saver keeps the statistics' snapshot shards (store.Store does, in etcd).
type Saver interface {
	// PutStats saves the shards that differ from written, updates written
	// and returns how many it saved.
	PutStats(ctx context.Context, shards map[string][]byte, written map[string]string) (int, error)
	// GetStats returns the shards saved.
	GetStats(ctx context.Context) (map[string][]byte, error)
}

// Load restores the statistics saved in saver, so a restart does not send
// traffic back to "no data" routing, and returns how many models it holds.
func (s *Store) Load(ctx context.Context, saver Saver) (int, error) {
	shards, err := saver.GetStats(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.Restore(shards); err != nil {
		return 0, err
	}
	return len(shards), nil
}

// KeepOptions wire Keep.
type KeepOptions struct {
	// Saver is where the statistics are saved. (Required)
	Saver Saver
	// Every is how often they are saved (only the shards that changed).
	// (Optional) 0 saves only on the way out.
	Every time.Duration
	// Expire is the upkeep of other components that runs with the
	// statistics' refresh, every second, at the time Now says (the
	// decider's cool-downs and expired reservations). (Optional)
	Expire []func(now time.Time)
	// Now is the clock Expire is given. (Optional) Defaults to time.Now.
	Now func() time.Time
	// Logger logs failed saves. (Required)
	Logger *slog.Logger
}

// Keep refreshes aging statistics every second, runs o.Expire, and saves
// the statistics every o.Every, off the request path, until ctx ends; then
// it saves once more, so a clean restart loses nothing.
func (s *Store) Keep(ctx context.Context, o KeepOptions) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	written := map[string]string{}
	lastSave := time.Now()
	save := func(ctx context.Context) {
		n, err := o.Saver.PutStats(ctx, s.Snapshot(), written)
		if err != nil {
			o.Logger.Warn("saving routing statistics", "err", err)
			return
		}
		if n > 0 {
			o.Logger.Debug("routing statistics saved", "shards", n)
		}
	}
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			save(sctx)
			cancel()
			return
		case <-tick.C:
		}
		s.Refresh()
		for _, expire := range o.Expire {
			expire(now())
		}
		if iv := o.Every; iv > 0 && time.Since(lastSave) >= iv {
			lastSave = time.Now()
			save(ctx)
		}
	}
}
