package app

import (
	"context"
	"errors"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/server"
)

// onActivity stores finished requests and settles the hedge budget with the
// real cost of each cancelled hedge leg: at once when this replica holds the
// budget, else queued for the replica that does, never waiting for it. Only
// records whose grant matches a decision the deciders made for their
// request, tenant, key and caps, and whose bill is within those caps, are
// taken; the others (forged, from an edge that does not copy grants, or
// billing more than the decision allowed) are dropped, counted and logged.
func (d *Decider) onActivity(ctx context.Context, edge *switchboardv1.EdgeHello, records []*switchboardv1.ActivityRecord) error {
	act := d.actLog.Load()
	if act == nil {
		return errors.New("the activity log is not open yet")
	}
	records, refused := d.grants.Load().Filter(records)
	if n := refused.Ungranted; n > 0 {
		d.forged.Add(int64(n))
		d.logger.Warn("activity records without a valid grant dropped", "edge", edge.GetEdgeId(), "records", n)
	}
	if n := refused.OverCaps; n > 0 {
		d.overCaps.Add(int64(n))
		d.logger.Warn("activity records beyond their decision's caps dropped", "edge", edge.GetEdgeId(), "records", n, "first", refused.Why)
	}
	// Settle before the records become readable, so whoever reads a hedged
	// call's record sees the budget settled too; a batch that fails to store
	// is sent again and settling twice changes nothing.
	for _, r := range records {
		// A hedge granted but never started (the primary answered while the
		// budget was asked) settles at 0; settling ignores unknown ids.
		h := r.GetHedge()
		if h == nil {
			continue
		}
		if adm := d.admP.Load(); adm != nil && adm.Owner() {
			d.budget.Settle(r.GetId(), h.GetLoserCostUsd()) // in memory, at once
			continue
		}
		select {
		case d.settleQ <- settlement{caller: auth.FromContext(ctx), st: &switchboardv1.HedgeSettlement{RequestId: r.GetId(), LoserCostUsd: h.GetLoserCostUsd()}}:
		default:
			d.logger.Warn("hedge settlements queue full; the estimate stays charged", "request_id", r.GetId())
		}
	}
	return act.Add(records)
}

// settlement is a hedge settlement waiting to be sent to the budget's
// owner, with the caller (the edge whose activity record it comes from) it
// is sent on behalf of: the owner refuses a replica's call that names none.
type settlement struct {
	caller *auth.Principal
	st     *switchboardv1.HedgeSettlement
}

// settleHedges sends queued hedge settlements, in batches (one per edge
// caller), to the budget's owner (itself when this replica owns it),
// retrying a few times. A settlement that cannot be delivered leaves the
// estimate charged, which errs on the side of spending less; settling twice
// changes nothing.
func (d *Decider) settleHedges(ctx context.Context, svc *server.Server) {
	for {
		var queued []settlement
		select {
		case <-ctx.Done():
			return
		case st := <-d.settleQ:
			queued = append(queued, st)
		}
	more:
		for len(queued) < 500 {
			select {
			case st := <-d.settleQ:
				queued = append(queued, st)
			default:
				break more
			}
		}
		for _, b := range settlementBatches(queued) {
			if !d.settle(ctx, svc, b.caller, b.settlements) {
				return
			}
		}
	}
}

// settlementBatch is the settlements of one caller.
type settlementBatch struct {
	caller      *auth.Principal
	settlements []*switchboardv1.HedgeSettlement
}

// settlementBatches groups queued settlements by their caller, in order of
// each caller's first.
func settlementBatches(queued []settlement) []settlementBatch {
	var out []settlementBatch
	at := map[*auth.Principal]int{}
	for _, q := range queued {
		i, ok := at[q.caller]
		if !ok {
			i = len(out)
			at[q.caller] = i
			out = append(out, settlementBatch{caller: q.caller})
		}
		out[i].settlements = append(out[i].settlements, q.st)
	}
	return out
}

// settle sends one caller's settlements, retrying a few times; false when
// ctx ended.
func (d *Decider) settle(ctx context.Context, svc *server.Server, caller *auth.Principal, batch []*switchboardv1.HedgeSettlement) bool {
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if caller != nil {
			cctx = auth.NewContext(cctx, caller)
		}
		_, err := svc.SettleHedge(cctx, &switchboardv1.SettleHedgeRequest{Settlements: batch})
		cancel()
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			return true
		}
		if attempt == 5 {
			d.logger.Warn("hedge settlements not delivered; their estimates stay charged", "settlements", len(batch), "err", err)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}
