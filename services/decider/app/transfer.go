package app

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/switchboard-ai/switchboard/services/decider/internal/transfer"
)

// stateTransfer is what the state transfer at start did.
type stateTransfer struct {
	result atomic.Pointer[transfer.Result] // nil: none taken
	failed atomic.Int64
}

// takeState asks one live replica (the first by id) for what it learned
// from the reports besides the statistics, and applies it, within
// --state-transfer-timeout. Failing, the replica starts empty, as one
// with no peer does: logged and counted, never an error.
func (d *Decider) takeState(ctx context.Context) {
	if d.cfg.StateTransferTimeout < 0 {
		return
	}
	live, _ := d.peers.Live()
	if len(live) == 0 {
		return
	}
	id := slices.Min(slices.Collect(maps.Keys(live)))
	log := d.logger.With("component", "transfer", "peer", id)
	conn, err := d.adm.PeerConn(live[id])
	if err == nil {
		var res transfer.Result
		res, err = transfer.Fetch(ctx, conn, d.cfg.ID, d.learned, transfer.Limits{Timeout: d.cfg.StateTransferTimeout})
		if err == nil {
			d.transferred.result.Store(&res)
			log.Info("state taken from a live replica", "affinity", res.Affinity, "conversations", res.Conversations,
				"cooldowns", res.Cooldowns, "outcomes", res.Outcomes, "refused", res.Refused, "bytes", res.Bytes)
			return
		}
	}
	d.transferred.failed.Add(1)
	log.Warn("no state taken from a live replica: starting empty, learning from the reports", "err", err)
}

// StateTransferred returns what the state transfer at start took (ok
// false when none was taken) and how many transfers failed.
func (d *Decider) StateTransferred() (res transfer.Result, ok bool, failed int64) {
	if r := d.transferred.result.Load(); r != nil {
		res, ok = *r, true
	}
	return res, ok, d.transferred.failed.Load()
}
