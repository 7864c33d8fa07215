package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// experimentSim answers every call after a first token of 30 ms (the
// provider TTFT the experiment must report, give or take the machine).
const experimentSim = `
seed: 3
providers:
  - name: alpha
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 30ms}, default_output_tokens: 8}
  - name: beta
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 30ms}, default_output_tokens: 8}
`

// TestSwitchbackExperiment runs a switchback experiment with 2 s blocks
// and a 200 ms burn-in over real traffic through the edge: both arms report
// requests, each request is counted under the arm of its block unless it
// arrived in a burn-in, the figures are plausible for the simulator, and a
// restarted decider reads the same figures back.
func TestSwitchbackExperiment(t *testing.T) {
	s := startStack(t, stackOptions{sim: experimentSim, catalog: func(url func(string) string) string {
		return fmt.Sprintf(`
models:
  - id: %[1]s
    endpoints:
      - {provider: alpha, base_url: %[2]s, upstream_model: %[4]s, price: {input: 0.10, output: 0.50}}
      - {provider: beta,  base_url: %[3]s, upstream_model: %[4]s, price: {input: 0.20, output: 0.60}}
tenants:
  - {id: acme, api_keys_sha256: [%[5]s]}
`, model, url("alpha"), url("beta"), simModel, catalog.HashKey(testKey))
	}, tune: func(c *deciderapp.Config) {
		c.ID, c.Seed = "switchback", 0
		c.ExperimentMinBlock, c.ExperimentSaveInterval = 100*time.Millisecond, 200*time.Millisecond
	}})
	d, e := s.decider, s.edge
	ops := dialAs(t, d.Addr(), testOperatorToken)

	const block, burnIn = 2 * time.Second, 200 * time.Millisecond
	start := time.Now()
	started, err := ops.StartExperiment(t.Context(), &switchboardv1.StartExperimentRequest{Experiment: &switchboardv1.Experiment{
		Arms: []string{"smart", "routing-cost"}, StartTime: timestamppb.New(start),
		Block: durationpb.New(block), BurnIn: durationpb.New(burnIn),
		Schedule: switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_ALTERNATING,
	}})
	require.NoError(t, err)
	_, err = dialAs(t, d.Addr(), testEdgeToken).GetExperiment(t.Context(), &switchboardv1.GetExperimentRequest{})
	require.Error(t, err, "an edge may not read experiments")

	// Traffic through the edge until the third block has begun, so both
	// arms see requests and the burn-ins of blocks 1 and 2 are crossed.
	sent := 0
	for time.Since(start) < 2*block+3*burnIn || sent < 20 {
		code, _, body := s.post(t, testKey, `{"model":"`+model+`","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hello `+fmt.Sprint(sent)+`"}]}`)
		require.Equal(t, http.StatusOK, code, "%v", body)
		sent++
	}

	// Every call reaches the activity log; recount them by the block of
	// their create time.
	var recs []*switchboardv1.ActivityRecord
	require.Eventually(t, func() bool {
		resp, err := ops.ListActivity(t.Context(), &switchboardv1.ListActivityRequest{Identity: &switchboardv1.Identity{TenantId: "acme"}, Limit: 500})
		recs = resp.GetRecords()
		return err == nil && len(recs) == sent
	}, waitFor, tick, "%d calls reach the activity log", sent)
	var wantCounted [2]int64
	var wantBurnIn int64
	for _, r := range recs {
		since := r.GetCreateTime().AsTime().Sub(start)
		require.GreaterOrEqual(t, since, time.Duration(0))
		b := int(since / block)
		if since-time.Duration(b)*block < burnIn {
			wantBurnIn++
			continue
		}
		wantCounted[b%2]++
	}
	require.Positive(t, wantBurnIn, "some calls arrived in a burn-in")

	got, err := ops.GetExperiment(t.Context(), &switchboardv1.GetExperimentRequest{})
	require.NoError(t, err)
	var table strings.Builder
	deciderapp.PrintExperiment(&table, got)
	t.Logf("%d calls:\n%s", sent, table.String())
	require.Equal(t, started.GetExperiment().GetId(), got.GetExperiment().GetId())
	arms := got.GetArms()
	require.Len(t, arms, 2)
	for i, a := range arms {
		require.Equal(t, started.GetExperiment().GetArms()[i], a.GetPolicy())
		require.Positive(t, a.GetRequests(), "arm %s reports requests", a.GetPolicy())
		require.Equal(t, wantCounted[i], a.GetRequests(), "arm %s counts the calls of its blocks past the burn-in", a.GetPolicy())
		m := metricsByName(a)
		ttft := m["ttft_p50"].GetPooled()
		require.GreaterOrEqual(t, ttft, 30*0.97, "provider TTFT p50 %v ms: the simulator waits 30 ms", ttft)
		require.Less(t, ttft, 2000.0)
		require.GreaterOrEqual(t, m["caller_ttft_p50"].GetPooled(), ttft*0.97, "the client waits at least as long as the provider")
		require.GreaterOrEqual(t, m["e2e_p95"].GetPooled(), m["e2e_p50"].GetPooled())
		require.Positive(t, m["throughput_p50"].GetPooled())
		require.Positive(t, m["cost_per_1k_requests"].GetPooled())
		require.Positive(t, m["cost_per_1m_tokens"].GetPooled())
		require.Zero(t, m["rate_limited_share"].GetPooled())
		require.Zero(t, m["retry_share"].GetPooled())
		require.Zero(t, m["failed_attempt_ms"].GetPooled())
	}
	require.Equal(t, wantBurnIn, arms[0].GetBurnInRequests()+arms[1].GetBurnInRequests(), "the calls in burn-ins are left out")
	require.Len(t, got.GetDifferences(), len(arms[0].GetMetrics()))

	// A restart (a clean stop saves; the new process restores) reads the
	// same figures back.
	require.NoError(t, e.Close())
	d.Close()
	d2 := s.restartDecider(t, nil)
	again, err := dialAs(t, d2.Addr(), testOperatorToken).GetExperiment(t.Context(), &switchboardv1.GetExperimentRequest{})
	require.NoError(t, err)
	require.Equal(t, got.GetExperiment().GetId(), again.GetExperiment().GetId())
	for i := range arms {
		require.True(t, proto.Equal(arms[i], again.GetArms()[i]), "arm %d after the restart:\n%v\nbefore:\n%v", i, again.GetArms()[i], arms[i])
	}
	require.Equal(t, []string{"switchback"}, again.GetReplicas())

	stopped, err := dialAs(t, d2.Addr(), testOperatorToken).StopExperiment(t.Context(), &switchboardv1.StopExperimentRequest{})
	require.NoError(t, err)
	require.NotNil(t, stopped.GetExperiment().GetStopTime())
}

func metricsByName(a *switchboardv1.ArmReport) map[string]*switchboardv1.MetricEstimate {
	out := map[string]*switchboardv1.MetricEstimate{}
	for _, m := range a.GetMetrics() {
		out[m.GetName()] = m
	}
	return out
}
