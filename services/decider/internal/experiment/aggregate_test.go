package experiment

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestHistQuantiles(t *testing.T) {
	var h hist
	_, ok := h.quantile(0.5)
	require.False(t, ok)
	for i := 1; i <= 1000; i++ {
		h.add(float64(i))
	}
	p50, _ := h.quantile(0.5)
	p95, _ := h.quantile(0.95)
	require.InEpsilon(t, 500, p50, 0.02)
	require.InEpsilon(t, 950, p95, 0.02)
	// Merging two halves gives the same histogram as adding all.
	var a, b hist
	for i := 1; i <= 1000; i++ {
		if i%2 == 0 {
			a.add(float64(i))
		} else {
			b.add(float64(i))
		}
	}
	a.merge(&b)
	require.Equal(t, h.sparse(), a.sparse())
	require.Equal(t, h.n, a.n)
	require.Less(t, len(h.counts), 200, "only the bins between the smallest and the largest value are kept")
	// Out of range values land in the end bins; sparse round-trips.
	h.add(0)
	h.add(math.NaN())
	h.add(1e30)
	r := fromSparse(h.sparse())
	require.Equal(t, h.sparse(), r.sparse())
	require.Equal(t, h.n, r.n)
	require.Equal(t, 0, r.lo)
	require.Len(t, r.counts, histBins)
	q, _ := r.quantile(0.5)
	require.InEpsilon(t, 500, q, 0.03)
	var e hist
	e.merge(&r)
	require.Equal(t, r.sparse(), e.sparse(), "merged into an empty hist")
}

// rec builds a finished request: created at, with its served attempt's
// ttft and the client's, lasting dur.
func rec(id string, at time.Time, ttft, callerTTFT, dur time.Duration, out int64, cost float64, attempts ...*switchboardv1.Attempt) *switchboardv1.ActivityRecord {
	if len(attempts) == 0 {
		attempts = []*switchboardv1.Attempt{{EndpointId: "ep1", Outcome: switchboardv1.Outcome_OUTCOME_OK, Ttft: durationpb.New(ttft), StartTime: timestamppb.New(at)}}
	}
	return &switchboardv1.ActivityRecord{
		Id: id, CreateTime: timestamppb.New(at), TenantId: "acme", Model: "vendor/a", EndpointId: "ep1",
		Attempts: attempts, Usage: &switchboardv1.Usage{InputTokens: 1000, OutputTokens: out}, CostUsd: cost,
		Status: switchboardv1.CallStatus_CALL_STATUS_OK, Duration: durationpb.New(dur), Ttft: durationpb.New(callerTTFT),
	}
}

func TestAttributionAndBurnIn(t *testing.T) {
	e := def(time.Hour, 10*time.Minute)
	e.Schedule = switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_ALTERNATING
	e.Models = []string{"vendor/a"}
	a := NewAggregate(mustParse(t, e))
	var rs []*switchboardv1.ActivityRecord
	for i := range 4 {
		rs = append(rs, rec(fmt.Sprint("burn", i), t0.Add(time.Duration(i)*time.Minute), 100*time.Millisecond, 120*time.Millisecond, time.Second, 100, 0.001))
	}
	for i := range 10 {
		rs = append(rs, rec(fmt.Sprint("a", i), t0.Add(20*time.Minute), 100*time.Millisecond, 120*time.Millisecond, 2*time.Second, 100, 0.001))
		rs = append(rs, rec(fmt.Sprint("b", i), t0.Add(80*time.Minute), 300*time.Millisecond, 350*time.Millisecond, 4*time.Second, 100, 0.002))
	}
	other := rec("other", t0.Add(20*time.Minute), time.Millisecond, time.Millisecond, time.Second, 1, 1)
	other.Model = "vendor/b"
	rs = append(rs, other, rec("before", t0.Add(-time.Minute), 0, 0, 0, 0, 0))
	counted, burnIn := a.Add(rs)
	require.Equal(t, 20, counted)
	require.Equal(t, 4, burnIn)

	arms, diffs := a.plan.report(a.snapshot())
	require.Equal(t, int64(10), arms[0].GetRequests())
	require.Equal(t, int64(4), arms[0].GetBurnInRequests())
	require.Equal(t, int64(10), arms[1].GetRequests())
	byName := func(ms []*switchboardv1.MetricEstimate, n string) *switchboardv1.MetricEstimate {
		for _, m := range ms {
			if m.GetName() == n {
				return m
			}
		}
		t.Fatalf("no metric %s", n)
		return nil
	}
	require.InEpsilon(t, 100, byName(arms[0].GetMetrics(), "ttft_p50").GetPooled(), 0.03)
	require.InEpsilon(t, 300, byName(arms[1].GetMetrics(), "ttft_p50").GetPooled(), 0.03)
	require.InEpsilon(t, 350, byName(arms[1].GetMetrics(), "caller_ttft_p95").GetPooled(), 0.03)
	require.InEpsilon(t, 50, byName(arms[0].GetMetrics(), "throughput_p50").GetPooled(), 0.03, "100 tokens in 2 s")
	require.InEpsilon(t, 1.0, byName(arms[0].GetMetrics(), "cost_per_1k_requests").GetPooled(), 1e-9)
	require.InEpsilon(t, 1e6*0.002/1100, byName(arms[1].GetMetrics(), "cost_per_1m_tokens").GetPooled(), 1e-9)
	require.InEpsilon(t, 4000, byName(arms[1].GetMetrics(), "e2e_p95").GetPooled(), 0.03)
	require.False(t, byName(arms[0].GetMetrics(), "ttft_p50").GetHasInterval(), "one block: no interval")
	require.InEpsilon(t, 200, byName(diffs, "ttft_p50").GetEstimate(), 0.05)
}

func TestRetriesRateLimitsAndFailedTime(t *testing.T) {
	at := t0.Add(30 * time.Minute)
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name                   string
		attempts               []*switchboardv1.Attempt
		dur                    time.Duration
		wantLimited, wantRetry bool
		wantFailed             time.Duration
	}{
		{
			name:     "served at once",
			attempts: []*switchboardv1.Attempt{{EndpointId: "ep1", Outcome: switchboardv1.Outcome_OUTCOME_OK, StartTime: timestamppb.New(ms(0))}},
			dur:      time.Second,
		},
		{
			name: "429 then served",
			attempts: []*switchboardv1.Attempt{
				{EndpointId: "ep0", Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED, HttpStatus: 429, StartTime: timestamppb.New(ms(0))},
				{EndpointId: "ep1", Outcome: switchboardv1.Outcome_OUTCOME_OK, StartTime: timestamppb.New(ms(40))},
			},
			dur: time.Second, wantLimited: true, wantRetry: true, wantFailed: 40 * time.Millisecond,
		},
		{
			name: "timeout, 5xx, then served",
			attempts: []*switchboardv1.Attempt{
				{EndpointId: "ep0", Outcome: switchboardv1.Outcome_OUTCOME_TIMEOUT, StartTime: timestamppb.New(ms(0))},
				{EndpointId: "ep2", Outcome: switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, StartTime: timestamppb.New(ms(500))},
				{EndpointId: "ep1", Outcome: switchboardv1.Outcome_OUTCOME_OK, StartTime: timestamppb.New(ms(600))},
			},
			dur: time.Second, wantRetry: true, wantFailed: 600 * time.Millisecond,
		},
		{
			name: "a hedge leg that lost is no failure",
			attempts: []*switchboardv1.Attempt{
				{EndpointId: "ep1", Outcome: switchboardv1.Outcome_OUTCOME_OK, StartTime: timestamppb.New(ms(0))},
				{EndpointId: "ep0", Outcome: switchboardv1.Outcome_OUTCOME_CANCELLED, Hedge: true, StartTime: timestamppb.New(ms(1000))},
			},
			dur: 3 * time.Second,
		},
		{
			name: "the primary failed beside the hedge that served",
			attempts: []*switchboardv1.Attempt{
				{EndpointId: "ep0", Outcome: switchboardv1.Outcome_OUTCOME_DROPPED, StartTime: timestamppb.New(ms(0))},
				{EndpointId: "ep1", Outcome: switchboardv1.Outcome_OUTCOME_OK, Hedge: true, StartTime: timestamppb.New(ms(1000))},
			},
			dur: 3 * time.Second, wantFailed: time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b block
			b.add(rec("r", at, time.Millisecond, time.Millisecond, tt.dur, 10, 0, tt.attempts...))
			require.Equal(t, tt.wantLimited, b.rateLimited == 1)
			require.Equal(t, tt.wantRetry, b.retried == 1)
			require.InDelta(t, ms0(tt.wantFailed), b.failedMS, 1e-6)
		})
	}
	// A request that failed altogether waited on its attempts until its end.
	r := rec("f", at, 0, 0, 2*time.Second, 0, 0,
		&switchboardv1.Attempt{EndpointId: "ep0", Outcome: switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, StartTime: timestamppb.New(ms(0))},
		&switchboardv1.Attempt{EndpointId: "ep1", Outcome: switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, StartTime: timestamppb.New(ms(1500))})
	r.EndpointId, r.Status = "", switchboardv1.CallStatus_CALL_STATUS_FAILED
	var b block
	b.add(r)
	require.InDelta(t, 2000.0, b.failedMS, 1e-6)
	require.Zero(t, b.e2e.n, "a failed request has no time to its last token")
	require.Zero(t, b.ttft.n)
}

func ms0(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func TestEncodeRestoreMerge(t *testing.T) {
	p := mustParse(t, def(time.Hour, 0))
	a := NewAggregate(p)
	for i := range 50 {
		a.Add([]*switchboardv1.ActivityRecord{rec(fmt.Sprint(i), t0.Add(time.Duration(i)*3*time.Minute), time.Duration(100+i)*time.Millisecond, 200*time.Millisecond, time.Second, 50, 0.01)})
	}
	all, err := a.Encode(true)
	require.NoError(t, err)
	require.Len(t, all, 3, "50 requests 3 minutes apart span 3 hour blocks")
	dirty, err := a.Encode(false)
	require.NoError(t, err)
	require.Empty(t, dirty, "nothing changed since")
	a.Add([]*switchboardv1.ActivityRecord{rec("late", t0.Add(time.Minute), time.Millisecond, time.Millisecond, time.Second, 1, 0)})
	dirty, err = a.Encode(false)
	require.NoError(t, err)
	require.Len(t, dirty, 1, "a late record changes its own block only")
	a.Redirty([]int{2})
	dirty, _ = a.Encode(false)
	require.Contains(t, dirty, 2)

	all, err = a.Encode(true)
	require.NoError(t, err)
	b := NewAggregate(p)
	require.NoError(t, b.Restore(all))
	want, _ := p.report(a.snapshot())
	got, _ := p.report(b.snapshot())
	require.Equal(t, fmt.Sprint(want), fmt.Sprint(got), "restored figures are the same")
	// Two replicas' figures merge by adding.
	merged := b.snapshot()
	mergeBlocks(merged, a.snapshot())
	arms, _ := p.report(merged)
	require.Equal(t, int64(2*51), arms[0].GetRequests()+arms[1].GetRequests())
}
