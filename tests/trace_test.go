package tests

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// traced is one client request sent with a traceparent of its own, and the
// spans of its trace.
type traced struct {
	traceID trace.TraceID
	parent  trace.SpanID // the client's span
	status  int
	body    string
}

// sendTraced sends a streamed chat of content with a new traceparent.
func sendTraced(t *testing.T, s *stack, content string) traced {
	t.Helper()
	var tr traced
	_, err := rand.Read(tr.traceID[:])
	require.NoError(t, err)
	_, err = rand.Read(tr.parent[:])
	require.NoError(t, err)
	body := chatReq{content: content, stream: true, includeUsage: true, maxTokens: 4}.body()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.edge.URL()+"/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("traceparent", "00-"+hex.EncodeToString(tr.traceID[:])+"-"+hex.EncodeToString(tr.parent[:])+"-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	tr.status, tr.body = resp.StatusCode, string(raw)
	return tr
}

// spansOf are the ended spans of one trace.
func spansOf(rec *tracetest.SpanRecorder, id trace.TraceID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// spanNames lists spans by kind and name, for a failure's message.
func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, 0, len(spans))
	for _, s := range spans {
		out = append(out, s.SpanKind().String()+" "+s.Name())
	}
	return out
}

// requestSpans are the edge's HTTP server spans among spans, named by
// the route the request took.
func requestSpans(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	return named(spans, "POST /v1/chat/completions", trace.SpanKindServer)
}

func named(spans []sdktrace.ReadOnlySpan, name string, kind trace.SpanKind) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name && s.SpanKind() == kind {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// attemptSpans are a trace's provider-call spans by provider, each checked
// to be a child of the edge's request span.
func attemptSpans(t *testing.T, spans []sdktrace.ReadOnlySpan, request sdktrace.ReadOnlySpan, n int, bucket string) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	calls := named(spans, "chat "+simModel, trace.SpanKindClient)
	require.Len(t, calls, n, "one span per provider call")
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, c := range calls {
		require.Equal(t, request.SpanContext().SpanID(), c.Parent().SpanID(), "siblings under the request's span")
		require.Equal(t, "chat", attrOf(c, "gen_ai.operation.name").AsString())
		require.Equal(t, simModel, attrOf(c, "gen_ai.request.model").AsString())
		require.Equal(t, bucket, attrOf(c, "switchboard.prompt.size_bucket").AsString())
		require.Equal(t, "127.0.0.1", attrOf(c, "server.address").AsString())
		require.NotEmpty(t, attrOf(c, "switchboard.endpoint.id").AsString())
		out[attrOf(c, "gen_ai.provider.name").AsString()] = c
	}
	require.Len(t, out, n, "each on its own provider")
	return out
}

// The trace of a request, from the client's traceparent to every provider
// call and the decider's handling of their reports: a hedge race whose
// loser is cancelled (a delayed hedge), and a hedged request whose two legs both fail and
// that is retried on a third provider. The edge and the decider record into
// one in-memory exporter (their Config.Tracing), through real HTTP and gRPC.
func TestTraceOfHedgedAndRetriedRequests(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	s := startBilling(t, func(c *deciderapp.Config) {
		c.Tracing = telemetry.NewTracing(tp)
		c.HedgeBudgetUSD = 100
		c.HedgeBudgetBurst = 24 * time.Hour
		c.HedgeDelay = 300 * time.Millisecond
		c.DebugListen = "127.0.0.1:0"
	}, "--debug-listen=127.0.0.1:0")
	// Under 128k the hedge leg starts after the hedge delay, so the primary
	// it races has reached its provider by then; over 128k both legs start
	// at once.
	const delayed, size = 40 * 1024, 130 * 1024
	s.warm(t, delayed, "alpha", "beta")
	s.warm(t, size, "alpha", "beta")
	s.waitForHedgePlan(t, delayed, switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, "alpha", "beta")
	s.waitForHedgePlan(t, size, switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, "alpha", "beta")

	// request checks the edge's span of a traced request, a child of the
	// client's span, with Decide under it on both sides of the gRPC call,
	// and returns the trace's spans once the decider handled n reports.
	request := func(t *testing.T, tr traced, n int) ([]sdktrace.ReadOnlySpan, sdktrace.ReadOnlySpan) {
		t.Helper()
		var spans []sdktrace.ReadOnlySpan
		require.Eventually(t, func() bool {
			spans = spansOf(rec, tr.traceID)
			return len(named(spans, "switchboard.report call", trace.SpanKindConsumer)) >= n &&
				len(requestSpans(spans)) == 1
		}, waitFor, tick, "the trace's request span and its %d reports' spans: %v", n, spanNames(spansOf(rec, tr.traceID)))
		edge := requestSpans(spans)[0]
		require.Equal(t, tr.parent, edge.Parent().SpanID(), "the edge's span is the client's span's child")
		require.True(t, edge.Parent().IsRemote())
		const decide = "switchboard.v1.RouterService/Decide"
		client := named(spans, decide, trace.SpanKindClient)
		require.Len(t, client, 1)
		require.Equal(t, edge.SpanContext().SpanID(), client[0].Parent().SpanID(), "Decide under the request")
		server := named(spans, decide, trace.SpanKindServer)
		require.Len(t, server, 1, "the decider's side of Decide, in the same trace")
		require.Equal(t, client[0].SpanContext().SpanID(), server[0].Parent().SpanID())
		return spans, edge
	}
	// reported checks that the decider handled each call's report in a
	// span under the call's.
	reported := func(t *testing.T, spans []sdktrace.ReadOnlySpan, calls map[string]sdktrace.ReadOnlySpan) {
		t.Helper()
		byParent := map[trace.SpanID]sdktrace.ReadOnlySpan{}
		for _, r := range named(spans, "switchboard.report call", trace.SpanKindConsumer) {
			byParent[r.Parent().SpanID()] = r
		}
		for p, c := range calls {
			r, ok := byParent[c.SpanContext().SpanID()]
			require.True(t, ok, "the decider's handling of %s's report is the call span's child", p)
			require.Equal(t, attrOf(c, "switchboard.endpoint.id"), attrOf(r, "switchboard.endpoint.id"))
		}
	}

	t.Run("hedge race: the slow primary's span is cancelled as the loser", func(t *testing.T) {
		slow := fastModel()
		slow.TTFT.Base = provsim.Duration(5 * time.Second)
		require.NoError(t, s.sim.Provider("alpha").SetModel(slow))
		tr := sendTraced(t, s, "traced race "+longPrompt(delayed))
		require.Equal(t, http.StatusOK, tr.status, tr.body)
		require.Contains(t, tr.body, "[DONE]")

		spans, edge := request(t, tr, 2)
		calls := attemptSpans(t, spans, edge, 2, "32k-128k")
		alpha, beta := calls["alpha"], calls["beta"]
		require.False(t, attrOf(alpha, "switchboard.attempt.hedge").AsBool())
		require.Equal(t, "hedge_lost", attrOf(alpha, "switchboard.attempt.outcome").AsString())
		require.Empty(t, alpha.Events(), "no token came from the loser")
		require.True(t, attrOf(beta, "switchboard.attempt.hedge").AsBool())
		require.Equal(t, "ok", attrOf(beta, "switchboard.attempt.outcome").AsString())
		require.Equal(t, simModel, attrOf(beta, "gen_ai.response.model").AsString())
		require.EqualValues(t, 4, attrOf(beta, "gen_ai.usage.output_tokens").AsInt64())
		require.GreaterOrEqual(t, attrOf(beta, "gen_ai.usage.input_tokens").AsInt64(), int64(delayed))
		require.Positive(t, attrOf(beta, "switchboard.attempt.cost_usd").AsFloat64())
		require.Len(t, beta.Events(), 1)
		require.Equal(t, "first_token", beta.Events()[0].Name)
		require.False(t, beta.Events()[0].Time.Before(beta.StartTime()))
		require.Positive(t, attrOf(beta, "switchboard.attempt.time_to_first_token").AsFloat64())
		reported(t, spans, calls)
	})

	t.Run("hedged and retried: both legs fail, a third provider serves", func(t *testing.T) {
		require.NoError(t, s.sim.Provider("alpha").SetModel(fastModel()))
		s.waitForHedgePlan(t, size, switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, "alpha", "beta")
		failing := fastModel()
		failing.Faults = []provsim.FaultConfig{{Kind: provsim.FaultUnavailable, Rate: 1, Status: http.StatusInternalServerError}}
		require.NoError(t, s.sim.Provider("alpha").SetModel(failing))
		limited := fastModel()
		limited.Faults = []provsim.FaultConfig{{Kind: provsim.FaultRateLimit, Rate: 1}}
		require.NoError(t, s.sim.Provider("beta").SetModel(limited))
		gamma0 := s.counts("gamma").Requests

		tr := sendTraced(t, s, "traced retry "+longPrompt(size))
		require.Equal(t, http.StatusOK, tr.status, tr.body)
		require.Eventually(t, func() bool { return s.counts("gamma").Requests == gamma0+1 }, waitFor, tick, "gamma served")

		spans, edge := request(t, tr, 3)
		calls := attemptSpans(t, spans, edge, 3, ">128k")
		alpha, beta, gamma := calls["alpha"], calls["beta"], calls["gamma"]
		require.Equal(t, "upstream_error", attrOf(alpha, "switchboard.attempt.outcome").AsString())
		require.EqualValues(t, 500, attrOf(alpha, "http.response.status_code").AsInt64())
		require.Equal(t, "500", attrOf(alpha, "error.type").AsString())
		require.True(t, attrOf(beta, "switchboard.attempt.hedge").AsBool())
		require.Equal(t, "rate_limited", attrOf(beta, "switchboard.attempt.outcome").AsString())
		require.Equal(t, "429", attrOf(beta, "error.type").AsString())
		require.Equal(t, "ok", attrOf(gamma, "switchboard.attempt.outcome").AsString())
		require.False(t, attrOf(gamma, "switchboard.attempt.hedge").AsBool())
		require.False(t, gamma.StartTime().Before(alpha.EndTime()), "the retry starts once the race is lost")
		// The retry's reservation, asked of the decider under the request.
		reserve := named(spans, "switchboard.v1.RouterService/Reserve", trace.SpanKindClient)
		require.NotEmpty(t, reserve)
		for _, r := range reserve {
			require.Equal(t, edge.SpanContext().SpanID(), r.Parent().SpanID())
		}
		reported(t, spans, calls)
	})

	t.Run("metrics", func(t *testing.T) { requireHedgeAndRetryMetrics(t, s) })
}
