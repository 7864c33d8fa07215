package anthropic

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/ssetest"
)

// chatStream frames chat chunks as the edge writes them.
var chatStream = ssetest.Frame

const (
	evStart = "event: message_start\ndata: {\"message\":{\"content\":[],\"id\":\"msg_abc\",\"model\":\"vendor/m\",\"role\":\"assistant\",\"stop_reason\":null,\"stop_sequence\":null,\"type\":\"message\",\"usage\":{\"input_tokens\":12,\"output_tokens\":0,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}},\"type\":\"message_start\"}\n\n" +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n"
	evStop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func TestStreamGolden(t *testing.T) {
	tests := []struct {
		name string
		in   string
		req  Request
		want string
	}{
		{
			name: "text",
			in: chatStream(
				`{"id":"gen-abc","model":"vendor/m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
				`{"id":"gen-abc","model":"vendor/m","choices":[{"index":0,"delta":{"content":"Hel"}}]}`,
				`{"id":"gen-abc","model":"vendor/m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}`,
				`{"id":"gen-abc","model":"vendor/m","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":15}}}`,
				`[DONE]`),
			want: evStart +
				"event: content_block_start\ndata: {\"content_block\":{\"text\":\"\",\"type\":\"text\"},\"index\":0,\"type\":\"content_block_start\"}\n\n" +
				"event: content_block_delta\ndata: {\"delta\":{\"text\":\"Hel\",\"type\":\"text_delta\"},\"index\":0,\"type\":\"content_block_delta\"}\n\n" +
				"event: content_block_delta\ndata: {\"delta\":{\"text\":\"lo\",\"type\":\"text_delta\"},\"index\":0,\"type\":\"content_block_delta\"}\n\n" +
				"event: content_block_stop\ndata: {\"index\":0,\"type\":\"content_block_stop\"}\n\n" +
				"event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"type\":\"message_delta\",\"usage\":{\"input_tokens\":5,\"output_tokens\":2,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":15}}\n\n" +
				evStop,
		},
		{
			name: "text then two tool calls, each its own block",
			in: chatStream(
				`{"model":"vendor/m","choices":[{"delta":{"content":"Let me"}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":""}}]}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"p\":"}}]}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"ls","arguments":"{}"}}]}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":30,"completion_tokens":9}}`,
				`[DONE]`),
			want: evStart +
				"event: content_block_start\ndata: {\"content_block\":{\"text\":\"\",\"type\":\"text\"},\"index\":0,\"type\":\"content_block_start\"}\n\n" +
				"event: content_block_delta\ndata: {\"delta\":{\"text\":\"Let me\",\"type\":\"text_delta\"},\"index\":0,\"type\":\"content_block_delta\"}\n\n" +
				"event: content_block_stop\ndata: {\"index\":0,\"type\":\"content_block_stop\"}\n\n" +
				"event: content_block_start\ndata: {\"content_block\":{\"id\":\"call_a\",\"input\":{},\"name\":\"read\",\"type\":\"tool_use\"},\"index\":1,\"type\":\"content_block_start\"}\n\n" +
				"event: content_block_delta\ndata: {\"delta\":{\"partial_json\":\"{\\\"p\\\":\",\"type\":\"input_json_delta\"},\"index\":1,\"type\":\"content_block_delta\"}\n\n" +
				"event: content_block_delta\ndata: {\"delta\":{\"partial_json\":\"1}\",\"type\":\"input_json_delta\"},\"index\":1,\"type\":\"content_block_delta\"}\n\n" +
				"event: content_block_stop\ndata: {\"index\":1,\"type\":\"content_block_stop\"}\n\n" +
				"event: content_block_start\ndata: {\"content_block\":{\"id\":\"call_b\",\"input\":{},\"name\":\"ls\",\"type\":\"tool_use\"},\"index\":2,\"type\":\"content_block_start\"}\n\n" +
				"event: content_block_delta\ndata: {\"delta\":{\"partial_json\":\"{}\",\"type\":\"input_json_delta\"},\"index\":2,\"type\":\"content_block_delta\"}\n\n" +
				"event: content_block_stop\ndata: {\"index\":2,\"type\":\"content_block_stop\"}\n\n" +
				"event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"type\":\"message_delta\",\"usage\":{\"input_tokens\":30,\"output_tokens\":9,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}}\n\n" +
				evStop,
		},
		{
			name: "an error after the stream began is an error event, and nothing after",
			in: chatStream(
				`{"model":"vendor/m","choices":[{"delta":{"content":"Hi"}}]}`,
				`{"error":{"message":"the provider's stream was interrupted: timeout","type":"upstream_error","code":"stream_interrupted"}}`,
				`[DONE]`),
			want: evStart +
				"event: content_block_start\ndata: {\"content_block\":{\"text\":\"\",\"type\":\"text\"},\"index\":0,\"type\":\"content_block_start\"}\n\n" +
				"event: content_block_delta\ndata: {\"delta\":{\"text\":\"Hi\",\"type\":\"text_delta\"},\"index\":0,\"type\":\"content_block_delta\"}\n\n" +
				"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the provider's stream was interrupted: timeout\"}}\n\n",
		},
		{
			name: "reasoning is a thinking block before the text, when thinking was asked for",
			req:  Request{Thinking: true},
			in: chatStream(
				`{"model":"vendor/m","choices":[{"delta":{"reasoning_content":"hm"}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"reasoning":"m"}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}`,
				`[DONE]`),
			want: evStart +
				"event: content_block_start\ndata: {\"content_block\":{\"signature\":\"\",\"thinking\":\"\",\"type\":\"thinking\"},\"index\":0,\"type\":\"content_block_start\"}\n\n" +
				"event: content_block_delta\ndata: {\"delta\":{\"thinking\":\"hm\",\"type\":\"thinking_delta\"},\"index\":0,\"type\":\"content_block_delta\"}\n\n" +
				"event: content_block_delta\ndata: {\"delta\":{\"thinking\":\"m\",\"type\":\"thinking_delta\"},\"index\":0,\"type\":\"content_block_delta\"}\n\n" +
				"event: content_block_stop\ndata: {\"index\":0,\"type\":\"content_block_stop\"}\n\n" +
				"event: content_block_start\ndata: {\"content_block\":{\"text\":\"\",\"type\":\"text\"},\"index\":1,\"type\":\"content_block_start\"}\n\n" +
				"event: content_block_delta\ndata: {\"delta\":{\"text\":\"ok\",\"type\":\"text_delta\"},\"index\":1,\"type\":\"content_block_delta\"}\n\n" +
				"event: content_block_stop\ndata: {\"index\":1,\"type\":\"content_block_stop\"}\n\n" +
				"event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"type\":\"message_delta\",\"usage\":{\"input_tokens\":12,\"output_tokens\":0,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}}\n\n" +
				evStop,
		},
		{
			name: "reasoning is dropped when thinking was not asked for",
			in: chatStream(
				`{"model":"vendor/m","choices":[{"delta":{"reasoning_content":"hm"}}]}`,
				`{"model":"vendor/m","choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}`,
				`[DONE]`),
			want: evStart +
				"event: content_block_start\ndata: {\"content_block\":{\"text\":\"\",\"type\":\"text\"},\"index\":0,\"type\":\"content_block_start\"}\n\n" +
				"event: content_block_delta\ndata: {\"delta\":{\"text\":\"ok\",\"type\":\"text_delta\"},\"index\":0,\"type\":\"content_block_delta\"}\n\n" +
				"event: content_block_stop\ndata: {\"index\":0,\"type\":\"content_block_stop\"}\n\n" +
				"event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"type\":\"message_delta\",\"usage\":{\"input_tokens\":12,\"output_tokens\":0,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}}\n\n" +
				evStop,
		},
		{
			name: "an empty answer still starts and stops; length is max_tokens",
			in:   chatStream(`{"model":"vendor/m","choices":[{"delta":{},"finish_reason":"length"}]}`, `[DONE]`),
			want: evStart +
				"event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},\"type\":\"message_delta\",\"usage\":{\"input_tokens\":12,\"output_tokens\":0,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}}\n\n" +
				evStop,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Whole, and split at every byte: the events do not depend on
			// how the pipeline's writes cut the stream.
			for _, cut := range []int{0, 1, 7, 50} {
				rec := httptest.NewRecorder()
				rec.Header().Set("Content-Type", "text/event-stream")
				w := NewWriter(rec, "gen-abc")
				w.SetRequest(tt.req, 12)
				w.WriteHeader(http.StatusOK)
				in := tt.in
				for cut > 0 && len(in) > cut {
					_, err := w.Write([]byte(in[:cut]))
					require.NoError(t, err)
					in = in[cut:]
				}
				_, err := w.Write([]byte(in))
				require.NoError(t, err)
				require.NoError(t, http.NewResponseController(w).Flush())
				w.Finish()
				require.Equal(t, tt.want, rec.Body.String(), "cut %d", cut)
				require.True(t, rec.Flushed)
			}
		})
	}
}

func TestWriterStreamCutShort(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "text/event-stream")
	w := NewWriter(rec, "gen-abc")
	w.SetRequest(Request{}, 12)
	w.WriteHeader(http.StatusOK)
	_, err := w.Write([]byte(chatStream(`{"model":"vendor/m","choices":[{"delta":{"content":"Hi"}}]}`)))
	require.NoError(t, err)
	w.Finish()
	require.True(t, strings.HasSuffix(rec.Body.String(),
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the answer's stream ended early\"}}\n\n"), rec.Body.String())
}

func TestWriterBody(t *testing.T) {
	t.Run("answer", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := NewWriter(rec, "gen-abc")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, err := w.Write([]byte(`{"model":"m","choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`))
		require.NoError(t, err)
		require.NoError(t, http.NewResponseController(w).Flush())
		require.Empty(t, rec.Body.String(), "a body is held until Finish")
		w.Finish()
		require.Equal(t, http.StatusOK, rec.Code)
		require.JSONEq(t, `{"id":"msg_abc","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"x"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`, rec.Body.String())
	})
	t.Run("overload error keeps retry-after, becomes 529", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := NewWriter(rec, "gen-abc")
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, err := w.Write([]byte(`{"error":{"message":"paused","type":"server_error","code":"provider_paused"}}`))
		require.NoError(t, err)
		w.Finish()
		require.Equal(t, StatusOverloaded, rec.Code)
		require.Equal(t, "3", rec.Header().Get("Retry-After"))
		require.JSONEq(t, `{"type":"error","error":{"type":"overloaded_error","message":"paused"}}`, rec.Body.String())
	})
	t.Run("an answer that cannot be read is a 502", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := NewWriter(rec, "gen-abc")
		_, err := w.Write([]byte(`not json`))
		require.NoError(t, err)
		w.Finish()
		require.Equal(t, http.StatusBadGateway, rec.Code)
	})
	t.Run("nothing written, nothing answered", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := NewWriter(rec, "gen-abc")
		w.Finish()
		require.Empty(t, rec.Body.String())
	})
}

// deadlineRecorder records the write deadlines set on it.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	deadlines []time.Time
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	d.deadlines = append(d.deadlines, t)
	return nil
}

// TestWriterHeldBodyUnderDeadline: the held answer is written under a
// deadline as long as the one the pipeline wrote it under, then cleared.
func TestWriterHeldBodyUnderDeadline(t *testing.T) {
	rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	w := NewWriter(rec, "gen-abc")
	rc := http.NewResponseController(w)
	require.NoError(t, rc.SetWriteDeadline(time.Now().Add(time.Hour)))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write([]byte(`{"model":"m","choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`))
	require.NoError(t, err)
	require.NoError(t, rc.SetWriteDeadline(time.Time{}))
	w.Finish()
	require.Len(t, rec.deadlines, 4)
	require.WithinDuration(t, time.Now().Add(time.Hour), rec.deadlines[2], 10*time.Minute)
	require.True(t, rec.deadlines[3].IsZero())
	require.Contains(t, rec.Body.String(), `"type":"message"`)
}
