package anthropic

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFromChat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		req  Request
		want string
	}{
		{
			name: "text, cached tokens out of input_tokens",
			in: `{"id":"gen-1","model":"vendor/m","provider":"alpha","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],
				"usage":{"prompt_tokens":100,"completion_tokens":7,"total_tokens":107,"prompt_tokens_details":{"cached_tokens":60},"cost":0.1}}`,
			want: `{"id":"msg_abc","type":"message","role":"assistant","model":"vendor/m","content":[{"type":"text","text":"hello"}],
				"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":40,"output_tokens":7,"cache_creation_input_tokens":0,"cache_read_input_tokens":60}}`,
		},
		{
			name: "tool calls, cache writes",
			in: `{"id":"gen-1","model":"vendor/m","choices":[{"message":{"role":"assistant","content":"let me look","tool_calls":[
				{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"p\":\"a\"}"}},
				{"type":"function","function":{"name":"ls","arguments":""}}]},"finish_reason":"tool_calls"}],
				"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2,"cache_write_tokens":5}}}`,
			want: `{"id":"msg_abc","type":"message","role":"assistant","model":"vendor/m","content":[{"type":"text","text":"let me look"},
				{"type":"tool_use","id":"call_1","name":"read","input":{"p":"a"}},{"type":"tool_use","id":"toolu_abc_1","name":"ls","input":{}}],
				"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":3,"cache_creation_input_tokens":5,"cache_read_input_tokens":2}}`,
		},
		{
			name: "length is max_tokens; no usage; model from the request",
			in:   `{"choices":[{"message":{"content":"abc"},"finish_reason":"length"}]}`,
			req:  Request{Model: "asked"},
			want: `{"id":"msg_abc","type":"message","role":"assistant","model":"asked","content":[{"type":"text","text":"abc"}],
				"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`,
		},
		{
			name: "a named stop string the client asked for is stop_sequence",
			in:   `{"model":"m","choices":[{"message":{"content":""},"finish_reason":"stop","stop_reason":"END"}]}`,
			req:  Request{StopSequences: []string{"END"}},
			want: `{"id":"msg_abc","type":"message","role":"assistant","model":"m","content":[],
				"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`,
		},
		{
			name: "reasoning is a thinking block when thinking was asked for",
			in:   `{"model":"m","choices":[{"message":{"content":"42","reasoning_content":"let me think"},"finish_reason":"stop"}]}`,
			req:  Request{Thinking: true},
			want: `{"id":"msg_abc","type":"message","role":"assistant","model":"m","content":[{"type":"thinking","thinking":"let me think","signature":""},{"type":"text","text":"42"}],
				"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`,
		},
		{
			name: "reasoning is dropped when thinking was not asked for",
			in:   `{"model":"m","choices":[{"message":{"content":"42","reasoning":"let me think"},"finish_reason":"stop"}]}`,
			want: `{"id":"msg_abc","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"42"}],
				"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`,
		},
		{
			name: "arguments that are no object are kept under arguments",
			in:   `{"model":"m","choices":[{"message":{"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{\"p\":"}}]},"finish_reason":"stop"}]}`,
			want: `{"id":"msg_abc","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"c","name":"f","input":{"arguments":"{\"p\":"}}],
				"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := FromChat([]byte(tt.in), "gen-abc", tt.req)
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(out))
		})
	}
	_, err := FromChat([]byte(`{"choices":[]}`), "gen-abc", Request{})
	require.Error(t, err)
}

func TestFromChatError(t *testing.T) {
	body := func(typ, code, msg string) []byte {
		return []byte(`{"error":{"message":"` + msg + `","type":"` + typ + `","param":null,"code":"` + code + `"}}`)
	}
	tests := []struct {
		name       string
		status     int
		body       []byte
		wantStatus int
		wantType   string
		wantMsg    string
	}{
		{"bad request", 400, []byte(`{"error":{"message":"must be a string","type":"invalid_request_error","param":"model","code":null}}`), 400, "invalid_request_error", "model: must be a string"},
		{"bad key", 401, body("invalid_request_error", "invalid_api_key", "invalid API key"), 401, "authentication_error", "invalid API key"},
		{"forbidden", 403, body("permission_error", "permission_denied", "no"), 403, "permission_error", "no"},
		{"unknown model", 404, body("invalid_request_error", "model_not_found", "no model x"), 404, "not_found_error", "no model x"},
		{"too large", 413, body("invalid_request_error", "request_too_large", "big"), 413, "request_too_large", "big"},
		{"rate limited", 429, body("rate_limit_error", "rate_limit_exceeded", "slow down"), 429, "rate_limit_error", "slow down"},
		{"provider paused", 503, body("server_error", "provider_paused", "paused"), StatusOverloaded, "overloaded_error", "paused"},
		{"no provider", 503, body("server_error", "no_available_provider", "none"), StatusOverloaded, "overloaded_error", "none"},
		{"upstream failed", 502, body("upstream_error", "bad_gateway", "boom"), 502, "api_error", "boom"},
		{"decider timeout", 504, body("timeout_error", "decider_timeout", "late"), 504, "timeout_error", "late"},
		{"internal", 500, body("server_error", "internal_error", "internal error"), 500, "api_error", "internal error"},
		{"not JSON", 500, []byte("oops"), 500, "api_error", "oops"},
		{"empty", http.StatusMethodNotAllowed, nil, http.StatusMethodNotAllowed, "invalid_request_error", http.StatusText(http.StatusMethodNotAllowed)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := FromChatError(tt.status, tt.body)
			require.Equal(t, Error{Status: tt.wantStatus, Type: tt.wantType, Message: tt.wantMsg}, e)
			require.JSONEq(t, `{"type":"error","error":{"type":"`+tt.wantType+`","message":"`+tt.wantMsg+`"}}`, string(e.JSON()))
		})
	}
}
