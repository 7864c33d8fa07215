package app

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// An edge connected to a replica that does not own the broker: its
// heartbeats and its acknowledged reconciliations reach the owner, and a
// reconcile batch is acknowledged once applied there.
func TestReservationsThroughANonOwnerReplica(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, ca := startDecider(t, Config{Catalog: writeLimited(t, dir, "100"), DataDir: dir})
	defer a.Close()
	b, cb := startDecider(t, Config{Etcd: []string{a.EtcdEndpoint()}, DataDir: t.TempDir()})
	defer b.Close()
	require.True(t, a.adm.Owner())
	require.False(t, b.adm.Owner())

	r1 := decideReserve(t, cb, 0)
	r2 := decideReserve(t, cb, 1)
	id1, id2 := r1.Reservation.ReservationId, r2.Reservation.ReservationId

	kept, err := cb.KeepReservations(t.Context(), &switchboardv1.KeepReservationsRequest{ReservationIds: []string{id1, "nope"}})
	require.NoError(t, err)
	require.Equal(t, int64(1), kept.GetKept(), "forwarded to the owner, which knows one of the two")

	stream, err := cb.Report(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: "e"}}}))
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Heartbeat{Heartbeat: &switchboardv1.ReservationHeartbeat{ReservationIds: []string{id1, id2}}}}))
	// A call report naming a reservation does not reconcile it for such an edge.
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{Reports: []*switchboardv1.CallReport{{
		EndpointId: r2.Endpoint.Id, Outcome: switchboardv1.Outcome_OUTCOME_OK, ReservationId: id2,
	}}}}}))
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Reconcile{Reconcile: &switchboardv1.ReconcileBatch{Sequence: 1, Reconciles: []*switchboardv1.ReconcileRequest{
		{ReservationId: id1, Outcome: switchboardv1.Outcome_OUTCOME_OK, Usage: &switchboardv1.Usage{InputTokens: 90, OutputTokens: 5, Reported: true}},
		{ReservationId: "r000000000000000000000000000000", Outcome: switchboardv1.Outcome_OUTCOME_OK}, // unknown: done, too
	}}}}))
	for {
		m, err := stream.Recv()
		require.NoError(t, err)
		if m.GetAck().GetReconcileSequence() == 1 {
			break
		}
	}
	require.Eventually(t, func() bool { return b.ReservationHeartbeats() == 1 }, 5*time.Second, 10*time.Millisecond)
	_, err = ca.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: id1})
	require.Error(t, err, "applied on the owner already")
	_, err = ca.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: id2})
	require.NoError(t, err, "the call report did not reconcile it")
}
