package server

import (
	"context"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/grant"
)

// trust is what the server checks records with.
type trust struct {
	grants atomic.Pointer[grant.Signer]
}

// SetGrants makes Decide issue a grant with each decision, which the edge
// copies into the request's activity record so the record can be checked
// against the decision. Without it Decide issues none.
func (s *Server) SetGrants(g *grant.Signer) { s.grants.Store(g) }

// grant sets the decision's grant, for its request id and resolved identity.
func (s *Server) grant(resp *switchboardv1.DecideResponse) {
	if g := s.grants.Load(); g != nil {
		resp.Grant = g.Issue(resp.GetRequestId(), resp.GetIdentity().GetTenantId(), resp.GetIdentity().GetApiKeyId())
	}
}

// withKeyHash is the resolved identity a reservation is asked with, with
// the key hash the caller sent (if any): the broker reads only the
// resolved fields, but a replica forwards the request to the broker's
// owner, which checks it by the caller's own rules again, and an edge acts
// only for an identity carrying api_key_sha256. resolved itself, which
// Decide answers with, is left as it was.
func withKeyHash(resolved, asked *switchboardv1.Identity) *switchboardv1.Identity {
	h := asked.GetApiKeySha256()
	if h == "" || resolved == nil {
		return resolved
	}
	id := proto.CloneOf(resolved)
	id.ApiKeySha256 = h
	return id
}

// allow is the caller's authorisation for operations on existing
// reservations: which tenants' reservations it may reconcile or keep (nil:
// every tenant). It is evaluated where the reservation lives, on the
// broker's owner, to which a replica forwards the caller's identity (see
// auth.ForwardInterceptor); a reservation of a tenant it refuses is
// PERMISSION_DENIED and left as it was.
func (s *Server) allow(ctx context.Context) broker.Allow {
	return auth.Reservations(ctx)
}
