package server_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/grant"
	"github.com/switchboard-ai/switchboard/services/decider/internal/server"
)

// TestDecideIssuesAGrant: with a signer, every decision carries the grant
// of its request id and resolved identity; without one, none.
func TestDecideIssuesAGrant(t *testing.T) {
	f := start(t)
	decide := func() *switchboardv1.DecideResponse {
		d, err := f.client.Decide(t.Context(), &switchboardv1.DecideRequest{Identity: key(acmeKey), Model: model,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: 100, MaxOutputTokens: 10}})
		require.NoError(t, err)
		return d
	}
	require.Empty(t, decide().GetGrant())

	g, err := grant.New(bytes.Repeat([]byte{7}, 32))
	require.NoError(t, err)
	f = start(t, func(d *server.Deps) { d.Grants = g })
	d := decide()
	require.Len(t, d.GetGrant(), grant.Size)
	// The caps of both endpoints (neither has a context_length: the
	// unknown window) billed under max_tokens 10: beta's, dearer, bill
	// 2^21 input tokens at $0.3/M and 10 output at $1/M; the two calls
	// together are 2^21 input and output tokens at alpha's and beta's prices.
	require.Len(t, append(d.GetFallbacks(), d.GetEndpoint()), 2)
	c := d.GetCaps()
	require.Equal(t, int64(grant.UnknownContextTokens), c.GetMaxInputTokens())
	require.Equal(t, int64(grant.UnknownContextTokens), c.GetMaxOutputTokens())
	require.InDelta(t, (grant.UnknownContextTokens*0.3+10*1.0)/1e6, c.GetMaxCostUsd(), 1e-9)
	require.InDelta(t, grant.UnknownContextTokens*(0.2+0.8+0.3+1.0)/1e6, c.GetMaxAttemptsCostUsd(), 1e-9)
	require.True(t, g.Verify(d.GetGrant(), d.GetRequestId(), "acme", d.GetIdentity().GetApiKeyId(), d.GetCaps()))
	require.NotEmpty(t, d.GetIdentity().GetApiKeyId())
}

// TestTenantCheckOnReservations: a service caller limited to another
// tenant is refused a reservation with PERMISSION_DENIED and the
// reservation stays open.
func TestTenantCheckOnReservations(t *testing.T) {
	f := start(t)
	d, err := f.client.Decide(t.Context(), &switchboardv1.DecideRequest{Identity: key(acmeKey), Model: model, Reserve: true,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 100, MaxOutputTokens: 10}})
	require.NoError(t, err)
	id := d.GetReservation().GetReservationId()
	f.caller.Store(&auth.Principal{ID: "globex-svc", Role: catalog.RoleService, Tenants: []string{"globex"}})
	_, err = f.client.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: id})
	requireCode(t, codes.PermissionDenied, err, "another tenant's reservation")
	_, err = f.client.KeepReservations(t.Context(), &switchboardv1.KeepReservationsRequest{ReservationIds: []string{id}})
	requireCode(t, codes.PermissionDenied, err, "another tenant's reservation")

	f.caller.Store(&auth.Principal{ID: "acme-svc", Role: catalog.RoleService, Tenants: []string{"acme"}})
	_, err = f.client.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: id})
	require.NoError(t, err, "still open, and its own tenant's caller closes it")
}
