package server

import (
	"context"
	"sync/atomic"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/grant"
)

// trust is what the server checks callers and their records with.
type trust struct {
	tenants atomic.Pointer[TenantCheck]
	grants  atomic.Pointer[grant.Signer]
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

// TenantCheck returns the authorisation of the caller of ctx for operations
// on existing reservations: which tenants' reservations it may reconcile or
// keep. A nil result allows every tenant.
type TenantCheck func(ctx context.Context) broker.Allow

// SetTenantCheck installs how Reconcile, KeepReservations and the
// reconciliations and heartbeats of a Report stream find the caller's
// tenants. The check is evaluated where the reservation lives, on the
// broker's owner: a replica that forwards passes the call on unchecked. A
// reservation of a tenant the check refuses is PERMISSION_DENIED and left
// as it was. Without a check every caller may act on every reservation.
func (s *Server) SetTenantCheck(check TenantCheck) {
	if check == nil {
		s.tenants.Store(nil)
		return
	}
	s.tenants.Store(&check)
}

// allow is the caller's authorisation for reservation operations.
func (s *Server) allow(ctx context.Context) broker.Allow {
	if c := s.tenants.Load(); c != nil {
		return (*c)(ctx)
	}
	return nil
}
