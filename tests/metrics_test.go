package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// chatUsage is the usage an OpenAI chat answer carries: the body's, or a
// stream's usage chunk.
func chatUsage(t *testing.T, body []byte) (prompt, completion float64) {
	t.Helper()
	var u struct {
		Usage *struct {
			PromptTokens     float64 `json:"prompt_tokens"`
			CompletionTokens float64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if !strings.HasPrefix(string(body), "data: ") {
		require.NoError(t, json.Unmarshal(body, &u), "%s", body)
		require.NotNil(t, u.Usage, "%s", body)
		return u.Usage.PromptTokens, u.Usage.CompletionTokens
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		require.NoError(t, json.Unmarshal([]byte(data), &u), data)
		if u.Usage != nil {
			return u.Usage.PromptTokens, u.Usage.CompletionTokens
		}
	}
	require.Fail(t, "no usage chunk", "%s", body)
	return 0, 0
}

// Four chats through the real decider, edge and provider simulator, two of
// them streamed: the edge's /metrics, scraped and parsed, counts the four,
// sums the tokens the simulator reported, times the first chunk of the two
// streams, has no request in flight afterwards, carries the Go runtime's
// and the process's metrics, and no label holds the client's key or a
// request id.
func TestEdgeMetricsAfterChats(t *testing.T) {
	s := startSystem(t, "--debug-listen=127.0.0.1:0")
	var prompt, completion float64
	var ids []string
	for i, stream := range []bool{false, true, false, true} {
		body := `{"model":"` + model + `","max_tokens":8,"messages":[{"role":"user","content":"metrics ` + string(rune('a'+i)) + `"}]}`
		if stream {
			body = strings.Replace(body, `{`, `{"stream":true,"stream_options":{"include_usage":true},`, 1)
		}
		status, header, raw := s.send(t, testKey, http.MethodPost, "/chat/completions", body)
		require.Equal(t, http.StatusOK, status, "%s", raw)
		p, c := chatUsage(t, raw)
		require.Positive(t, p)
		prompt, completion = prompt+p, completion+c
		ids = append(ids, header.Get("X-Switchboard-Request-Id"), header.Get("X-Request-Id"))
	}

	fams := scrape(t, s.edge.DebugAddr())
	sum := func(name string, want map[string]string) total { t.Helper(); return sumOf(t, fams, name, want) }
	require.InDelta(t, 4, sum("switchboard_edge_requests_total", map[string]string{"api": "chat", "status_class": "2xx"}).value, 0)
	in := sum("gen_ai_client_token_usage", map[string]string{"gen_ai_token_type": "input"})
	require.Equal(t, uint64(4), in.count)
	require.InDelta(t, prompt, in.sum, 0, "the simulator's prompt tokens")
	out := sum("gen_ai_client_token_usage", map[string]string{"gen_ai_token_type": "output"})
	require.InDelta(t, completion, out.sum, 0, "the simulator's completion tokens")
	require.Equal(t, uint64(4), sum("gen_ai_client_operation_duration_seconds", nil).count)
	require.Equal(t, uint64(2), sum("gen_ai_client_operation_time_to_first_chunk_seconds", nil).count, "the two streams")
	require.Zero(t, sum("switchboard_edge_requests_in_flight", nil).value)
	for _, name := range []string{"go_goroutines", "go_gc_duration_seconds", "process_cpu_seconds_total"} {
		require.Contains(t, fams, name)
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				for _, secret := range append([]string{testKey}, ids...) {
					if secret != "" {
						require.NotContains(t, l.GetValue(), secret, "%s{%s}", name, l.GetName())
					}
				}
			}
		}
	}
}

// scrape reads a debug listener's /metrics, parsed.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	return fams
}

// total is what the series of a metric add up to.
type total struct {
	value, sum float64 // a counter's or gauge's value; a histogram's sum
	count      uint64  // a histogram's sample count
}

// sumOf adds up the series of name whose labels include want: a route
// reason or a provider may split one figure over several series. At least
// one series must match.
func sumOf(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) total {
	t.Helper()
	var tot total
	n := 0
	for _, m := range fams[name].GetMetric() {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		n++
		tot.value += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		tot.sum += m.GetHistogram().GetSampleSum()
		tot.count += m.GetHistogram().GetSampleCount()
	}
	require.Positive(t, n, "%s%v in %v", name, want, fams[name].GetMetric())
	return tot
}

// requireHedgeAndRetryMetrics checks the edge's and the decider's metrics
// after TestTraceOfHedgedAndRetriedRequests's requests — four warm-up calls,
// a hedge race (its loser cancelled), a hedged request whose two legs
// failed and a third provider served — against what the simulator counted
// and the decider's hedge budget says.
func requireHedgeAndRetryMetrics(t *testing.T, s *stack) {
	t.Helper()
	const calls, requests = 9, 6 // warm-ups 4, the race 2, the retried request 3
	var ok int64
	for _, c := range s.waitCalls(t, calls) {
		ok += c.Outcomes.OK
	}
	var edge map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		edge = scrape(t, s.edge.DebugAddr())
		return sumOf(t, edge, "switchboard_edge_request_attempts", nil).count == requests &&
			sumOf(t, edge, "switchboard_edge_report_unacked", nil).value == 0
	}, waitFor, tick, "the requests measured, the Report stream acknowledged")
	started := sumOf(t, edge, "switchboard_edge_hedges_total", map[string]string{"event": "started"}).value
	require.InDelta(t, 2, started, 0)
	require.InDelta(t, 1, sumOf(t, edge, "switchboard_edge_hedges_total", map[string]string{"event": "won"}).value, 0)
	require.InDelta(t, 1, sumOf(t, edge, "switchboard_edge_hedges_total", map[string]string{"event": "cancelled"}).value, 0)
	require.InDelta(t, calls, sumOf(t, edge, "switchboard_edge_request_attempts", nil).sum+started, 0,
		"the simulator's calls: the requests' attempts and their hedge legs")
	ttft := sumOf(t, edge, "switchboard_edge_provider_time_to_first_token_seconds", nil)
	require.EqualValues(t, ok, ttft.count, "a first token per call the simulator completed")
	require.EqualValues(t, 3, sumOf(t, edge, "switchboard_edge_provider_time_to_first_token_seconds", map[string]string{"bucket": "32k-128k"}).count,
		"alpha's and beta's warm-ups, beta's winning hedge")
	require.Len(t, edge["switchboard_edge_provider_time_to_first_token_seconds"].GetMetric(), 5,
		"by endpoint and bucket: alpha and beta in both, gamma over 128k")
	require.Positive(t, sumOf(t, edge, "switchboard_edge_cost_usd_total", map[string]string{"payer": "tenant", "tenant": "acme"}).value)
	require.Positive(t, sumOf(t, edge, "switchboard_edge_cost_usd_total", map[string]string{"payer": "hedge_budget"}).value)

	// The decider: its hedge budget, its broker, the reports' lag.
	var dec map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		dec = scrape(t, s.decider.DebugAddr())
		return s.decider.ReportsReceived() == calls &&
			sumOf(t, dec, "switchboard_hedge_settlements_total", map[string]string{"loser": "cancelled"}).value == 1
	}, waitFor, tick, "every call reported, the race's loser settled")
	spent, daily, granted, refused := s.decider.HedgeBudget()
	require.EqualValues(t, 2, granted)
	require.InDelta(t, float64(granted), sumOf(t, dec, "switchboard_hedge_decisions_total", map[string]string{"result": "granted"}).value, 0)
	require.InDelta(t, float64(refused), sumOf(t, dec, "switchboard_hedge_decisions_total", map[string]string{"result": "refused"}).value, 0)
	require.InDelta(t, daily-spent, sumOf(t, dec, "switchboard_hedge_budget_remaining_usd", nil).value, 1e-9)
	require.InDelta(t, 1, sumOf(t, dec, "switchboard_broker_owner", nil).value, 0)
	require.InDelta(t, 1, sumOf(t, dec, "switchboard_broker_ownership_changes_total", nil).value, 0)
	require.EqualValues(t, calls, sumOf(t, dec, "switchboard_report_lag_seconds", nil).count, "every call report's lag")
}
