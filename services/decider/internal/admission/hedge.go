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
	var resp *switchboardv1.AcquireHedgeResponse
	err := p.onOwner(ctx, func(ctx context.Context, c OwnerClient) (err error) {
		resp, err = c.AcquireHedge(ctx, req)
		return err
	}, func() {
		ok, left, reset := p.Budget.Acquire(req.GetRequestId(), req.GetEstimatedCostUsd())
		resp = &switchboardv1.AcquireHedgeResponse{Granted: ok, RemainingUsd: left, ResetTime: timestamppb.New(reset)}
	})
	return resp, err
}

// SettleHedge settles hedges where the budget is held, like AcquireHedge.
func (p Policy) SettleHedge(ctx context.Context, req *switchboardv1.SettleHedgeRequest) (*switchboardv1.SettleHedgeResponse, error) {
	var resp *switchboardv1.SettleHedgeResponse
	err := p.onOwner(ctx, func(ctx context.Context, c OwnerClient) (err error) {
		resp, err = c.SettleHedge(ctx, req)
		return err
	}, func() {
		for _, st := range req.GetSettlements() {
			p.Budget.Settle(st.GetRequestId(), st.GetLoserCostUsd())
		}
		resp = &switchboardv1.SettleHedgeResponse{}
	})
	return resp, err
}

// onOwner runs forward against the owner of the hedge budget, or here on
// this replica when it owns it (within the admission gate, so a handover
// saves what here did) or when there is no broker election.
func (p Policy) onOwner(ctx context.Context, forward func(context.Context, OwnerClient) error, here func()) error {
	if p.Admission == nil {
		here()
		return nil
	}
	_, err := p.Admission.onOwnerOrHere(ctx, forward, func(context.Context) error {
		here()
		return nil
	})
	return err
}
