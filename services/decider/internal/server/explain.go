package server

import (
	"context"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// Explain implements [switchboardv1.OperatorServiceServer.Explain]: Decide
// for a hypothetical request, as a dry run (no exploration, nothing
// recorded, no session moved, nothing reserved, no grant), with every
// candidate's figures.
func (s *Server) Explain(ctx context.Context, req *switchboardv1.ExplainRequest) (*switchboardv1.ExplainResponse, error) {
	dreq := &switchboardv1.DecideRequest{
		RequestId: newID(), Identity: req.GetIdentity(), Model: req.GetModel(), Tokens: req.GetTokens(), Stream: req.GetStream(),
		Provider: req.GetProvider(), Parameters: req.GetParameters(), Region: req.GetRegion(), SessionId: req.GetSessionId(),
		Explain: true, DryRun: true,
	}
	if err := invalid(validate.Decide(dreq)); err != nil {
		return nil, err
	}
	v := s.views(ctx)
	id, err := v.Auth.Identity(ctx, switchboardv1.OperatorService_Explain_FullMethodName, req.GetIdentity())
	if err != nil {
		return nil, err
	}
	resp, err := s.router.DecideIn(v.Routing, dreq, id)
	if err != nil {
		return nil, toStatus(err)
	}
	return &switchboardv1.ExplainResponse{
		Model: resp.GetModel(), Endpoint: resp.GetEndpoint(), Fallbacks: resp.GetFallbacks(), Decision: resp.GetDecision(),
		Hedge: resp.GetHedge(), Identity: resp.GetIdentity(), MaxPrice: resp.GetMaxPrice(),
	}, nil
}
