package report

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// A bad item in a batch is dropped and counted; the rest of its batch is
// applied, the batch acknowledged and the stream kept.
func TestHubDropsAndCountsInvalidItems(t *testing.T) {
	var mu sync.Mutex
	var reports, stored []string
	rsv := &fakeReservations{}
	h := newTestHub(func(_ *switchboardv1.EdgeHello, rs []*switchboardv1.CallReport) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rs {
			reports = append(reports, r.GetRequestId())
		}
	}, func(_ context.Context, _ *switchboardv1.EdgeHello, rs []*switchboardv1.ActivityRecord) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rs {
			stored = append(stored, r.GetId())
		}
		return nil
	}, rsv)
	stream := open(t, serveHub(t, h), acked)
	huge := strings.Repeat("x", 900_000)

	rb := reconcileBatch(3, "r1", "r2", "r3", huge)
	rb.GetReconcile().Reconciles[1].Outcome = 99
	rb.GetReconcile().Reconciles[2].Usage = &switchboardv1.Usage{InputTokens: 1, CachedInputTokens: 2}
	require.NoError(t, stream.Send(rb))
	a := recvAck(t, stream)
	require.Equal(t, uint64(3), a.GetReconcileSequence(), "the batch is acknowledged")
	require.Equal(t, []string{"r1"}, rsv.reconciledIDs(), "only the valid reconciliation is applied")

	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{
		Reports: []*switchboardv1.CallReport{
			{RequestId: "ok", Outcome: switchboardv1.Outcome_OUTCOME_OK},
			{RequestId: "neg", Usage: &switchboardv1.Usage{OutputTokens: -1}},
			{RequestId: "enum", Outcome: 1234},
		}}}}))
	a = recvAck(t, stream)
	require.Equal(t, int64(1), a.GetAccepted())

	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: &switchboardv1.ActivityBatch{
		Sequence: 1, Records: []*switchboardv1.ActivityRecord{{Id: "good", CostUsd: 0.1}, {Id: "bill", CostUsd: -999}, {Id: huge}}}}}))
	a = recvAck(t, stream)
	require.Equal(t, uint64(1), a.GetActivitySequence())
	require.Equal(t, int64(1), a.GetAccepted())

	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Heartbeat{Heartbeat: &switchboardv1.ReservationHeartbeat{
		ReservationIds: []string{"r1", huge}}}}))
	require.Eventually(t, func() bool {
		rsv.mu.Lock()
		defer rsv.mu.Unlock()
		return len(rsv.kept) == 1
	}, 10*time.Second, time.Millisecond)
	rsv.mu.Lock()
	require.Equal(t, []string{"r1"}, rsv.kept[0])
	rsv.mu.Unlock()

	mu.Lock()
	require.Equal(t, []string{"ok"}, reports)
	require.Equal(t, []string{"good"}, stored)
	mu.Unlock()
	require.Equal(t, int64(3+2+2+1), h.Invalid())
}

func TestHubRefusesAnOversizedHello(t *testing.T) {
	stream := open(t, serveHub(t, newTestHub(nil, nil)), &switchboardv1.EdgeHello{EdgeId: strings.Repeat("e", 200)})
	_, err := stream.Recv()
	require.ErrorContains(t, err, "hello.edge_id")
}
