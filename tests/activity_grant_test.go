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
func sendActivity(t *testing.T, rpc switchboardv1.DeciderClient, records ...*switchboardv1.ActivityRecord) {
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
			Id: id, CreateTime: timestamppb.Now(), TenantId: tenant, ApiKeyId: keyID, Model: model, Grant: grant, Caps: own.GetCaps(),
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

// TestActivityBeyondItsDecisionsCapsIsNotStored: a record with the genuine
// grant of a real decision (taken from a Decide by a caller holding an
// edge's credential, and never dispatched) but a bill that decision could
// never have run up — $999, 10^9 output tokens, more input than any of its
// endpoints' windows, attempts costing more than all of them — is refused
// and counted; so is one whose caps were raised to fit its bill, or that
// carries no caps. The records the edge itself sends of real calls, hedged
// or not, are within their caps and stored.
func TestActivityBeyondItsDecisionsCapsIsNotStored(t *testing.T) {
	s := startBilling(t, nil)
	a := s.chat(t, testKey, chatReq{content: "a real call", maxTokens: 2})
	require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	genuine := s.record(t, testKey, a.id(t))
	require.Empty(t, genuine.GetCaps(), "the caps are not shown to the tenant")

	forger := dialAs(t, s.decider.Addr(), testEdgeToken)
	decide := func(id string) *switchboardv1.DecideResponse {
		d, err := forger.Decide(t.Context(), &switchboardv1.DecideRequest{
			RequestId: id, Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(testKey)}, Model: model,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: 10, MaxOutputTokens: 2},
		})
		require.NoError(t, err)
		require.NotEmpty(t, d.GetGrant())
		// Every endpoint of the catalog has a 200k window.
		require.Equal(t, int64(200_000), d.GetCaps().GetMaxInputTokens())
		require.Equal(t, int64(200_000), d.GetCaps().GetMaxOutputTokens())
		require.Less(t, d.GetCaps().GetMaxCostUsd(), 999.0)
		return d
	}
	record := func(d *switchboardv1.DecideResponse, change func(*switchboardv1.ActivityRecord)) *switchboardv1.ActivityRecord {
		r := &switchboardv1.ActivityRecord{
			Id: d.GetRequestId(), CreateTime: timestamppb.Now(), TenantId: d.GetIdentity().GetTenantId(), ApiKeyId: d.GetIdentity().GetApiKeyId(),
			Model: model, Grant: d.GetGrant(), Caps: d.GetCaps(), Status: switchboardv1.CallStatus_CALL_STATUS_OK, HttpStatus: 200,
			Usage: &switchboardv1.Usage{InputTokens: 10, OutputTokens: 2},
		}
		change(r)
		return r
	}
	over := map[string]func(*switchboardv1.ActivityRecord){
		"gen-over-usd": func(r *switchboardv1.ActivityRecord) { r.CostUsd, r.Usage.CostUsd = 999, 999 },
		"gen-over-output": func(r *switchboardv1.ActivityRecord) {
			r.Usage.OutputTokens = 1_000_000_000
		},
		"gen-over-input": func(r *switchboardv1.ActivityRecord) { r.Usage.InputTokens = 200_001 },
		"gen-over-attempts": func(r *switchboardv1.ActivityRecord) {
			r.Attempts = []*switchboardv1.Attempt{{EndpointId: "alpha/" + model, CostUsd: r.GetCaps().GetMaxAttemptsCostUsd() * 2}}
		},
		"gen-over-loser": func(r *switchboardv1.ActivityRecord) {
			r.Hedge = &switchboardv1.HedgeInfo{Used: true, LoserCostUsd: 999}
		},
	}
	ungranted := map[string]func(*switchboardv1.ActivityRecord){
		"gen-raised-caps": func(r *switchboardv1.ActivityRecord) {
			r.CostUsd, r.Usage.CostUsd = 999, 999
			r.Caps = &switchboardv1.DecisionCaps{MaxInputTokens: r.GetCaps().GetMaxInputTokens(), MaxOutputTokens: r.GetCaps().GetMaxOutputTokens(),
				MaxCostUsd: 1000, MaxAttemptsCostUsd: 1000}
		},
		"gen-no-caps": func(r *switchboardv1.ActivityRecord) { r.Caps = nil },
	}
	var batch []*switchboardv1.ActivityRecord
	for id, change := range over {
		batch = append(batch, record(decide(id), change))
	}
	for id, change := range ungranted {
		batch = append(batch, record(decide(id), change))
	}
	// A record of a decision within its caps is what an edge sends.
	within := decide("gen-within")
	batch = append(batch, record(within, func(r *switchboardv1.ActivityRecord) {
		r.CostUsd, r.Usage.CostUsd = within.GetCaps().GetMaxCostUsd(), within.GetCaps().GetMaxCostUsd()
	}))
	sendActivity(t, forger, batch...)

	for id := range over {
		code, _, err := s.generation(testKey, id)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, code, "record %s beyond its caps stored", id)
	}
	for id := range ungranted {
		code, _, err := s.generation(testKey, id)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, code, "record %s without its decision's caps stored", id)
	}
	s.record(t, testKey, "gen-within")
	require.Equal(t, int64(len(over)), s.decider.ActivityOverCaps())
	require.Equal(t, int64(len(ungranted)), s.decider.ActivityRejected())

	// The edge's own records, of a streamed and a hedged-capable call, are
	// stored with their real bills.
	b := s.chat(t, testKey, chatReq{content: "another real call", stream: true, maxTokens: 2})
	require.Equal(t, http.StatusOK, b.status)
	rec := s.record(t, testKey, b.id(t))
	require.Positive(t, rec.GetCostUsd())
	require.Equal(t, int64(len(over)), s.decider.ActivityOverCaps(), "no real record refused")
}
