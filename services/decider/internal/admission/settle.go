package admission

import (
	"context"
	"log/slog"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
)

// Settler settles cancelled hedge legs with their real cost where the hedge
// budget is held: at once when this replica holds it, else queued for the
// replica that does and sent there by Run, never waiting for it. A
// settlement that cannot be delivered leaves the estimate charged, which
// errs on the side of spending less; settling twice changes nothing.
type Settler struct {
	budget *hedge.Budget
	logger *slog.Logger
	adm    *Admission // nil: the budget is this replica's alone
	q      chan settlement
}

// settlerQueue bounds the settlements waiting for the budget's owner.
const settlerQueue = 4096

// NewSettler returns a settler of budget, the hedge budget as this replica
// holds it, held where adm's broker is owned (nil: on this replica, every
// settlement queued for Run).
func NewSettler(budget *hedge.Budget, adm *Admission, logger *slog.Logger) *Settler {
	return &Settler{budget: budget, adm: adm, logger: logger, q: make(chan settlement, settlerQueue)}
}

// settlement is a hedge settlement waiting to be sent to the budget's
// owner, with the caller (the edge whose activity record it comes from) it
// is sent on behalf of: the owner refuses a replica's call that names none.
type settlement struct {
	caller *auth.Principal
	st     *switchboardv1.HedgeSettlement
}

// Settle settles request id's hedge at loserUSD, on behalf of the caller in
// ctx: in memory when this replica holds the budget, else queued. A hedge
// granted but never started settles at 0; the budget ignores unknown ids.
func (s *Settler) Settle(ctx context.Context, id string, loserUSD float64) {
	if s.adm != nil && s.adm.Owner() {
		s.budget.Settle(id, loserUSD)
		return
	}
	select {
	case s.q <- settlement{caller: auth.FromContext(ctx), st: &switchboardv1.HedgeSettlement{RequestId: id, LoserCostUsd: loserUSD}}:
	default:
		s.logger.Warn("hedge settlements queue full; the estimate stays charged", "request_id", id)
	}
}

// Run sends queued settlements, in batches (one per caller), to the
// budget's owner (itself when this replica owns it) through the admission
// policy, retrying a few times, until ctx ends.
func (s *Settler) Run(ctx context.Context) {
	for {
		var queued []settlement
		select {
		case <-ctx.Done():
			return
		case st := <-s.q:
			queued = append(queued, st)
		}
	more:
		for len(queued) < 500 {
			select {
			case st := <-s.q:
				queued = append(queued, st)
			default:
				break more
			}
		}
		for _, b := range settlementBatches(queued) {
			if !s.send(ctx, b.caller, b.settlements) {
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

// send settles one caller's settlements where the budget is held, retrying
// a few times; false when ctx ended.
func (s *Settler) send(ctx context.Context, caller *auth.Principal, batch []*switchboardv1.HedgeSettlement) bool {
	p := Policy{Admission: s.adm, Budget: s.budget}
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if caller != nil {
			cctx = auth.NewContext(cctx, caller)
		}
		_, err := p.SettleHedge(cctx, &switchboardv1.SettleHedgeRequest{Settlements: batch})
		cancel()
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			return true
		}
		if attempt == 5 {
			s.logger.Warn("hedge settlements not delivered; their estimates stay charged", "settlements", len(batch), "err", err)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}
