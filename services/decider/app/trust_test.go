package app

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

const (
	victimKey   = "sk-victim-key"
	attackerKey = "sk-attacker-key"

	// Service callers of each tenant.
	acmeServiceToken    = "acme-service-token"
	malloryServiceToken = "mallory-service-token"
)

// writeTwoTenants writes a catalog with a victim tenant (acme) and an
// attacker tenant (mallory).
func writeTwoTenants(t *testing.T, dir string) string {
	t.Helper()
	y := `
models:
  - id: vendor/model
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.2, output: 0.8}}
tenants:
  - {id: acme, api_keys_sha256: [` + catalog.HashKey(victimKey) + `]}
  - {id: mallory, api_keys_sha256: [` + catalog.HashKey(attackerKey) + `]}
` + testCallers() +
		"  - {id: acme-svc, role: service, tenants: [acme], tokens_sha256: [" + catalog.HashKey(acmeServiceToken) + "]}\n" +
		"  - {id: mallory-svc, role: service, tenants: [mallory], tokens_sha256: [" + catalog.HashKey(malloryServiceToken) + "]}\n"
	p := filepath.Join(dir, "catalog.yaml")
	require.NoError(t, os.WriteFile(p, []byte(y), 0o600))
	return p
}

// decideAs decides and reserves one request for the tenant of key.
func decideAs(t *testing.T, c switchboardv1.DeciderClient, key, requestID string) *switchboardv1.DecideResponse {
	t.Helper()
	resp, err := c.Decide(t.Context(), &switchboardv1.DecideRequest{
		RequestId: requestID, Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(key)}, Model: "vendor/model",
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 100, MaxOutputTokens: 10}, Reserve: true,
	})
	require.NoError(t, err)
	require.NotNil(t, resp.GetReservation(), "reserved")
	return resp
}

// neighbours are the ids an attacker tries around its own: the next and
// previous sequence numbers, each in the shard the sequence would pick,
// when the id reads as a prefix, a shard and a counter.
func neighbours(id string) []string {
	if len(id) < 19 {
		return nil
	}
	head := id[:len(id)-18]
	seq, err := strconv.ParseUint(id[len(id)-16:], 16, 64)
	if err != nil {
		return nil
	}
	var out []string
	for k := -8; k <= 8; k++ {
		s := seq + uint64(k)
		out = append(out, fmt.Sprintf("%s%02x%016x", head, s%64, s))
	}
	return out
}

// TestReservationIDsCannotBeEnumerated: an attacker that holds a
// reservation of its own cannot derive the id of another tenant's made
// right after it, nor release that reservation with it.
func TestReservationIDsCannotBeEnumerated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, c := startDecider(t, Config{Catalog: writeTwoTenants(t, dir), DataDir: dir})
	defer d.Close()

	mine := decideAs(t, c, attackerKey, "attacker-1").GetReservation().GetReservationId()
	victim := decideAs(t, c, victimKey, "victim-1").GetReservation().GetReservationId()

	guesses := neighbours(mine)
	require.NotEmpty(t, guesses)
	for _, g := range guesses {
		if g == mine {
			continue
		}
		require.NotEqual(t, victim, g, "the victim's id follows from the attacker's")
		_, err := c.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: g, Outcome: switchboardv1.Outcome_OUTCOME_OK})
		require.Equal(t, codes.NotFound, status.Code(err), "guess %s", g)
	}
	// The victim's reservation is still open: its own reconciliation is
	// the first.
	_, err := c.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: victim, Outcome: switchboardv1.Outcome_OUTCOME_OK})
	require.NoError(t, err)
}

// dialAs is a client of d calling with token.
func dialAs(t *testing.T, d *Decider, token string) switchboardv1.DeciderClient {
	t.Helper()
	conn, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer.Token(token)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return switchboardv1.NewDeciderClient(conn)
}

// TestReservationsOfAnotherTenantAreRefused: a caller allowed one tenant
// that learned the id of another tenant's reservation can neither release
// it (Reconcile, a Report stream's reconciliation) nor keep it
// (KeepReservations); the reservation stays open and its own tenant
// closes it.
func TestReservationsOfAnotherTenantAreRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, c := startDecider(t, Config{Catalog: writeTwoTenants(t, dir), DataDir: dir})
	defer d.Close()

	victim := decideAs(t, c, victimKey, "victim-1").GetReservation().GetReservationId()
	mallory := dialAs(t, d, malloryServiceToken)

	_, err := mallory.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: victim, Outcome: switchboardv1.Outcome_OUTCOME_OK})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = mallory.KeepReservations(t.Context(), &switchboardv1.KeepReservationsRequest{ReservationIds: []string{victim}})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

	// A Report stream, whose reconciliations apply to every tenant, is
	// the edges' alone.
	stream, err := mallory.Report(t.Context())
	require.NoError(t, err)
	_, err = stream.Recv()
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

	// Still open: its own tenant's caller reconciles it, once.
	acme := dialAs(t, d, acmeServiceToken)
	_, err = acme.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: victim, Outcome: switchboardv1.Outcome_OUTCOME_OK})
	require.NoError(t, err)
	_, err = acme.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: victim, Outcome: switchboardv1.Outcome_OUTCOME_OK})
	require.Equal(t, codes.NotFound, status.Code(err), "reconciled already")
}

// TestForgedHedgeRecordsDoNotSettle: a record without a valid grant
// settles no hedge (it could give a spent budget back) and is not stored;
// a grant issued by one replica is valid on another, which shares its key.
func TestForgedHedgeRecordsDoNotSettle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := startDecider(t, Config{Catalog: writeLimited(t, dir, "100"), DataDir: dir, HedgeBudgetUSD: 5, HedgeBudgetBurst: unpaced})
	defer a.Close()
	b, cb := startDecider(t, Config{Etcd: []string{a.EtcdEndpoint()}, DataDir: t.TempDir(), HedgeBudgetUSD: 5, HedgeBudgetBurst: unpaced})
	defer b.Close()
	require.True(t, a.adm.Owner())
	spent := func() float64 { s, _, _, _ := a.HedgeBudget(); return s }
	for _, id := range []string{"h1", "h2"} {
		resp, err := cb.AcquireHedge(t.Context(), &switchboardv1.AcquireHedgeRequest{RequestId: id, EstimatedCostUsd: 1})
		require.NoError(t, err)
		require.True(t, resp.Granted)
	}

	forged := hedgeRecord(a, "h1", 0)
	forged.Grant = nil
	relabelled := hedgeRecord(a, "h1", 0)
	relabelled.TenantId = "globex"
	sendActivity(t, cb, 1, forged, relabelled, hedgeRecord(a, "h2", 0.25))
	// Settlements reach the owner in order: once h2's is in, h1's would be.
	require.Eventually(t, func() bool { return math.Abs(spent()-1.25) < 1e-9 }, 10*time.Second, 10*time.Millisecond,
		"h2 settled, h1 not: spent %v", spent())
	require.Equal(t, int64(2), b.ActivityRejected())
	require.Zero(t, a.ActivityRejected())
}
