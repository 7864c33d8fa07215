package admission

import (
	"cmp"
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
)

// The bounds of GetBroker's bucket list.
const (
	// DefaultMaxBuckets is the buckets GetBroker returns when the request
	// names no bound.
	DefaultMaxBuckets = 200
	// MaxBuckets is the most buckets GetBroker returns.
	MaxBuckets = 5000
)

// GetBroker reads the broker's state and the hedge budget where they are
// held: on the broker's owner, to which another replica forwards the call
// like a reservation.
func (p Policy) GetBroker(ctx context.Context, req *switchboardv1.GetBrokerRequest) (*switchboardv1.GetBrokerResponse, error) {
	a := p.Admission
	if a == nil {
		return nil, errStarting
	}
	var resp *switchboardv1.GetBrokerResponse
	local, err := a.OnOwner(ctx, func(ctx context.Context, c OwnerClient) (err error) {
		resp, err = c.GetBroker(ctx, req)
		return err
	})
	if !local {
		return resp, err
	}
	resp = BrokerState(a.o.Broker, p.Budget, a.o.Now(), int(req.GetMaxBuckets()))
	resp.Owner = a.o.Addr
	return resp, nil
}

// GetBroker forwards a GetBroker.
func (o OwnerClient) GetBroker(ctx context.Context, req *switchboardv1.GetBrokerRequest) (*switchboardv1.GetBrokerResponse, error) {
	resp, err := o.c.ForwardGetBroker(ctx, &switchboardv1.ForwardGetBrokerRequest{CallerId: auth.CallerID(ctx), Request: req})
	return resp.GetResponse(), err
}

// BrokerState is b's state and budget's (either may be nil) at now, with
// at most maxBuckets buckets (DefaultMaxBuckets when 0 or less, MaxBuckets
// at most), the fullest first: those with the least available of their
// limit.
func BrokerState(b *broker.Broker, budget *hedge.Budget, now time.Time, maxBuckets int) *switchboardv1.GetBrokerResponse {
	if maxBuckets <= 0 {
		maxBuckets = DefaultMaxBuckets
	}
	maxBuckets = min(maxBuckets, MaxBuckets)
	resp := &switchboardv1.GetBrokerResponse{ReadTime: timestamppb.New(now)}
	if b != nil {
		levels := b.BucketLevels()
		slices.SortFunc(levels, func(x, y broker.BucketLevel) int {
			return cmp.Or(cmp.Compare(free(x), free(y)), cmp.Compare(x.Scope, y.Scope), cmp.Compare(x.Key, y.Key),
				cmp.Compare(x.Unit, y.Unit), cmp.Compare(x.Window, y.Window))
		})
		resp.TotalBuckets = int64(len(levels))
		for _, l := range levels[:min(len(levels), maxBuckets)] {
			bb := &switchboardv1.BrokerBucket{Scope: l.Scope.String(), Key: l.Key, Unit: l.Unit.String(), Rule: l.Rule.String(),
				Learned: l.Source == broker.SourceLearned, Limit: l.Limit, Available: l.Available}
			if l.Window != broker.WindowNone {
				bb.Window = l.Window.String()
			}
			resp.Buckets = append(resp.Buckets, bb)
		}
		resp.OpenReservations = int64(b.Open())
		for _, q := range b.QueueDepths() {
			resp.Queues = append(resp.Queues, &switchboardv1.BrokerQueue{WorkloadClass: switchboardv1.WorkloadClass(q.Class), TenantId: q.Tenant, Depth: int64(q.Depth)})
		}
		qs := b.QueueStats()
		resp.QueuedTotal, resp.AdmittedFromQueue, resp.TimedOutInQueue = int64(qs.Queued), int64(qs.Admitted), int64(qs.Deadline) //nolint:gosec // counts, far below 2^63
	}
	if budget != nil {
		spent, daily, granted, refused := budget.Status()
		resp.HedgeBudget = &switchboardv1.HedgeBudget{DailyUsd: daily, SpentUsd: spent, RemainingUsd: max(daily-spent, 0),
			Granted: granted, Refused: refused, ResetTime: timestamppb.New(budget.ResetTime())}
	}
	return resp
}

// free is the share of a bucket's limit still available: 1 for one without
// a limit.
func free(l broker.BucketLevel) float64 {
	if l.Limit <= 0 {
		return 1
	}
	return l.Available / l.Limit
}
