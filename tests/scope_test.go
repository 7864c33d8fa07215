package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// secTrustedToken is a service for acme that the catalog trusts for shared
// provider state.
const secTrustedToken = "sec-trusted-service-token"

// TestServiceReconcilePausesOnlyItsTenants: a service scoped to acme
// reconciles its own reservation as a provider's policy refusal with
// invented rate-limit headers (retry-after 590). Once, every tenant then
// got provider_paused on that provider for ten minutes, through every edge.
// Now the pause is acme's: globex's next request is reserved as usual, while
// acme's is paused. A service the catalog trusts (shared_provider_state)
// still pauses the route for everyone.
func TestServiceReconcilePausesOnlyItsTenants(t *testing.T) {
	d := startStack(t, stackOptions{noEdge: true,
		catalog: func(func(string) string) string {
			return secCatalog() + "  - {id: sec-trusted, role: service, tenants: [acme], shared_provider_state: true, tokens_sha256: [" +
				catalog.HashKey(secTrustedToken) + "]}\n"
		},
		tune: func(c *deciderapp.Config) { c.ID, c.TokenFile = "scope", tokenFile(t, secReplicaToken) }}).decider
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	edge := dialAs(t, d.Addr(), secEdgeToken)

	reserve := func(svc switchboardv1.DeciderClient) string {
		t.Helper()
		res, err := svc.Reserve(ctx, reserveReq(byTenant("acme")))
		require.NoError(t, err)
		require.True(t, res.GetAdmitted())
		return res.GetReservation().GetReservationId()
	}
	refuse := func(svc switchboardv1.DeciderClient, id string) {
		t.Helper()
		_, err := svc.Reconcile(ctx, &switchboardv1.ReconcileRequest{
			ReservationId: id, Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED,
			Failure:           switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY,
			ProviderErrorCode: "insufficient_quota",
			RateLimitHeaders: []*switchboardv1.Header{{Name: "retry-after", Value: "590"},
				{Name: "x-ratelimit-limit-requests", Value: "1"}, {Name: "x-ratelimit-remaining-requests", Value: "0"}},
		})
		require.NoError(t, err)
	}
	// paused reports whether a Decide with reserve, as an edge makes for a
	// client of tenant key, is refused as provider_paused.
	paused := func(key string) bool {
		t.Helper()
		resp, err := edge.Decide(ctx, decideReserve(byKey(key)))
		require.NoError(t, err)
		if r := resp.GetRefusal(); r != nil {
			require.Equal(t, "provider_paused", r.GetCode(), "refused for another reason: %v", r)
			return true
		}
		require.NotEmpty(t, resp.GetReservation().GetReservationId())
		return false
	}

	svc, trusted := dialAs(t, d.Addr(), secServiceToken), dialAs(t, d.Addr(), secTrustedToken)
	later := reserve(trusted) // before acme is paused
	refuse(svc, reserve(svc))
	require.Equal(t, int64(1), d.ReconcilesScoped(), "the service's reconciliation was its tenant's only")
	require.False(t, paused(secGlobexKey), "globex is routed as usual")
	require.True(t, paused(secAcmeKey), "acme, whose service reported the refusal, is paused")

	refuse(trusted, later)
	require.True(t, paused(secGlobexKey), "a trusted service's refusal pauses every tenant")
}

// TestEdgeReportsCannotBenchForYears: an edge's three call reports with a
// Retry-After of 87,600 hours once benched the endpoint until 2036; the
// cool-down every edge is told of now ends within 15 minutes. A report of
// a first token 1 ms after a 40k-token prompt is not believed, and counted.
func TestEdgeReportsCannotBenchForYears(t *testing.T) {
	d := startSecDecider(t)
	edge := dialAs(t, d.Addr(), secEdgeToken)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := edge.Report(ctx)
	require.NoError(t, err)
	require.NoError(t, st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: "edge-1", Region: "local"}}}))
	refusal := &switchboardv1.CallReport{RequestId: "r", EndpointId: secEndpoint, Model: secModel, Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED,
		HttpStatus: 429, RetryAfter: durationpb.New(87_600 * time.Hour)}
	fast := &switchboardv1.CallReport{RequestId: "f", EndpointId: secEndpoint, Model: secModel, Outcome: switchboardv1.Outcome_OUTCOME_OK,
		Stream: true, PromptTokens: 40_000, Ttft: durationpb.New(time.Millisecond), Duration: durationpb.New(2 * time.Second),
		Usage: &switchboardv1.Usage{InputTokens: 40_000, OutputTokens: 100, Reported: true}}
	sent := time.Now()
	require.NoError(t, st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{
		Reports: []*switchboardv1.CallReport{fast, refusal, refusal, refusal}}}}))
	for {
		m, err := st.Recv()
		require.NoError(t, err)
		if c := m.GetCooldown(); c != nil {
			require.Equal(t, secEndpoint, c.GetEndpointId())
			require.WithinDuration(t, sent.Add(15*time.Minute), c.GetUntil().AsTime(), 30*time.Second, "benched for 15 minutes, not until 2036")
			break
		}
	}
	require.Eventually(t, func() bool { return d.ReportsImplausible() == 1 }, 10*time.Second, 10*time.Millisecond)
}

// TestOneEdgeCannotSetAFigure: an edge credential once made an endpoint
// look 33 ms fast by inventing first-token times. Now each edge (by its
// edge_id) holds a bounded share of a figure: two edges measure 800 ms,
// a third floods 33 ms, and the endpoint's typical first token stays
// 800 ms.
func TestOneEdgeCannotSetAFigure(t *testing.T) {
	d := startSecDecider(t)
	edge := dialAs(t, d.Addr(), secEdgeToken)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	call := func(ttft time.Duration) *switchboardv1.CallReport {
		return &switchboardv1.CallReport{RequestId: "r", EndpointId: secEndpoint, Model: secModel, Outcome: switchboardv1.Outcome_OUTCOME_OK,
			Stream: true, PromptTokens: 40_000, Ttft: durationpb.New(ttft), Duration: durationpb.New(ttft + time.Second),
			Usage: &switchboardv1.Usage{InputTokens: 40_000, OutputTokens: 50, Reported: true}}
	}
	send := func(edgeID string, reports ...*switchboardv1.CallReport) {
		t.Helper()
		st, err := edge.Report(ctx)
		require.NoError(t, err)
		require.NoError(t, st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: edgeID, Region: "local"}}}))
		require.NoError(t, st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{Reports: reports}}}))
	}
	honest := 800 * time.Millisecond
	send("edge-1", call(honest), call(honest), call(honest))
	send("edge-2", call(honest), call(honest), call(honest))
	flood := make([]*switchboardv1.CallReport, 60)
	for i := range flood {
		flood[i] = call(33 * time.Millisecond)
	}
	send("mallory", flood...)
	ops := dialAs(t, d.Addr(), secOperatorToken)
	var c *switchboardv1.Candidate
	require.Eventually(t, func() bool {
		resp, err := ops.Explain(ctx, &switchboardv1.ExplainRequest{Identity: byTenant("acme"), Model: secModel,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: 40_000, MaxOutputTokens: 10}})
		require.NoError(t, err)
		require.Len(t, resp.GetDecision().GetCandidates(), 1)
		c = resp.GetDecision().GetCandidates()[0]
		return d.ReportsReceived() == 66 && c.GetSamples() == 64
	}, 10*time.Second, 10*time.Millisecond, "every report taken in; the series is full, most of it the flood's")
	require.Equal(t, honest, c.GetTypicalTtft().AsDuration(), "the flood holds a third of the weight: the median is the others'")
}
