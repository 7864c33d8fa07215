package tests

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// sendActivity sends activity records on a Report stream of its own, as an
// edge would, and waits for the decider to acknowledge them (processed).
func sendActivity(t *testing.T, rpc switchboardv1.DeciderServiceClient, records ...*switchboardv1.ActivityRecord) {
	t.Helper()
	stream, err := rpc.Report(t.Context())
	require.NoError(t, err)
	defer func() { _ = stream.CloseSend() }()
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: "forger"}}}))
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: &switchboardv1.ActivityBatch{Records: records, Sequence: 7}}}))
	for {
		m, err := stream.Recv()
		require.NoError(t, err)
		if m.GetAck().GetActivitySequence() == 7 {
			return
		}
	}
}

// TestForgedActivityRecordsAreNotStored: records sent straight to the
// decider's Report stream, by a caller holding an edge's credential, for a
// tenant that never made those calls — with
// no grant, with the grant of the forger's own decision, or with a genuine
// record's grant on another tenant — do not reach that tenant's activity
// log; the calls it made through the edge still do.
func TestForgedActivityRecordsAreNotStored(t *testing.T) {
	s := startBilling(t, nil)
	a := s.chat(t, testKey, chatReq{content: "a real call", maxTokens: 2})
	require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	genuine := s.record(t, testKey, a.id(t))
	require.Equal(t, "acme", genuine.GetTenantId())
	require.Empty(t, genuine.GetGrant(), "the grant is not shown to the tenant")

	// The forger's own decision (globex), whose grant it then puts on a
	// record for acme.
	forger := dialAs(t, s.decider.Addr(), testEdgeToken)
	own, err := forger.Decide(t.Context(), &switchboardv1.DecideRequest{
		RequestId: "gen-forged-own", Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(otherKey)}, Model: model,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 10, MaxOutputTokens: 2},
	})
	require.NoError(t, err)
	forged := func(id, tenant, keyID string, grant []byte) *switchboardv1.ActivityRecord {
		return &switchboardv1.ActivityRecord{
			Id: id, CreateTime: timestamppb.Now(), TenantId: tenant, ApiKeyId: keyID, Model: model, Grant: grant,
			CostUsd: 12345.67, Usage: &switchboardv1.Usage{CostUsd: 12345.67}, Status: switchboardv1.CallStatus_CALL_STATUS_OK, HttpStatus: 200,
		}
	}
	sendActivity(t, forger,
		forged("gen-forged-none", "acme", genuine.GetApiKeyId(), nil),
		forged("gen-forged-own", "acme", genuine.GetApiKeyId(), own.GetGrant()),
		forged("gen-forged-junk", "acme", genuine.GetApiKeyId(), []byte("0123456789abcdef0123456789abcdef")),
		forged(genuine.GetId(), "acme", genuine.GetApiKeyId(), nil), // overwrite the real one
	)
	for _, id := range []string{"gen-forged-none", "gen-forged-own", "gen-forged-junk"} {
		code, _, err := s.generation(testKey, id)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, code, "forged record %s stored", id)
	}
	recs := s.waitActivity(t, testKey, 1)
	require.Equal(t, genuine.GetId(), recs[0].GetId())
	require.InDelta(t, genuine.GetCostUsd(), recs[0].GetCostUsd(), 1e-12, "the real record stays as it was")
	require.Equal(t, int64(4), s.decider.ActivityRejected())

	// The edge's own records of later calls are still stored.
	b := s.chat(t, testKey, chatReq{content: "another real call", stream: true, maxTokens: 2})
	require.Equal(t, http.StatusOK, b.status)
	s.record(t, testKey, b.id(t))
	require.Len(t, s.waitActivity(t, testKey, 2), 2)
}
