package app

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// A response that names a fallback model is counted by that model, once
// the handler has answered; one that does not is not counted.
func TestFallbackServedCounted(t *testing.T) {
	m, err := telemetry.NewMetrics("switchboard-edge", "v0", true)
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Shutdown(t.Context())) }()
	none := func() int { return 0 }
	em, err := newEdgeMetrics(m, reportBacklog{activityBatches: none, reconciles: none})
	require.NoError(t, err)
	h := em.handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fb := r.URL.Query().Get("fallback"); fb != "" {
			w.Header().Set(headerFallbackModel, fb)
		}
		w.WriteHeader(http.StatusOK)
	}))
	for _, q := range []string{"?fallback=vendor/small", "?fallback=vendor/small", "", "?fallback=%22bad%20model%22"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/chat/completions"+q, nil))
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	require.Contains(t, body, `switchboard_edge_fallback_served_total{model="vendor/small"} 2`)
	require.Contains(t, body, `switchboard_edge_fallback_served_total{model="other"} 1`, "a value that is no model id is not a label")
}

// The edge's debug listener serves its metrics; the API port does not.
func TestMetricsOnDebugListener(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.DebugListen = ":0" })
	resp, err := h.client.Get("http://" + h.edge.DebugAddr() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `target_info{service_name="switchboard-edge"`)

	resp, err = h.client.Get("http://" + h.edge.Addr() + "/metrics")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.NotEqual(t, http.StatusOK, resp.StatusCode, "the API port serves no metrics")
}

// scrape reads the edge's /metrics from its debug listener and parses it.
func scrape(t *testing.T, h *harness) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := h.client.Get("http://" + h.edge.DebugAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// series returns a family's series whose labels include want.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			ok = ok && labels[k] == v
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// counterSum adds up the counters (or gauges) of the matching series.
func counterSum(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var sum float64
	for _, m := range series(fams, name, want) {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}

// histogramTotals adds up the sample counts and sums of the matching series.
func histogramTotals(fams map[string]*dto.MetricFamily, name string, want map[string]string) (count uint64, sum float64) {
	for _, m := range series(fams, name, want) {
		count += m.GetHistogram().GetSampleCount()
		sum += m.GetHistogram().GetSampleSum()
	}
	return count, sum
}

// Real requests through the edge, by all three client APIs, streamed and
// not, one of them retried after the first provider's 429: the scraped
// metrics count each request once, sum the tokens the provider reported,
// time the first chunk of each streamed call, count the retry and the 429,
// are back to no request in flight, carry the Go runtime's and the
// process's metrics, and no label holds a request id or a key.
func TestRequestMetricsScraped(t *testing.T) {
	h := newHarness(t, 2, func(c *Config) { c.DebugListen = ":0" })
	const body = `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
	const streamed = `{"model":"` + model + `","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	var ids []string
	ok := func(r reply) {
		t.Helper()
		require.Equal(t, http.StatusOK, r.status, r.body)
		ids = append(ids, r.header.Get("X-Switchboard-Request-Id"))
	}
	ok(h.chat(body, authed()))
	ok(h.chat(streamed, authed()))
	ok(h.chat(streamed, authed()))
	ok(h.do(t.Context(), http.MethodPost, "/v1/messages",
		`{"model":"`+model+`","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`, authed()))
	ok(h.do(t.Context(), http.MethodPost, "/v1/responses", `{"model":"`+model+`","input":"hi"}`, authed()))
	h.ups[0].SetMode(fakeupstream.RateLimited)
	ok(h.chat(body, authed())) // alpha answers 429, beta serves it
	h.ups[0].SetMode(fakeupstream.Unavailable)
	h.ups[1].SetMode(fakeupstream.Unavailable)
	failed := h.chat(body, authed()) // both answer 503: the request fails
	require.GreaterOrEqual(t, failed.status, 500, failed.body)
	h.ups[0].SetMode(fakeupstream.OK)
	h.ups[1].SetMode(fakeupstream.OK)
	const served, streams = 6, 2

	var input, output, cached int64
	for _, id := range ids {
		require.NotEmpty(t, id)
		u := h.waitRecord(id).GetUsage()
		input, output, cached = input+u.GetInputTokens(), output+u.GetOutputTokens(), cached+u.GetCachedInputTokens()
	}
	require.Equal(t, int64(served*fakeupstream.PromptTokens), input, "the provider's usage, as billed")
	require.Equal(t, int64(served*fakeupstream.CompletionTokens), output)

	fams := scrape(t, h)
	require.InDelta(t, 4, counterSum(fams, "switchboard_edge_requests_total", map[string]string{"api": "chat", "status_class": "2xx", "route_reason": "cheapest_qualifying"}), 0)
	require.InDelta(t, 1, counterSum(fams, "switchboard_edge_requests_total", map[string]string{"api": "chat", "status_class": "5xx"}), 0)
	var sum float64
	n, _ := histogramTotals(fams, "gen_ai_client_operation_duration_seconds", map[string]string{"error_type": strconv.Itoa(failed.status), "gen_ai_provider_name": "beta"})
	require.Equal(t, uint64(1), n, "the failure, by the status it was answered with and the last provider tried")
	require.InDelta(t, 1, counterSum(fams, "switchboard_edge_upstream_errors_total", map[string]string{"endpoint": h.eps[1].GetId(), "status": "5xx"}), 0)
	require.InDelta(t, 1, counterSum(fams, "switchboard_edge_requests_total", map[string]string{"api": "messages", "status_class": "2xx"}), 0)
	require.InDelta(t, 1, counterSum(fams, "switchboard_edge_requests_total", map[string]string{"api": "responses", "status_class": "2xx"}), 0)

	genAI := map[string]string{"gen_ai_operation_name": "chat", "gen_ai_request_model": model, "gen_ai_response_model": model}
	n, sum = histogramTotals(fams, "gen_ai_client_token_usage", map[string]string{"gen_ai_token_type": "input", "gen_ai_operation_name": "chat", "gen_ai_response_model": model})
	require.Equal(t, uint64(served), n)
	require.InDelta(t, float64(input), sum, 0)
	n, sum = histogramTotals(fams, "gen_ai_client_token_usage", map[string]string{"gen_ai_token_type": "output"})
	require.Equal(t, uint64(served), n)
	require.InDelta(t, float64(output), sum, 0)
	require.InDelta(t, float64(cached), counterSum(fams, "switchboard_edge_cache_tokens_total", map[string]string{"type": "cache_read"}), 0)
	require.Len(t, series(fams, "gen_ai_client_token_usage", map[string]string{"gen_ai_provider_name": "beta"}), 2, "the retried request: input and output, by the provider that served it")

	n, _ = histogramTotals(fams, "gen_ai_client_operation_duration_seconds", genAI)
	require.Equal(t, uint64(served), n)
	n, _ = histogramTotals(fams, "gen_ai_client_operation_time_to_first_chunk_seconds", genAI)
	require.Equal(t, uint64(streams), n, "one first chunk per streamed call")

	require.InDelta(t, 1, counterSum(fams, "switchboard_edge_upstream_errors_total", map[string]string{"endpoint": h.eps[0].GetId(), "status": "429"}), 0)
	attempts := series(fams, "switchboard_edge_request_attempts", nil)
	require.Len(t, attempts, 1)
	require.Equal(t, uint64(served+1), attempts[0].GetHistogram().GetSampleCount())
	require.InDelta(t, served+1+2, attempts[0].GetHistogram().GetSampleSum(), 0, "one retry, and the failure's two endpoints")
	require.Positive(t, counterSum(fams, "switchboard_edge_cost_usd_total", map[string]string{"tenant": "acme", "model": model}))

	inFlight := fams["switchboard_edge_requests_in_flight"]
	require.NotNil(t, inFlight)
	hpa, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "k8s", "overlays", "production", "edge-hpa.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(hpa), "name: "+inFlight.GetName(), "the name the production HorizontalPodAutoscaler reads")
	require.Equal(t, dto.MetricType_GAUGE, inFlight.GetType())
	require.InDelta(t, 0, counterSum(fams, "switchboard_edge_requests_in_flight", nil), 0)

	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "go_gc_duration_seconds", "process_cpu_seconds_total"} {
		require.Contains(t, fams, name)
	}

	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				for _, secret := range append([]string{clientKey, clientKeyHash(), "key-1", providerKey("alpha"), providerKey("beta")}, ids...) {
					require.NotContains(t, l.GetValue(), secret, "%s{%s}", name, l.GetName())
				}
			}
		}
	}
}

// While a stream is open it is counted in flight.
func TestStreamCountedInFlight(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.DebugListen = ":0" })
	gate := make(chan struct{})
	h.ups[0].SetGate(gate)
	done := make(chan reply, 1)
	go func() {
		done <- h.chat(`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"hi"}]}`, authed())
	}()
	<-h.ups[0].Arrived()
	require.InDelta(t, 1, counterSum(scrape(t, h), "switchboard_edge_requests_in_flight", nil), 0)
	close(gate)
	require.Equal(t, http.StatusOK, (<-done).status)
	require.InDelta(t, 0, counterSum(scrape(t, h), "switchboard_edge_requests_in_flight", nil), 0)
}

// A hedged request whose hedge wins is counted as started, won and its
// slow primary cancelled.
func TestHedgeMetrics(t *testing.T) {
	h := newHarness(t, 2, func(c *Config) {
		c.DebugListen = ":0"
		c.FirstTokenTimeout, c.IdleTimeout = longWait, longWait
	})
	h.fd.SetDecide(func(req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
		resp := h.decision(req)
		resp.Hedge = &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, Delay: durationpb.New(time.Millisecond), Endpoint: h.eps[1]}
		return resp, nil
	})
	// Granted once the primary reached its provider (see TestChatHedgeDelayed).
	h.fd.SetAcquireHedge(func(ctx context.Context, _ *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error) {
		select {
		case <-h.ups[0].Arrived():
		case <-ctx.Done():
		}
		return &switchboardv1.AcquireHedgeResponse{Granted: true}, nil
	})
	h.ups[0].SetMode(fakeupstream.HangAfterHeaders)
	r := h.chat(streamReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "beta", r.header.Get("X-Switchboard-Provider"))
	rec := h.waitRecord(r.header.Get("X-Switchboard-Request-Id"))
	require.Equal(t, h.eps[0].GetId(), rec.GetHedge().GetLoserEndpointId())

	fams := scrape(t, h)
	for _, event := range []string{"started", "won", "cancelled"} {
		require.InDelta(t, 1, counterSum(fams, "switchboard_edge_hedges_total", map[string]string{"event": event}), 0, event)
	}
	attempts := series(fams, "switchboard_edge_request_attempts", nil)
	require.Len(t, attempts, 1)
	require.InDelta(t, 1, attempts[0].GetHistogram().GetSampleSum(), 0, "the hedge leg is no retry")
	n, _ := histogramTotals(fams, "gen_ai_client_operation_time_to_first_chunk_seconds", map[string]string{"gen_ai_provider_name": "beta"})
	require.Equal(t, uint64(1), n)
}
