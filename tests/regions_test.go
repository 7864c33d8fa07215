package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// regionsCatalog has two endpoints of secModel: alpha, the cheaper, and
// beta.
func regionsCatalog() string {
	return fmt.Sprintf(`
models:
  - id: %s
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.2, output: 0.8}}
      - {provider: beta, base_url: http://127.0.0.1:2/v1, price: {input: 0.4, output: 1.6}}
tenants:
  - id: acme
    api_keys_sha256: [%s]
callers:
  - {id: sec-edges, role: edge, tokens_sha256: [%s]}
  - {id: sec-ops, role: operator, tokens_sha256: [%s]}
`, secModel, catalog.HashKey(secAcmeKey), catalog.HashKey(secEdgeToken), catalog.HashKey(secOperatorToken))
}

// TestFirstTokenFiguresPerRegion: alpha answers its first token in 100 ms
// to the edge in us-east and in 3 s to the edge in eu-west; beta in 500 ms
// to both. Each region's requests are routed by the figure its own edges
// measured (alpha from us-east, beta from eu-west), and the decision says
// whose figure it read; a region with too few samples of its own (ap-south)
// reads the global figure, as a request naming no region does. Before,
// there was one figure per endpoint, and us-east's requests went to beta
// for eu-west's slowness.
func TestFirstTokenFiguresPerRegion(t *testing.T) {
	d := startStack(t, stackOptions{catalog: func(func(string) string) string { return regionsCatalog() }, noEdge: true,
		tune: func(c *deciderapp.Config) { c.ID = "regions" }}).decider
	edge := dialAs(t, d.Addr(), secEdgeToken)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	call := func(provider string, ttft time.Duration) *switchboardv1.CallReport {
		return &switchboardv1.CallReport{RequestId: "r", EndpointId: provider + "/" + secModel, Model: secModel, Outcome: switchboardv1.Outcome_OUTCOME_OK,
			Stream: true, PromptTokens: 40_000, Ttft: durationpb.New(ttft), Duration: durationpb.New(ttft + time.Second),
			Usage: &switchboardv1.Usage{InputTokens: 40_000, OutputTokens: 50, Reported: true}}
	}
	calls := func(n int, provider string, ttft time.Duration) []*switchboardv1.CallReport {
		out := make([]*switchboardv1.CallReport, n)
		for i := range out {
			out[i] = call(provider, ttft)
		}
		return out
	}
	sent := 0
	send := func(edgeID, region string, reports ...[]*switchboardv1.CallReport) {
		t.Helper()
		st, err := edge.Report(ctx)
		require.NoError(t, err)
		require.NoError(t, st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: edgeID, Region: region}}}))
		for _, rs := range reports {
			require.NoError(t, st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{Reports: rs}}}))
			sent += len(rs)
		}
	}
	send("edge-us", "us-east", calls(12, "alpha", 100*time.Millisecond), calls(12, "beta", 500*time.Millisecond))
	send("edge-eu", "eu-west", calls(12, "alpha", 3*time.Second), calls(12, "beta", 500*time.Millisecond))
	send("edge-ap", "ap-south", calls(3, "alpha", 100*time.Millisecond), calls(3, "beta", 500*time.Millisecond))
	require.Eventually(t, func() bool { return d.ReportsReceived() == int64(sent) }, 10*time.Second, 10*time.Millisecond, "every report taken in")

	ops := dialAs(t, d.Addr(), secOperatorToken)
	type decision struct {
		*switchboardv1.Decision
		chosen string
	}
	explain := func(region string) (map[string]*switchboardv1.Candidate, decision) {
		t.Helper()
		resp, err := ops.Explain(ctx, &switchboardv1.ExplainRequest{Identity: byTenant("acme"), Model: secModel, Region: region,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: 40_000, MaxOutputTokens: 10}})
		require.NoError(t, err)
		out := map[string]*switchboardv1.Candidate{}
		for _, c := range resp.GetDecision().GetCandidates() {
			out[c.GetProvider()] = c
		}
		require.Len(t, out, 2)
		return out, decision{resp.GetDecision(), resp.GetEndpoint().GetProvider()}
	}

	us, dec := explain("us-east")
	require.Equal(t, 100*time.Millisecond, us["alpha"].GetTypicalTtft().AsDuration(), "us-east reads its own edges' figure of alpha")
	require.EqualValues(t, 12, us["alpha"].GetSamples())
	require.Equal(t, "alpha", dec.chosen, "from us-east, alpha is cheapest and fastest")
	require.Contains(t, dec.GetSummary(), " ttft_region=us-east", "the route header names the region whose figure was read")

	eu, dec := explain("eu-west")
	require.Equal(t, 3*time.Second, eu["alpha"].GetTypicalTtft().AsDuration(), "eu-west reads its own edges' figure of alpha")
	require.Equal(t, "beta", dec.chosen, "from eu-west, alpha is too slow")
	require.Contains(t, dec.GetSummary(), " ttft_region=eu-west")

	global, dec := explain("")
	require.NotContains(t, dec.GetSummary(), "ttft_region=")
	require.EqualValues(t, 12+12+3, global["alpha"].GetSamples(), "the global figure holds every region's samples")
	ap, dec := explain("ap-south")
	require.Equal(t, global["alpha"].GetTypicalTtft().AsDuration(), ap["alpha"].GetTypicalTtft().AsDuration(),
		"3 samples of its own are too few: ap-south reads the global figure")
	require.Equal(t, global["alpha"].GetSamples(), ap["alpha"].GetSamples())
	require.NotContains(t, dec.GetSummary(), "ttft_region=")
	_, dec = explain("nowhere")
	require.False(t, strings.Contains(dec.GetSummary(), "ttft_region="), "a region no edge reports from reads the global figure")
}
