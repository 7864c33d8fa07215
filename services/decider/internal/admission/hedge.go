package admission

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// AcquireHedge decides a hedge on the replica that owns the broker, which
// holds the hedge budget, so the decision is atomic across every edge and
// replica; another replica forwards it there. While the broker is starting
// the budget here decides.
func (p Policy) AcquireHedge(ctx context.Context, req *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error) {
	if a := p.Admission; a != nil {
		var resp *switchboardv1.AcquireHedgeResponse
		local, err := a.OnOwner(ctx, func(ctx context.Context, c OwnerClient) (err error) {
			resp, err = c.AcquireHedge(ctx, req)
			return err
		})
		if !local {
			return resp, err
		}
	}
	ok, left, reset := p.Budget.Acquire(req.GetRequestId(), req.GetEstimatedCostUsd())
	return &switchboardv1.AcquireHedgeResponse{Granted: ok, RemainingUsd: left, ResetTime: timestamppb.New(reset)}, nil
}

// SettleHedge settles hedges where the budget is held, like AcquireHedge.
func (p Policy) SettleHedge(ctx context.Context, req *switchboardv1.SettleHedgeRequest) (*switchboardv1.SettleHedgeResponse, error) {
	if a := p.Admission; a != nil {
		var resp *switchboardv1.SettleHedgeResponse
		local, err := a.OnOwner(ctx, func(ctx context.Context, c OwnerClient) (err error) {
			resp, err = c.SettleHedge(ctx, req)
			return err
		})
		if !local {
			return resp, err
		}
	}
	for _, st := range req.GetSettlements() {
		p.Budget.Settle(st.GetRequestId(), st.GetLoserCostUsd())
	}
	return &switchboardv1.SettleHedgeResponse{}, nil
}
