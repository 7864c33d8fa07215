package responses

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFromChat(t *testing.T) {
	_, req, err := ToChat([]byte(`{"model":"vendor/m","input":"hi","instructions":"be brief","max_output_tokens":64,"temperature":0.2,
		"tools":[{"type":"function","name":"read","parameters":{"type":"object"}}],"tool_choice":"required","parallel_tool_calls":false,
		"reasoning":{"effort":"low"},"store":false,"metadata":{"k":"v"},"user":"u","text":{"format":{"type":"json_object"}}}`))
	require.NoError(t, err)
	req.CreatedAt = 1700000000
	tests := []struct {
		name, in, want string
	}{
		{
			name: "reasoning, text and two tool calls, with usage and cost",
			in: `{"id":"gen-abc","model":"vendor/m","provider":"alpha","choices":[{"message":{"role":"assistant","content":"Let me look.",
				"reasoning_content":"thinking","tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"p\":1}"}},
				{"type":"function","function":{"name":"read","arguments":"{}"}}]},"finish_reason":"tool_calls"}],
				"usage":{"prompt_tokens":30,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":20},"completion_tokens_details":{"reasoning_tokens":3},"cost":0.0001}}`,
			want: `{"id":"resp_abc","object":"response","created_at":1700000000,"status":"completed","background":false,"error":null,
				"incomplete_details":null,"instructions":"be brief","max_output_tokens":64,"model":"vendor/m","output":[
				{"id":"rs_abc_0","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"thinking"}]},
				{"id":"msg_abc_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Let me look.","annotations":[],"logprobs":[]}]},
				{"id":"fc_abc_2","type":"function_call","status":"completed","call_id":"call_1","name":"read","arguments":"{\"p\":1}"},
				{"id":"fc_abc_3","type":"function_call","status":"completed","call_id":"call_abc_3","name":"read","arguments":"{}"}],
				"parallel_tool_calls":false,"previous_response_id":null,"prompt_cache_key":null,"reasoning":{"effort":"low","summary":null},
				"store":false,"temperature":0.2,"text":{"format":{"type":"json_object"}},"tool_choice":"required",
				"tools":[{"type":"function","name":"read","parameters":{"type":"object"},"strict":false}],"top_p":null,"truncation":"disabled",
				"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":20},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":39,"cost":0.0001},
				"user":"u","metadata":{"k":"v"},"provider":"alpha"}`,
		},
		{
			name: "cut at max_output_tokens, no usage",
			in:   `{"model":"","choices":[{"message":{"content":"Hi"},"finish_reason":"length"}]}`,
			want: `{"id":"resp_abc","object":"response","created_at":1700000000,"status":"incomplete","background":false,"error":null,
				"incomplete_details":{"reason":"max_output_tokens"},"instructions":"be brief","max_output_tokens":64,"model":"vendor/m","output":[
				{"id":"msg_abc_0","type":"message","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"Hi","annotations":[],"logprobs":[]}]}],
				"parallel_tool_calls":false,"previous_response_id":null,"prompt_cache_key":null,"reasoning":{"effort":"low","summary":null},
				"store":false,"temperature":0.2,"text":{"format":{"type":"json_object"}},"tool_choice":"required",
				"tools":[{"type":"function","name":"read","parameters":{"type":"object"},"strict":false}],"top_p":null,"truncation":"disabled",
				"usage":null,"user":"u","metadata":{"k":"v"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromChat([]byte(tt.in), "gen-abc", req)
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(got))
		})
	}
	_, err = FromChat([]byte(`{"choices":[]}`), "gen-abc", req)
	require.Error(t, err)
}

func TestWriterBody(t *testing.T) {
	t.Run("an answer is held until Finish", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := NewWriter(rec, "gen-abc")
		w.SetRequest(Request{Model: "m"}, 3)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, err := w.Write([]byte(`{"model":"m","choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`))
		require.NoError(t, err)
		require.NoError(t, http.NewResponseController(w).Flush())
		require.Empty(t, rec.Body.String())
		w.Finish()
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), `"object":"response"`)
	})
	t.Run("an error keeps its status and headers; its param is renamed", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := NewWriter(rec, "gen-abc")
		w.SetRequest(Request{Model: "m"}, 3)
		w.Header().Set("Retry-After", "3")
		w.Header().Set("X-Should-Retry", "true")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, err := w.Write([]byte(`{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`))
		require.NoError(t, err)
		w.Finish()
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.Equal(t, "3", rec.Header().Get("Retry-After"))
		require.Equal(t, "true", rec.Header().Get("X-Should-Retry"))
		require.JSONEq(t, `{"error":{"message":"too long","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`, rec.Body.String())
	})
	t.Run("an error of the translation is not renamed", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := NewWriter(rec, "gen-abc")
		w.WriteHeader(http.StatusBadRequest)
		_, err := w.Write([]byte(`{"error":{"message":"Unknown parameter: 'max_tokens'.","type":"invalid_request_error","param":"max_tokens","code":"unknown_parameter"}}`))
		require.NoError(t, err)
		w.Finish()
		require.Equal(t, http.StatusBadRequest, rec.Code)
		require.Contains(t, rec.Body.String(), `"param":"max_tokens"`)
	})
	t.Run("an answer that cannot be read is a 502", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := NewWriter(rec, "gen-abc")
		_, err := w.Write([]byte(`not json`))
		require.NoError(t, err)
		w.Finish()
		require.Equal(t, http.StatusBadGateway, rec.Code)
		require.JSONEq(t, `{"error":{"message":"the provider's answer could not be translated","type":"server_error","param":null,"code":"bad_gateway"}}`, rec.Body.String())
	})
	t.Run("an error body that is not OpenAI's becomes one", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := NewWriter(rec, "gen-abc")
		w.WriteHeader(http.StatusBadGateway)
		_, err := w.Write([]byte("upstream broke"))
		require.NoError(t, err)
		w.Finish()
		require.JSONEq(t, `{"error":{"message":"upstream broke","type":"server_error","param":null,"code":null}}`, rec.Body.String())
	})
}

func TestParam(t *testing.T) {
	for in, want := range map[string]string{
		"messages": "input", "messages[3].content": "input", "max_tokens": "max_output_tokens",
		"max_completion_tokens": "max_output_tokens", "response_format.json_schema": "text.format.json_schema",
		"temperature": "temperature", "model": "model", "messagesx": "messagesx", "provider.sort": "provider.sort",
	} {
		require.Equal(t, want, Param(in), in)
	}
}
