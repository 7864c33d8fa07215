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

// regionsSim serves both providers of the regions test; the figures the
// decider learns come from the test's own reports.
const regionsSim = `
providers:
  - name: swift
    listen: 127.0.0.1:0
    models:
      - id: sim-model
        default_output_tokens: 4
        ttft: {base: 5ms}
  - name: steady
    listen: 127.0.0.1:0
    models:
      - id: sim-model
        default_output_tokens: 4
        ttft: {base: 5ms}
`

// TestFirstTokenFiguresPerRegion: swift, the cheaper, answers its first
// token in 100 ms to the edges in us-east and in 3 s to those in eu-west;
// steady in 500 ms to both. Each region's requests are routed by the figure
// its own edges measured (swift from us-east, steady from eu-west), and the
// decision, and the route header of the edge in us-east, say whose figure
// was read; a region with too few samples of its own (ap-south) reads the
// global figure, as a request naming no region does. Before, there was one
// figure per endpoint, and eu-west's requests went to swift for the speed
// the other regions saw.
func TestFirstTokenFiguresPerRegion(t *testing.T) {
	s := startStack(t, stackOptions{sim: regionsSim, edgeArgs: []string{"--region=us-east"},
		catalog: func(url func(string) string) string {
			return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: swift,  base_url: %[2]s, upstream_model: sim-model, context_length: 200000, price: {input: 0.2, output: 0.8}}
      - {provider: steady, base_url: %[3]s, upstream_model: sim-model, context_length: 200000, price: {input: 0.4, output: 1.6}}
tenants:
  - {id: acme, api_keys_sha256: [%[4]s]}
`, model, url("swift"), url("steady"), catalog.HashKey(testKey))
		},
		// No probes: the figures are the test's reports alone.
		tune: func(c *deciderapp.Config) { c.NoProbes = true }})
	d := s.decider
	edge := dialAs(t, d.Addr(), testEdgeToken)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	call := func(provider string, ttft time.Duration) *switchboardv1.CallReport {
		return &switchboardv1.CallReport{RequestId: "r", EndpointId: provider + "/" + model, Model: model, Outcome: switchboardv1.Outcome_OUTCOME_OK,
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
	sent := d.ReportsReceived()
	send := func(edgeID, region string, reports ...[]*switchboardv1.CallReport) {
		t.Helper()
		st, err := edge.Report(ctx)
		require.NoError(t, err)
		require.NoError(t, st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: edgeID, Region: region}}}))
		for _, rs := range reports {
			require.NoError(t, st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{Reports: rs}}}))
			sent += int64(len(rs))
		}
	}
	send("edge-us", "us-east", calls(12, "swift", 100*time.Millisecond), calls(12, "steady", 500*time.Millisecond))
	send("edge-eu", "eu-west", calls(12, "swift", 3*time.Second), calls(12, "steady", 500*time.Millisecond))
	send("edge-ap", "ap-south", calls(3, "swift", 100*time.Millisecond), calls(3, "steady", 500*time.Millisecond))
	require.Eventually(t, func() bool { return d.ReportsReceived() == sent }, 10*time.Second, 10*time.Millisecond, "every report taken in")

	type decision struct {
		*switchboardv1.Decision
		chosen string
	}
	explain := func(region string) (map[string]*switchboardv1.Candidate, decision) {
		t.Helper()
		resp, err := s.rpc.Explain(ctx, &switchboardv1.ExplainRequest{Identity: byTenant("acme"), Model: model, Region: region,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: 40_000, MaxOutputTokens: 10}})
		require.NoError(t, err)
		out := map[string]*switchboardv1.Candidate{}
		for _, c := range resp.GetDecision().GetCandidates() {
			out[c.GetProvider()] = c
		}
		require.Len(t, out, 2)
		return out, decision{resp.GetDecision(), resp.GetEndpoint().GetProvider()}
	}

	eu, dec := explain("eu-west")
	require.Equal(t, 3*time.Second, eu["swift"].GetTypicalTtft().AsDuration(), "eu-west reads its own edges' figure of swift")
	require.Equal(t, "steady", dec.chosen, "from eu-west, swift is too slow")
	require.Contains(t, dec.GetSummary(), " ttft_region=eu-west")

	us, dec := explain("us-east")
	require.Equal(t, 100*time.Millisecond, us["swift"].GetTypicalTtft().AsDuration(), "us-east reads its own edges' figure of swift")
	require.EqualValues(t, 12, us["swift"].GetSamples())
	require.Equal(t, "swift", dec.chosen, "from us-east, swift is cheapest and fastest")
	require.Contains(t, dec.GetSummary(), " ttft_region=us-east", "the route header names the region whose figure was read")

	global, dec := explain("")
	require.NotContains(t, dec.GetSummary(), "ttft_region=")
	require.EqualValues(t, 12+12+3, global["swift"].GetSamples(), "the global figure holds every region's samples")
	ap, dec := explain("ap-south")
	require.Equal(t, global["swift"].GetTypicalTtft().AsDuration(), ap["swift"].GetTypicalTtft().AsDuration(),
		"3 samples of its own are too few: ap-south reads the global figure")
	require.Equal(t, global["swift"].GetSamples(), ap["swift"].GetSamples())
	require.NotContains(t, dec.GetSummary(), "ttft_region=")
	_, dec = explain("nowhere")
	require.False(t, strings.Contains(dec.GetSummary(), "ttft_region="), "a region no edge reports from reads the global figure")

	// The edge in us-east sends its region with every request: its route
	// header names the figure read.
	code, hdr, body := s.post(t, testKey, chat("regions", 40_000, ""))
	require.Equal(t, 200, code, "%v", body)
	require.Equal(t, "swift", body["provider"], hdr.Get("x-switchboard-route"))
	require.Contains(t, hdr.Get("x-switchboard-route"), " ttft_region=us-east")
}
