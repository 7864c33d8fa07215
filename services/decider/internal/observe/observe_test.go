package observe

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/affinity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker/provheaders"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/session"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
)

type fakeCatalog struct{}

func (fakeCatalog) Endpoint(id string) (string, catalog.Rates, bool) {
	if id != "a/m" {
		return "", catalog.Rates{}, false
	}
	return "m", catalog.Rates{Input: 1, CachedInput: 0.5, Output: 2}, true
}

var _ Catalog = fakeCatalog{}

// current is the fake as Options.Catalog returns it.
func (f fakeCatalog) current() Catalog { return f }

func TestIngest(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	st := stats.New(stats.Config{Now: clock})
	cool := cooldown.New(cooldown.FirstRefusal)
	var sent []*switchboardv1.ReportResponse
	ob := New(Options{
		Catalog: fakeCatalog{}.current, Stats: st, Affinity: affinity.New(affinity.Options{}), Cooldown: cool,
		Broadcast: func(m *switchboardv1.ReportResponse) { sent = append(sent, m) },
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock,
	})
	ok := func(stream bool) *switchboardv1.CallReport {
		return &switchboardv1.CallReport{EndpointId: "a/m", Outcome: switchboardv1.Outcome_OUTCOME_OK, PromptTokens: 40000, Stream: stream,
			Ttft: durationpb.New(time.Second), Duration: durationpb.New(3 * time.Second),
			Usage: &switchboardv1.Usage{InputTokens: 40000, OutputTokens: 101, Reported: true}}
	}
	ob.Ingest(nil, []*switchboardv1.CallReport{ok(false)})
	_, n, _ := st.TTFT("a/m", tokens.Bucket32KTo128K)
	require.Zero(t, n, "a non-streamed answer arrives whole: its ttft is when the last token came")
	_, n, _ = st.Throughput("a/m")
	require.Zero(t, n, "a non-streamed answer says nothing of output speed")
	ob.Ingest(nil, []*switchboardv1.CallReport{ok(true)})
	ttft, n, _ := st.TTFT("a/m", tokens.Bucket32KTo128K)
	require.Equal(t, time.Second, ttft)
	require.Equal(t, 1, n)
	tps, _, _ := st.Throughput("a/m")
	require.InDelta(t, 50, tps, 1e-9, "100 tokens after the first in 2 s")

	// A refusal benches the endpoint, for at least Retry-After, believed up
	// to provheaders.MaxRetryAfter, and tells every edge.
	ob.Ingest(nil, []*switchboardv1.CallReport{{EndpointId: "a/m", Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: durationpb.New(time.Hour)}})
	until, cooling := cool.Until("a/m", now.Add(10*time.Minute))
	require.True(t, cooling)
	require.Equal(t, now.Add(provheaders.MaxRetryAfter), until)
	require.Len(t, sent, 1)
	require.Equal(t, "a/m", sent[0].GetCooldown().GetEndpointId())

	// Unknown endpoints grow nothing.
	ob.Ingest(nil, []*switchboardv1.CallReport{{EndpointId: "evil/x", Outcome: switchboardv1.Outcome_OUTCOME_OK, Ttft: durationpb.New(time.Second)}})
	require.Equal(t, int64(1), ob.Unknown())

	// Probes are priced at the catalog's rates and accounted.
	ob.Ingest(nil, []*switchboardv1.CallReport{{EndpointId: "a/m", ProbeId: "p1", Outcome: switchboardv1.Outcome_OUTCOME_OK,
		Usage: &switchboardv1.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}}})
	probes, usd := ob.ProbeCost()
	require.Equal(t, int64(1), probes)
	require.InDelta(t, 3.0, usd, 1e-9)

}

func TestIngestOutcomes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	oc := outcomes.New(outcomes.Config{Now: clock})
	ob := New(Options{
		Catalog: fakeCatalog{}.current, Stats: stats.New(stats.Config{Now: clock}), Affinity: affinity.New(affinity.Options{}),
		Cooldown: cooldown.New(cooldown.Options{}), Outcomes: oc,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock,
	})
	rep := func(o switchboardv1.Outcome, quality ...string) *switchboardv1.CallReport {
		return &switchboardv1.CallReport{EndpointId: "a/m", Outcome: o, Stream: true, QualityFailures: quality,
			Ttft: durationpb.New(time.Second), Duration: durationpb.New(4 * time.Second),
			Usage: &switchboardv1.Usage{InputTokens: 1000, CachedInputTokens: 500, OutputTokens: 200, Reported: true}}
	}
	limited := rep(switchboardv1.Outcome_OUTCOME_RATE_LIMITED)
	limited.RetryAfter = durationpb.New(30 * time.Second)
	ob.Ingest(nil, []*switchboardv1.CallReport{
		rep(switchboardv1.Outcome_OUTCOME_OK),
		rep(switchboardv1.Outcome_OUTCOME_OK, "malformed_tool_call"),
		limited,
		rep(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR),
		rep(switchboardv1.Outcome_OUTCOME_TIMEOUT),
		rep(switchboardv1.Outcome_OUTCOME_DROPPED),
		rep(switchboardv1.Outcome_OUTCOME_CANCELLED),
		rep(switchboardv1.Outcome_OUTCOME_CLIENT_ERROR),
	})
	f := oc.Endpoint("a/m").Read(now)
	require.InDelta(t, 6, f.Calls, 1e-9, "cancelled calls and 4xx say nothing of the endpoint")
	require.InDelta(t, 1, f.RateLimited, 1e-9)
	require.Equal(t, now.Add(30*time.Second), f.PausedUntil, "the 429's Retry-After")
	require.InDelta(t, 3, f.Failed, 1e-9, "5xx, timeout and dropped stream")
	require.InDelta(t, 1, f.Poor, 1e-9)
	per, ok := f.ChargedPerCall()
	require.True(t, ok)
	require.InDelta(t, (500*1+500*0.5+200*2)/1e6, per, 1e-12, "the fake catalog's rates: 1 in, 0.5 cached, 2 out")
	tps, _ := f.Throughput()
	require.InDelta(t, 50, tps, 1e-9, "200 tokens over the whole 4 s call")
}

// TestSessionsFollowTheAnsweringEndpoint: the endpoint that answered a named
// conversation's turn is where its prompt is cached now; a failed call
// moves nothing.
func TestSessionsFollowTheAnsweringEndpoint(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	sessions := session.New(session.Options{})
	ob := New(Options{
		Catalog: fakeCatalog{}.current, Stats: stats.New(stats.Config{Now: clock}), Affinity: affinity.New(affinity.Options{}),
		Sessions: sessions, Cooldown: cooldown.New(cooldown.Options{}),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock,
	})
	sessions.Keep("acme", "m", "s", "r1", "b/m", now)
	ob.Ingest(nil, []*switchboardv1.CallReport{{RequestId: "r1", EndpointId: "a/m", Outcome: switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR}})
	ep, _, _ := sessions.Last("acme", "m", "s")
	require.Equal(t, "b/m", ep, "a failed call moves nothing")
	now = now.Add(time.Second)
	ob.Ingest(nil, []*switchboardv1.CallReport{{RequestId: "r1", EndpointId: "a/m", Outcome: switchboardv1.Outcome_OUTCOME_OK}})
	ep, at, _ := sessions.Last("acme", "m", "s")
	require.Equal(t, "a/m", ep)
	require.Equal(t, now, at)
}

// TestRequestFailureBenchesNothing: a failure the edge charged to the
// request (it failed the same way on another endpoint) benches nothing,
// tells no edge, and counts nothing against the endpoint.
func TestRequestFailureBenchesNothing(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	cool := cooldown.New(cooldown.FirstRefusal)
	oc := outcomes.New(outcomes.Config{Now: clock})
	var sent []*switchboardv1.ReportResponse
	ob := New(Options{
		Catalog: fakeCatalog{}.current, Stats: stats.New(stats.Config{Now: clock}), Affinity: affinity.New(affinity.Options{}),
		Cooldown: cool, Outcomes: oc, Broadcast: func(m *switchboardv1.ReportResponse) { sent = append(sent, m) },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock,
	})
	for _, o := range []switchboardv1.Outcome{switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, switchboardv1.Outcome_OUTCOME_RATE_LIMITED,
		switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, switchboardv1.Outcome_OUTCOME_CLIENT_ERROR} {
		ob.Ingest(nil, []*switchboardv1.CallReport{{EndpointId: "a/m", Outcome: o, HttpStatus: 500, RequestFailure: true,
			RetryAfter: durationpb.New(time.Minute)}})
	}
	_, cooling := cool.Until("a/m", now)
	require.False(t, cooling, "the request's failure benches nothing")
	require.Empty(t, sent, "and tells no edge")
	require.Zero(t, cool.Benched()+cool.Paused())
	f := oc.Endpoint("a/m").Read(now)
	require.Zero(t, f.Calls+f.Failed+f.RateLimited, "nothing is counted against the endpoint")

	// The same report without the mark benches it, as before.
	ob.Ingest(nil, []*switchboardv1.CallReport{{EndpointId: "a/m", Outcome: switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, HttpStatus: 500}})
	_, cooling = cool.Until("a/m", now)
	require.True(t, cooling)
	require.Len(t, sent, 1)
}

// TestIngestRecordsPrefixes: a served call's prefixes (the tool block, the
// system prompt, each message boundary) are recorded for its endpoint with
// their token counts, so a new question after the same system prompt is
// priced with that endpoint's cache; a failed call's and a probe's are not.
func TestIngestRecordsPrefixes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	aff := affinity.New(affinity.Options{})
	ob := New(Options{
		Catalog: fakeCatalog{}.current, Stats: stats.New(stats.Config{Now: clock}), Affinity: aff, Cooldown: cooldown.New(cooldown.Options{}),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock,
	})
	prefixes := []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 300}, {Hash: 2, Tokens: 20000}, {Hash: 3, Tokens: 20100}}
	served := func(o switchboardv1.Outcome, probe string) *switchboardv1.CallReport {
		return &switchboardv1.CallReport{EndpointId: "a/m", Outcome: o, ProbeId: probe, PromptTokens: 20100, PromptHash: 3, Prefixes: prefixes,
			Ttft: durationpb.New(time.Second), Usage: &switchboardv1.Usage{InputTokens: 20100, Reported: true}}
	}
	question := []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 300}, {Hash: 2, Tokens: 20000}, {Hash: 9, Tokens: 20050}}
	cached := make([]int64, 1)

	ob.Ingest(nil, []*switchboardv1.CallReport{served(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, ""), served(switchboardv1.Outcome_OUTCOME_OK, "p1")})
	aff.Cached([]string{"a/m"}, question, now, cached)
	require.Equal(t, []int64{0}, cached, "neither a failed call nor a probe holds the prompt")

	ob.Ingest(nil, []*switchboardv1.CallReport{served(switchboardv1.Outcome_OUTCOME_OK, "")})
	aff.Cached([]string{"a/m"}, question, now, cached)
	require.Equal(t, []int64{20000}, cached, "the shared system prompt, with its own size")
	require.Equal(t, 3, aff.Len())
}

// TestFirstTokenOnlyWhereObserved: six long non-streamed answers beside
// streams move neither the endpoint's first-token figure nor its
// throughput, while still counting in its outcomes; a probe's first token
// counts, streamed or not (it asks for a handful of tokens).
func TestFirstTokenOnlyWhereObserved(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	st := stats.New(stats.Config{Now: clock})
	oc := outcomes.New(outcomes.Config{Now: clock})
	ob := New(Options{
		Catalog: fakeCatalog{}.current, Stats: st, Affinity: affinity.New(affinity.Options{}), Cooldown: cooldown.New(cooldown.Options{}),
		Outcomes: oc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock,
	})
	call := func(stream bool, probe string, ttft, d time.Duration, out int64) *switchboardv1.CallReport {
		return &switchboardv1.CallReport{EndpointId: "a/m", Outcome: switchboardv1.Outcome_OUTCOME_OK, PromptTokens: 2000, Stream: stream,
			ProbeId: probe, Ttft: durationpb.New(ttft), Duration: durationpb.New(d),
			Usage: &switchboardv1.Usage{InputTokens: 2000, OutputTokens: out, Reported: true}}
	}
	for range 3 {
		ob.Ingest(nil, []*switchboardv1.CallReport{call(true, "", 200*time.Millisecond, 1200*time.Millisecond, 101)})
	}
	for range 6 {
		// The edge's ttft of a non-streamed call: its whole duration.
		ob.Ingest(nil, []*switchboardv1.CallReport{call(false, "", 2200*time.Millisecond, 2200*time.Millisecond, 200)})
	}
	ttft, n, _ := st.TTFT("a/m", tokens.BucketUnder8K)
	require.Equal(t, 200*time.Millisecond, ttft)
	require.Equal(t, 3, n)
	tps, n, _ := st.Throughput("a/m")
	require.InDelta(t, 100, tps, 1e-9)
	require.Equal(t, 3, n)
	require.InDelta(t, 9, oc.Endpoint("a/m").Read(now).Calls, 1e-9, "the non-streamed calls still count in the outcomes")

	ob.Ingest(nil, []*switchboardv1.CallReport{call(false, "p1", 300*time.Millisecond, 300*time.Millisecond, 8)})
	_, n, _ = st.TTFT("a/m", tokens.BucketUnder8K)
	require.Equal(t, 4, n, "a non-streamed probe's first token counts")
	ob.Ingest(nil, []*switchboardv1.CallReport{call(true, "p2", 300*time.Millisecond, 370*time.Millisecond, 8)})
	_, n, _ = st.TTFT("a/m", tokens.BucketUnder8K)
	require.Equal(t, 5, n)
	_, n, _ = st.Throughput("a/m")
	require.Equal(t, 4, n, "a streamed probe measures throughput")
}

// An edge's three reports of a 87,600-hour Retry-After bench the endpoint
// for provheaders.MaxRetryAfter, not until 2036.
func TestRetryAfterIsCapped(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	cool := cooldown.New(cooldown.Options{})
	var sent []*switchboardv1.ReportResponse
	ob := New(Options{Catalog: fakeCatalog{}.current, Stats: stats.New(stats.Config{Now: clock}), Affinity: affinity.New(affinity.Options{}), Cooldown: cool,
		Broadcast: func(m *switchboardv1.ReportResponse) { sent = append(sent, m) },
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock})
	refusal := &switchboardv1.CallReport{EndpointId: "a/m", Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: durationpb.New(87_600 * time.Hour)}
	ob.Ingest(&switchboardv1.EdgeHello{EdgeId: "edge-1"}, []*switchboardv1.CallReport{refusal, refusal, refusal})
	until, cooling := cool.Until("a/m", now)
	require.True(t, cooling)
	require.Equal(t, now.Add(provheaders.MaxRetryAfter), until)
	for _, m := range sent {
		require.False(t, m.GetCooldown().GetUntil().AsTime().After(now.Add(provheaders.MaxRetryAfter)), "no edge is told longer")
	}
}

// Timing no provider produces adds no speed sample and is counted: a first
// token 1 ms after a 40k-token uncached prompt (an endpoint made to look
// fast), 100k tokens/s, a first token after the end, a call of a week.
func TestImplausibleTimingIsDropped(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	report := func(edit func(r *switchboardv1.CallReport)) *switchboardv1.CallReport {
		r := &switchboardv1.CallReport{EndpointId: "a/m", Outcome: switchboardv1.Outcome_OUTCOME_OK, PromptTokens: 40000, Stream: true,
			Ttft: durationpb.New(time.Second), Duration: durationpb.New(3 * time.Second),
			Usage: &switchboardv1.Usage{InputTokens: 40000, OutputTokens: 101, Reported: true}}
		edit(r)
		return r
	}
	tests := []struct {
		name      string
		edit      func(r *switchboardv1.CallReport)
		plausible bool
		ttft      bool // the first token is believed, only the speed is not
	}{
		{name: "an ordinary stream", edit: func(*switchboardv1.CallReport) {}, plausible: true},
		{name: "a fast first token after a cached prompt", edit: func(r *switchboardv1.CallReport) {
			r.Ttft = durationpb.New(5 * time.Millisecond)
			r.Usage.CachedInputTokens = 39500
		}, plausible: true},
		{name: "a fast first token after a short prompt", edit: func(r *switchboardv1.CallReport) {
			r.Ttft, r.PromptTokens, r.Usage.InputTokens = durationpb.New(5*time.Millisecond), 20, 20
		}, plausible: true},
		{name: "1 ms after 40k uncached tokens", edit: func(r *switchboardv1.CallReport) { r.Ttft = durationpb.New(time.Millisecond) }},
		{name: "33 ms is believed", edit: func(r *switchboardv1.CallReport) { r.Ttft = durationpb.New(33 * time.Millisecond) }, plausible: true},
		{name: "100k tokens/s", edit: func(r *switchboardv1.CallReport) { r.Usage.OutputTokens = 200_001 }, ttft: true},
		{name: "first token after the end", edit: func(r *switchboardv1.CallReport) { r.Ttft = durationpb.New(4 * time.Second) }},
		{name: "a week-long call", edit: func(r *switchboardv1.CallReport) { r.Duration = durationpb.New(7 * 24 * time.Hour) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := stats.New(stats.Config{Now: clock})
			ob := New(Options{Catalog: fakeCatalog{}.current, Stats: st, Affinity: affinity.New(affinity.Options{}), Cooldown: cooldown.New(cooldown.Options{}),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock})
			r := report(tt.edit)
			ob.Ingest(&switchboardv1.EdgeHello{EdgeId: "edge-1"}, []*switchboardv1.CallReport{r})
			_, n, _ := st.TTFT("a/m", tokens.BucketOf(r.GetPromptTokens()))
			if tt.plausible {
				require.Equal(t, 1, n)
				require.Zero(t, ob.Implausible())
				return
			}
			if tt.ttft {
				require.Equal(t, 1, n, "the first token is believed")
			} else {
				require.Zero(t, n, "no TTFT sample")
			}
			_, n, _ = st.Throughput("a/m")
			require.Zero(t, n, "no throughput sample")
			require.Equal(t, int64(1), ob.Implausible())
		})
	}
}

// TestIngestSharedLearnsButCountsOnce: a batch another replica shares
// teaches what the replica's own would (speed, a cool-down told to its
// edges), but what the replica that took it counts (probe cost, unknown
// endpoints, implausible timings) is not counted again.
func TestIngestSharedLearnsButCountsOnce(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	st := stats.New(stats.Config{Now: clock})
	cool := cooldown.New(cooldown.FirstRefusal)
	var sent []*switchboardv1.ReportResponse
	ob := New(Options{
		Catalog: fakeCatalog{}.current, Stats: st, Affinity: affinity.New(affinity.Options{}), Cooldown: cool,
		Broadcast: func(m *switchboardv1.ReportResponse) { sent = append(sent, m) },
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock,
	})
	edge := &switchboardv1.EdgeHello{EdgeId: "edge-of-another-replica", Region: "eu-west"}
	ob.IngestShared(edge, []*switchboardv1.CallReport{
		{EndpointId: "a/m", Outcome: switchboardv1.Outcome_OUTCOME_OK, PromptTokens: 40000, Stream: true,
			Ttft: durationpb.New(time.Second), Duration: durationpb.New(3 * time.Second),
			Usage: &switchboardv1.Usage{InputTokens: 40000, OutputTokens: 101, Reported: true}},
		{EndpointId: "a/m", Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED},
		{EndpointId: "evil/x", Outcome: switchboardv1.Outcome_OUTCOME_OK},
		{EndpointId: "a/m", ProbeId: "p1", Outcome: switchboardv1.Outcome_OUTCOME_OK, Usage: &switchboardv1.Usage{InputTokens: 1000, OutputTokens: 10}},
		{EndpointId: "a/m", Outcome: switchboardv1.Outcome_OUTCOME_OK, Stream: true, Ttft: durationpb.New(time.Hour), Duration: durationpb.New(time.Second)},
	})
	_, n, _ := st.TTFT("a/m", tokens.Bucket32KTo128K)
	require.Equal(t, 1, n, "the shared stream's first token is a sample")
	_, n, _ = st.TTFTIn("a/m", st.Region("eu-west"), tokens.Bucket32KTo128K)
	require.Equal(t, 1, n, "and a sample of the region of the edge that measured it")
	_, cooling := cool.Until("a/m", now)
	require.True(t, cooling, "the shared refusal benches the endpoint")
	require.Len(t, sent, 1, "and this replica's edges are told")
	probes, usd := ob.ProbeCost()
	require.Zero(t, probes)
	require.Zero(t, usd)
	require.Zero(t, ob.Unknown())
	require.Zero(t, ob.Implausible())
}
