package dispatch

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/quality"
)

// TestQualityFailuresReported: the answer-quality checks run on what the
// edge relays, and the call's report names the ones it failed.
func TestQualityFailuresReported(t *testing.T) {
	const toolsBody = `{"model":"org/model","stream":true,"max_tokens":500,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`
	const toolsPlainBody = `{"model":"org/model","max_tokens":500,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`
	usage := `{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":%d}}`
	tests := []struct {
		name   string
		body   string
		answer []string // stream events, or the non-streamed answer
		want   []string
	}{
		{
			name: "a good stream",
			body: toolsBody,
			answer: []string{
				`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\""}}]}}]}`,
				`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"}]}`,
				fmt.Sprintf(usage, 8), "[DONE]",
			},
		},
		{
			name: "a malformed streamed tool call",
			body: toolsBody,
			answer: []string{
				`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\""}}]},"finish_reason":"tool_calls"}]}`,
				fmt.Sprintf(usage, 4), "[DONE]",
			},
			want: []string{quality.NameMalformedToolCall},
		},
		{
			name:   "an empty stream",
			body:   toolsBody,
			answer: []string{`{"choices":[{"delta":{"content":""},"finish_reason":"stop"}]}`, fmt.Sprintf(usage, 0), "[DONE]"},
			want:   []string{quality.NameEmpty},
		},
		{
			name:   "a stream ended without a finish_reason",
			body:   toolsBody,
			answer: []string{`{"choices":[{"delta":{"content":"Hel"}}]}`, fmt.Sprintf(usage, 1), "[DONE]"},
			want:   []string{quality.NameTruncated},
		},
		{
			name:   "cut by the provider below max_tokens",
			body:   toolsBody,
			answer: []string{`{"choices":[{"delta":{"content":"Hel"},"finish_reason":"length"}]}`, fmt.Sprintf(usage, 100), "[DONE]"},
			want:   []string{quality.NameTruncated},
		},
		{
			name:   "a malformed non-streamed tool call",
			body:   toolsPlainBody,
			answer: []string{`{"id":"x","choices":[{"message":{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{oops"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":4}}`},
			want:   []string{quality.NameMalformedToolCall},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if !strings.Contains(tt.body, `"stream":true`) {
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(tt.answer[0]))
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				for _, ev := range tt.answer {
					_, _ = fmt.Fprintf(w, "data: %s\n\n", ev)
				}
			}))
			defer up.Close()
			rec := &recorder{}
			d := newDispatcher(rec, nil)
			call := newCall(t, tt.body)
			call.Quality = quality.Request{Tools: true, MaxTokens: 500}
			w := httptest.NewRecorder()
			require.NoError(t, d.Serve(t.Context(), w, call, []*switchboardv1.Endpoint{endpoint("alpha", up.URL+"/v1")}))
			reports := rec.all()
			require.Len(t, reports, 1)
			require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, reports[0].GetOutcome())
			require.Equal(t, tt.want, reports[0].GetQualityFailures())
		})
	}
}
