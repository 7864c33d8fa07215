package server

import (
	"context"

	"github.com/switchboard-ai/switchboard/pkg/billing"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/grant"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

// trust is what the server checks records with.
type trust struct {
	// grants signs each decision's grant; nil issues none (Deps.Grants).
	grants *grant.Signer
}

// grant sets the decision's caps and its grant, for its request id,
// resolved identity and caps. The caps are those of the endpoints the
// answer leaves the caller — the chosen one, its fallbacks and the hedge
// endpoint, as they stand once reserving has picked among them.
func (s *Server) grant(r *routing.Index, req *switchboardv1.DecideRequest, resp *switchboardv1.DecideResponse) {
	g := s.grants
	if g == nil {
		return
	}
	resp.Caps = decisionCaps(r, req, resp)
	resp.Grant = g.Issue(resp.GetRequestId(), resp.GetIdentity().GetTenantId(), resp.GetIdentity().GetApiKeyId(), resp.GetCaps())
}

// decisionCaps are the caps (grant.NewCaps) of resp's endpoints, each
// once, billed under resp's max_price and req's max_tokens.
func decisionCaps(r *routing.Index, req *switchboardv1.DecideRequest, resp *switchboardv1.DecideResponse) *switchboardv1.DecisionCaps {
	all := make([]*switchboardv1.Endpoint, 0, 2+len(resp.GetFallbacks()))
	all = append(append(append(all, resp.GetEndpoint()), resp.GetFallbacks()...), resp.GetHedge().GetEndpoint())
	eps := make([]grant.Endpoint, 0, len(all))
	seen := make(map[string]bool, len(all))
	for _, ep := range all {
		if ep == nil || seen[ep.GetId()] {
			continue
		}
		seen[ep.GetId()] = true
		ge := grant.Endpoint{ContextLength: ep.GetContextLength(), Price: pricing.Price{
			Input: ep.GetPrice().GetInput(), CachedInput: ep.GetPrice().GetCachedInput(), Output: ep.GetPrice().GetOutput(),
			CacheWrite: ep.GetPrice().GetCacheWrite(), CacheWrite1h: ep.GetPrice().GetCacheWrite_1H()}}
		if ctx, out, ok := r.Limits(ep.GetId()); ok {
			ge.ContextLength, ge.MaxOutputTokens = max(ge.ContextLength, ctx), out
		}
		eps = append(eps, ge)
	}
	var mp billing.MaxPrice
	if p := resp.GetMaxPrice(); p != nil {
		mp = billing.MaxPrice{Prompt: p.Prompt, Completion: p.Completion}
	}
	return grant.NewCaps(eps, mp, req.GetTokens().GetMaxOutputTokens(), req.GetTokens().GetInputTokens())
}

// allow is the caller's authorisation for operations on existing
// reservations: which tenants' reservations it may reconcile or keep (nil:
// every tenant). It is evaluated where the reservation lives, on the
// broker's owner, to which a replica forwards the caller's identity
// (ReplicaService, see replica.go); a reservation of a tenant it refuses is
// PERMISSION_DENIED and left as it was.
func (s *Server) allow(ctx context.Context) broker.Allow {
	return auth.Reservations(ctx)
}
