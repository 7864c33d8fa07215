package tests

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// probeEdge is the test acting as one edge of a region on one decider's
// Report stream: it records the probes it is sent and answers each with
// the first token its region sees.
type probeEdge struct {
	region string
	mu     sync.Mutex
	models map[string]int // probes received, by model
}

func (e *probeEdge) probed() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.models)
}

// connectProbeEdge opens a Report stream to the decider at addr as an edge
// of region and answers every probe with a first token after ttft.
func connectProbeEdge(ctx context.Context, t *testing.T, addr, id, region string, ttft time.Duration) *probeEdge {
	t.Helper()
	st, err := dialAs(t, addr, testEdgeToken).Report(ctx)
	require.NoError(t, err)
	require.NoError(t, st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: id, Region: region}}}))
	e := &probeEdge{region: region, models: map[string]int{}}
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				return
			}
			p := m.GetProbe()
			if p == nil {
				continue
			}
			e.mu.Lock()
			e.models[p.GetModel()]++
			e.mu.Unlock()
			r := &switchboardv1.CallReport{RequestId: "probe-" + p.GetProbeId(), ProbeId: p.GetProbeId(), EndpointId: p.GetEndpoint().GetId(),
				Model: p.GetModel(), Outcome: switchboardv1.Outcome_OUTCOME_OK, PromptTokens: p.GetPromptTokens(),
				Ttft: durationpb.New(ttft), Duration: durationpb.New(ttft + 100*time.Millisecond),
				Usage: &switchboardv1.Usage{InputTokens: p.GetPromptTokens(), OutputTokens: p.GetMaxOutputTokens(), Reported: true}}
			if st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{Reports: []*switchboardv1.CallReport{r}}}}) != nil {
				return
			}
		}
	}()
	return e
}

// TestProbesRunFromEveryRegion: two deciders in us-east and two in
// eu-west on one etcd, each with an edge of its region. The probes used to
// be shared among all live replicas, so a model was probed from one region
// only and the other region's figures had no probes of their own. Now each
// region's replicas share every model among themselves and send the probes
// to their own region's edges: every model is probed from both regions, an
// edge of another region connected to a replica gets none of its probes,
// and each region's first-token figure is what its own probes measured.
func TestProbesRunFromEveryRegion(t *testing.T) {
	const models = 6
	regionOf := func(id string) string {
		if strings.HasPrefix(id, "eu") {
			return "eu-west"
		}
		return "us-east"
	}
	ttftIn := map[string]time.Duration{"us-east": 200 * time.Millisecond, "eu-west": 2 * time.Second}
	probes := func(c *deciderapp.Config) {
		c.ProbeInterval, c.ProbeSizes = 300*time.Millisecond, []int64{2048}
		c.Region = regionOf(c.ID)
	}
	s := startStack(t, stackOptions{noEdge: true, replicas: []string{"us2", "eu1", "eu2"},
		catalog: func(func(string) string) string {
			var b strings.Builder
			b.WriteString("models:\n")
			for i := range models {
				fmt.Fprintf(&b, "  - id: m%d\n    endpoints:\n      - {provider: alpha, base_url: http://127.0.0.1:9/v1, context_length: 200000, price: {input: 0.2, output: 0.8}}\n", i)
			}
			fmt.Fprintf(&b, "tenants:\n  - {id: acme, api_keys_sha256: [%s]}\n", catalog.HashKey(testKey))
			return b.String()
		},
		tune:        func(c *deciderapp.Config) { c.ID = "us1"; probes(c) },
		tuneReplica: probes,
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	deciders := append([]*deciderapp.Decider{s.decider}, s.replicas...)
	ids := []string{"us1", "us2", "eu1", "eu2"}
	edges := map[string]*probeEdge{}
	for i, d := range deciders {
		edges[ids[i]] = connectProbeEdge(ctx, t, d.Addr(), "edge-"+ids[i], regionOf(ids[i]), ttftIn[regionOf(ids[i])])
	}
	// An edge of eu-west on a replica of us-east: not one of its region's.
	stray := connectProbeEdge(ctx, t, s.decider.Addr(), "edge-stray", "eu-west", time.Hour)

	all := make([]string, models)
	for i := range all {
		all[i] = fmt.Sprintf("m%d", i)
	}
	probedFrom := func(region string) []string {
		set := map[string]bool{}
		for id, e := range edges {
			if regionOf(id) == region {
				for m := range e.probed() {
					set[m] = true
				}
			}
		}
		return slices.Sorted(maps.Keys(set))
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, all, probedFrom("us-east"), "us-east's replicas probe every model")
		assert.Equal(ct, all, probedFrom("eu-west"), "eu-west's replicas probe every model")
	}, waitFor, tick)
	for id, e := range edges {
		require.NotEmpty(t, e.probed(), "replica %s probes its share of its region's models", id)
	}
	require.Empty(t, stray.probed(), "a replica of us-east sends no probe to an edge of eu-west")

	// Each region reads the figure its own probes measured, on any replica.
	for i, d := range deciders {
		rpc := operatorRPC(t, d.Addr())
		for region, want := range ttftIn {
			require.EventuallyWithT(t, func(ct *assert.CollectT) {
				resp, err := rpc.Explain(ctx, &switchboardv1.ExplainRequest{Identity: byTenant("acme"), Model: "m0", Region: region,
					Tokens: &switchboardv1.TokenEstimate{InputTokens: 2048, MaxOutputTokens: 8}})
				if !assert.NoError(ct, err) || !assert.Len(ct, resp.GetDecision().GetCandidates(), 1) {
					return
				}
				assert.Equal(ct, want, resp.GetDecision().GetCandidates()[0].GetTypicalTtft().AsDuration(), "%s through %s", region, ids[i])
				assert.Contains(ct, resp.GetDecision().GetSummary(), " ttft_region="+region)
			}, waitFor, tick)
		}
	}
}
