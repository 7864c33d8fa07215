package responses

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/ssetest"
)

// chatStream frames chat chunks as the edge writes them.
var chatStream = ssetest.Frame

// event is one Responses stream event, read back.
type event struct {
	name string
	data map[string]any
}

// events reads a Responses stream back, checking each event's name is
// its data's type and its sequence_number follows the one before from 0.
func events(t *testing.T, stream string) []event {
	t.Helper()
	var out []event
	for ev := range strings.SplitSeq(strings.TrimSuffix(stream, "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(ev, "\n")
		require.True(t, ok, ev)
		name, ok = strings.CutPrefix(name, "event: ")
		require.True(t, ok, ev)
		data, ok = strings.CutPrefix(data, "data: ")
		require.True(t, ok, ev)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &v), data)
		require.Equal(t, name, v["type"], "the event's name is its data's type")
		require.InDelta(t, float64(len(out)), v["sequence_number"], 0, "sequence_number of %s", name)
		out = append(out, event{name: name, data: v})
	}
	return out
}

// summary is a stream's events in one line each: the type and, for the
// item events, the output index and what they carry.
func summary(evs []event) []string {
	var out []string
	for _, ev := range evs {
		s := ev.name
		if i, ok := ev.data["output_index"]; ok {
			s += " " + jsonText(i)
		}
		for _, k := range []string{"delta", "text", "arguments"} {
			if v, ok := ev.data[k]; ok {
				s += " " + k + "=" + jsonText(v)
			}
		}
		if it, ok := ev.data["item"].(map[string]any); ok {
			s += " item=" + jsonText(it["type"]) + "/" + jsonText(it["status"])
		}
		if r, ok := ev.data["response"].(map[string]any); ok {
			s += " status=" + jsonText(r["status"])
		}
		out = append(out, s)
	}
	return out
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// run writes in through a Writer as the pipeline does, cut every cut
// bytes, and returns what the client got.
func run(t *testing.T, req Request, in string, cut int) string {
	t.Helper()
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "text/event-stream")
	w := NewWriter(rec, "gen-abc")
	w.SetRequest(req, 12)
	w.WriteHeader(http.StatusOK)
	for cut > 0 && len(in) > cut {
		_, err := w.Write([]byte(in[:cut]))
		require.NoError(t, err)
		in = in[cut:]
	}
	_, err := w.Write([]byte(in))
	require.NoError(t, err)
	require.NoError(t, http.NewResponseController(w).Flush())
	w.Finish()
	require.True(t, rec.Flushed)
	return rec.Body.String()
}

func TestStreamGolden(t *testing.T) {
	usage := `{"model":"vendor/m","provider":"alpha","choices":[],"usage":{"prompt_tokens":30,"completion_tokens":5,"total_tokens":35,` +
		`"prompt_tokens_details":{"cached_tokens":20},"completion_tokens_details":{"reasoning_tokens":2},"cost":0.000123}}`
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{
			name: "text",
			in: chatStream(`{"model":"vendor/m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
				`{"model":"vendor/m","choices":[{"index":0,"delta":{"content":"Hel"}}]}`,
				`{"model":"vendor/m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}`, usage, `[DONE]`),
			want: []string{
				`response.created status="in_progress"`, `response.in_progress status="in_progress"`,
				`response.output_item.added 0 item="message"/"in_progress"`, `response.content_part.added 0`,
				`response.output_text.delta 0 delta="Hel"`, `response.output_text.delta 0 delta="lo"`,
				`response.output_text.done 0 text="Hello"`, `response.content_part.done 0`, `response.output_item.done 0 item="message"/"completed"`,
				`response.completed status="completed"`,
			},
		},
		{
			name: "reasoning, then text cut at max_output_tokens",
			in: chatStream(`{"model":"vendor/m","choices":[{"delta":{"reasoning_content":"think"}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"reasoning_content":"ing"}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"content":"Hi"},"finish_reason":"length"}]}`, usage, `[DONE]`),
			want: []string{
				`response.created status="in_progress"`, `response.in_progress status="in_progress"`,
				`response.output_item.added 0 item="reasoning"/null`, `response.content_part.added 0`,
				`response.reasoning_text.delta 0 delta="think"`, `response.reasoning_text.delta 0 delta="ing"`,
				`response.reasoning_text.done 0 text="thinking"`, `response.content_part.done 0`, `response.output_item.done 0 item="reasoning"/null`,
				`response.output_item.added 1 item="message"/"in_progress"`, `response.content_part.added 1`, `response.output_text.delta 1 delta="Hi"`,
				`response.output_text.done 1 text="Hi"`, `response.content_part.done 1`, `response.output_item.done 1 item="message"/"incomplete"`,
				`response.incomplete status="incomplete"`,
			},
		},
		{
			name: "text, then parallel tool calls whose deltas interleave",
			in: chatStream(`{"model":"vendor/m","choices":[{"delta":{"content":"Let me look."}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":""}}]}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"list","arguments":"{\"d\":"}}]}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"p\":1}"}}]}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"2}"}}]},"finish_reason":"tool_calls"}]}`,
				usage, `[DONE]`),
			want: []string{
				`response.created status="in_progress"`, `response.in_progress status="in_progress"`,
				`response.output_item.added 0 item="message"/"in_progress"`, `response.content_part.added 0`,
				`response.output_text.delta 0 delta="Let me look."`,
				`response.output_text.done 0 text="Let me look."`, `response.content_part.done 0`, `response.output_item.done 0 item="message"/"completed"`,
				`response.output_item.added 1 item="function_call"/"in_progress"`,
				`response.output_item.added 2 item="function_call"/"in_progress"`, `response.function_call_arguments.delta 2 delta="{\"d\":"`,
				`response.function_call_arguments.delta 1 delta="{\"p\":1}"`, `response.function_call_arguments.delta 2 delta="2}"`,
				`response.function_call_arguments.done 1 arguments="{\"p\":1}"`, `response.output_item.done 1 item="function_call"/"completed"`,
				`response.function_call_arguments.done 2 arguments="{\"d\":2}"`, `response.output_item.done 2 item="function_call"/"completed"`,
				`response.completed status="completed"`,
			},
		},
		{
			name: "a failure after the stream began",
			in: chatStream(`{"model":"vendor/m","choices":[{"delta":{"content":"Hi"}}]}`,
				`{"error":{"message":"the provider's stream broke off","type":"server_error","code":"upstream_error"}}`),
			want: []string{
				`response.created status="in_progress"`, `response.in_progress status="in_progress"`,
				`response.output_item.added 0 item="message"/"in_progress"`, `response.content_part.added 0`,
				`response.output_text.delta 0 delta="Hi"`, `response.failed status="failed"`,
			},
		},
		{
			name: "no chunk but the end",
			in:   chatStream(`[DONE]`),
			want: []string{`response.created status="in_progress"`, `response.in_progress status="in_progress"`, `response.completed status="completed"`},
		},
	}
	req := Request{Model: "vendor/m", CreatedAt: 1700000000}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Whole, and cut anywhere: the events do not depend on how the
			// pipeline's writes cut the stream.
			var first string
			for _, cut := range []int{0, 1, 7, 50} {
				got := run(t, req, tt.in, cut)
				require.Equal(t, tt.want, summary(events(t, got)), "cut %d", cut)
				if cut == 0 {
					first = got
				}
				require.Equal(t, first, got, "cut %d", cut)
			}
		})
	}
}

// TestStreamFinalResponse: the last event carries the whole response:
// its items as their done events said, and the usage with the edge's cost.
func TestStreamFinalResponse(t *testing.T) {
	in := chatStream(`{"model":"vendor/m","provider":"alpha","choices":[{"delta":{"content":"Hi"}}]}`,
		`{"model":"vendor/m","provider":"alpha","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"read","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
		`{"model":"vendor/m","provider":"alpha","choices":[],"usage":{"prompt_tokens":30,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":20},"cost":0.000123}}`,
		`[DONE]`)
	req := Request{Model: "vendor/m", CreatedAt: 1700000000, PromptCacheKey: "conv-1"}
	evs := events(t, run(t, req, in, 0))
	last := evs[len(evs)-1].data["response"]
	require.JSONEq(t, `{"id":"resp_abc","object":"response","created_at":1700000000,"status":"completed","background":false,"error":null,
		"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"vendor/m",
		"output":[{"id":"msg_abc_0","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi","annotations":[],"logprobs":[]}]},
			{"id":"fc_abc_1","type":"function_call","status":"completed","call_id":"call_abc_1","name":"read","arguments":"{}"}],
		"parallel_tool_calls":false,"previous_response_id":null,"prompt_cache_key":"conv-1","reasoning":{"effort":null,"summary":null},
		"store":false,"temperature":null,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":null,"truncation":"disabled",
		"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":20},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":35,"cost":0.000123},
		"user":null,"metadata":{},"provider":"alpha"}`, jsonText(last))
	// The item ids of the events are those of the response.
	for _, ev := range evs {
		if id, ok := ev.data["item_id"]; ok {
			require.Contains(t, []any{"msg_abc_0", "fc_abc_1"}, id)
		}
	}
}

func TestWriterStreamCutShort(t *testing.T) {
	got := run(t, Request{Model: "m"}, chatStream(`{"model":"vendor/m","choices":[{"delta":{"content":"Hi"}}]}`), 0)
	evs := events(t, got)
	last := evs[len(evs)-1]
	require.Equal(t, "response.failed", last.name)
	resp := last.data["response"].(map[string]any)
	require.Equal(t, map[string]any{"code": "server_error", "message": "the answer's stream ended early"}, resp["error"])
	require.Equal(t, "incomplete", resp["output"].([]any)[0].(map[string]any)["status"])
}
