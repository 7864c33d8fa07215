package activity

import (
	"context"
	"log/slog"
	"sync/atomic"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/grant"
)

// Hedges settles a cancelled hedge leg with its real cost
// (admission.Settler does, where the hedge budget is held).
type Hedges interface {
	Settle(ctx context.Context, requestID string, loserUSD float64)
}

// Sink takes the edges' activity records (report.ActivitySink): it stores
// finished requests and settles the hedge budget with the real cost of each
// cancelled hedge leg. Only records whose grant matches a decision the
// deciders made for their request, tenant, key and caps, and whose bill is
// within those caps, are taken; the others (forged, from an edge that does
// not copy grants, or billing more than the decision allowed) are dropped,
// counted and logged.
type Sink struct {
	store    *Store
	grants   *grant.Signer
	hedges   Hedges
	logger   *slog.Logger
	forged   atomic.Int64
	overCaps atomic.Int64
}

// NewSink returns a sink that checks records with grants, settles their
// hedges with hedges and stores them in store. All are required.
func NewSink(store *Store, grants *grant.Signer, hedges Hedges, logger *slog.Logger) *Sink {
	return &Sink{store: store, grants: grants, hedges: hedges, logger: logger}
}

// Add takes one batch of edge's records.
func (s *Sink) Add(ctx context.Context, edge *switchboardv1.EdgeHello, records []*switchboardv1.ActivityRecord) error {
	records, refused := s.grants.Filter(records)
	if n := refused.Ungranted; n > 0 {
		s.forged.Add(int64(n))
		s.logger.Warn("activity records without a valid grant dropped", "edge", edge.GetEdgeId(), "records", n)
	}
	if n := refused.OverCaps; n > 0 {
		s.overCaps.Add(int64(n))
		s.logger.Warn("activity records beyond their decision's caps dropped", "edge", edge.GetEdgeId(), "records", n, "first", refused.Why)
	}
	// Settle before the records become readable, so whoever reads a hedged
	// call's record sees the budget settled too; a batch that fails to store
	// is sent again and settling twice changes nothing.
	for _, r := range records {
		if h := r.GetHedge(); h != nil {
			s.hedges.Settle(ctx, r.GetId(), h.GetLoserCostUsd())
		}
	}
	return s.store.Add(records)
}

// Rejected returns how many records were dropped because their grant did
// not match their request, tenant and key (or was missing).
func (s *Sink) Rejected() int64 { return s.forged.Load() }

// OverCaps returns how many records were dropped because, with a valid
// grant, their tokens or costs exceeded the caps of the decision it names.
func (s *Sink) OverCaps() int64 { return s.overCaps.Load() }
