package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

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

	resp, err := http.Get("http://" + s.edge.DebugAddr() + "/metrics")
	require.NoError(t, err)
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)

	// total adds up the series of name whose labels include want: a route
	// reason or a provider may split one figure over several series.
	type total struct {
		value, sum float64 // a counter's or gauge's value; a histogram's sum
		count      uint64  // a histogram's sample count
	}
	sum := func(name string, want map[string]string) total {
		t.Helper()
		var tot total
		n := 0
		for _, m := range fams[name].GetMetric() {
			ok := true
			for _, l := range m.GetLabel() {
				if v, asked := want[l.GetName()]; asked && v != l.GetValue() {
					ok = false
				}
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
