package responses

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
)

func TestToChat(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "a string input",
			in:   `{"model":"vendor/m","input":"hello"}`,
			want: `{"model":"vendor/m","messages":[{"role":"user","content":"hello"}]}`,
		},
		{
			name: "instructions, options and a stream",
			in: `{"model":"vendor/m","instructions":"be brief","input":"hi","stream":true,"max_output_tokens":100,"temperature":0.5,
				"top_p":0.9,"user":"u1","store":false,"metadata":{"k":"v"},"include":["reasoning.encrypted_content"],"prompt_cache_key":"c1",
				"service_tier":"auto","truncation":"disabled","reasoning":{"effort":"high","summary":"auto"},"provider":{"sort":"price"}}`,
			want: `{"model":"vendor/m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],
				"stream":true,"stream_options":{"include_usage":true},"max_tokens":100,"temperature":0.5,"top_p":0.9,"user":"u1",
				"reasoning_effort":"high","provider":{"sort":"price"}}`,
		},
		{
			name: "an unknown reasoning effort is dropped, never an error",
			in:   `{"model":"m","input":"hi","reasoning":{"effort":"extreme"}}`,
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		},
		{
			name: "a tool turn: calls join the assistant message, outputs are tool messages, reasoning dropped",
			in: `{"model":"m","tools":[{"type":"function","name":"read","description":"reads","parameters":{"type":"object"},"strict":true},
				{"type":"web_search_preview"}],"tool_choice":{"type":"function","name":"read"},"parallel_tool_calls":false,"input":[
				{"role":"developer","content":"dev"},
				{"type":"message","role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"https://x/i.png","detail":"high"}]},
				{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"xyz"},
				{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"ok","annotations":[]}]},
				{"type":"function_call","id":"fc_1","call_id":"c1","name":"read","arguments":"{\"p\":1}","status":"completed"},
				{"type":"function_call","call_id":"c2","name":"read","arguments":""},
				{"type":"function_call_output","call_id":"c1","output":"one"},
				{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"two"},{"type":"input_image","image_url":"data:image/png;base64,AA"}]},
				{"type":"function_call","call_id":"c3","name":"read","arguments":"{}"},
				{"type":"function_call_output","call_id":"c3","output":"three"}]}`,
			want: `{"model":"m","messages":[
				{"role":"system","content":"dev"},
				{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://x/i.png","detail":"high"}}]},
				{"role":"assistant","content":"ok","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"p\":1}"}},
					{"id":"c2","type":"function","function":{"name":"read","arguments":"{}"}}]},
				{"role":"tool","content":"one","tool_call_id":"c1"},
				{"role":"tool","content":"two","tool_call_id":"c2"},
				{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}}]},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c3","type":"function","function":{"name":"read","arguments":"{}"}}]},
				{"role":"tool","content":"three","tool_call_id":"c3"}],
				"tools":[{"type":"function","function":{"name":"read","description":"reads","parameters":{"type":"object"},"strict":true}}],
				"tool_choice":{"type":"function","function":{"name":"read"}},"parallel_tool_calls":false}`,
		},
		{
			name: "only web search tools: no tools, and tool_choice auto is not sent",
			in:   `{"model":"m","input":"hi","tools":[{"type":"web_search"}],"tool_choice":"auto"}`,
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		},
		{
			name: "Codex CLI's namespace of sub-agent tools is dropped, its function tools kept",
			in: `{"model":"m","input":"hi","tool_choice":"auto","tools":[
				{"type":"function","name":"exec_command","strict":false,"parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}},
				{"type":"namespace","name":"multi_agent_v1","description":"Sub-agents","tools":[{"type":"function","name":"close_agent",
					"parameters":{"type":"object","properties":{}}}]},
				{"type":"web_search","external_web_access":true}]}`,
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"auto",
				"tools":[{"type":"function","function":{"name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}},"strict":false}}]}`,
		},
		{
			name: "json_schema",
			in: `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"},"strict":true},
				"verbosity":"low"}}`,
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}],
				"response_format":{"type":"json_schema","json_schema":{"name":"out","schema":{"type":"object"},"strict":true}}}`,
		},
		{
			name: "json_object, and null fields",
			in:   `{"model":"m","input":"hi","text":{"format":{"type":"json_object"}},"previous_response_id":null,"conversation":null,"background":false}`,
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}}`,
		},
		{
			name: "a message without a type, a system message, a refusal",
			in: `{"model":"m","input":[{"role":"system","content":[{"type":"input_text","text":"s"}]},{"role":"user","content":"q"},
				{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}]}`,
			want: `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"assistant","content":"no"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, req, err := ToChat([]byte(tt.in))
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(out))
			require.NotEmpty(t, req.Model)
			_, err = chatreq.Parse(out)
			require.NoError(t, err, "the chat parser accepts the translation")
		})
	}
}

func TestToChatRequest(t *testing.T) {
	_, req, err := ToChat([]byte(`{"model":"m","input":"hi","stream":true,"prompt_cache_key":"conv-1","max_output_tokens":32,
		"tools":[{"type":"function","name":"f"}],"metadata":{"a":"b"},"reasoning":{"effort":"low"},"store":false,"instructions":"i"}`))
	require.NoError(t, err)
	require.True(t, req.Stream)
	require.Equal(t, "conv-1", req.PromptCacheKey)
	require.Equal(t, int64(32), *req.echo.MaxOutputTokens)
	require.Equal(t, "low", *req.echo.Effort)
	require.Equal(t, "i", *req.echo.Instructions)
	require.False(t, req.echo.Store)
	require.True(t, req.echo.ParallelToolCalls)
	require.Equal(t, map[string]string{"a": "b"}, req.echo.Metadata)
	require.Len(t, req.echo.Tools, 1)
}

func TestToChatErrors(t *testing.T) {
	tests := []struct {
		name, in, param, code string
	}{
		{"not an object", `[]`, "", chatreq.CodeInvalidJSON},
		{"not JSON", `{"model":`, "", chatreq.CodeInvalidJSON},
		{"no model", `{"input":"hi"}`, "model", chatreq.CodeMissing},
		{"a model not a string", `{"model":1,"input":"hi"}`, "model", chatreq.CodeInvalidType},
		{"no input", `{"model":"m"}`, "input", chatreq.CodeMissing},
		{"input of the wrong type", `{"model":"m","input":3}`, "input", chatreq.CodeInvalidType},
		{"an item not an object", `{"model":"m","input":["x"]}`, "input[0]", chatreq.CodeInvalidType},
		{"an unknown parameter", `{"model":"m","input":"hi","max_tokens":10}`, "max_tokens", "unknown_parameter"},
		{"previous_response_id", `{"model":"m","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id", chatreq.CodeUnsupportedValue},
		{"conversation", `{"model":"m","input":"hi","conversation":{"id":"conv_1"}}`, "conversation", chatreq.CodeUnsupportedValue},
		{"a stored prompt", `{"model":"m","input":"hi","prompt":{"id":"pmpt_1"}}`, "prompt", chatreq.CodeUnsupportedValue},
		{"background", `{"model":"m","input":"hi","background":true}`, "background", chatreq.CodeUnsupportedValue},
		{"max_output_tokens below 16", `{"model":"m","input":"hi","max_output_tokens":15}`, "max_output_tokens", chatreq.CodeIntegerBelowMin},
		{"max_output_tokens too large", `{"model":"m","input":"hi","max_output_tokens":9999999999}`, "max_output_tokens", chatreq.CodeIntegerAboveMax},
		{"max_output_tokens not an integer", `{"model":"m","input":"hi","max_output_tokens":1.5}`, "max_output_tokens", chatreq.CodeInvalidType},
		{"a role", `{"model":"m","input":[{"role":"robot","content":"x"}]}`, "input[0].role", chatreq.CodeInvalidValue},
		{"an item type", `{"model":"m","input":[{"type":"local_shell_call","call_id":"c"}]}`, "input[0].type", chatreq.CodeUnsupportedValue},
		{"an item reference", `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0].type", chatreq.CodeUnsupportedValue},
		{"a part type", `{"model":"m","input":[{"role":"user","content":[{"type":"input_audio"}]}]}`, "input[0].content[0].type", chatreq.CodeUnsupportedValue},
		{"a file image", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"file_1"}]}]}`, "input[0].content[0].file_id", chatreq.CodeUnsupportedValue},
		{"an assistant image", `{"model":"m","input":[{"role":"assistant","content":[{"type":"input_image","image_url":"u"}]}]}`, "input[0].content[0].type", chatreq.CodeInvalidValue},
		{"a call without call_id", `{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0].call_id", chatreq.CodeMissing},
		{"a call's name", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"a b","arguments":"{}"}]}`, "input[0].name", chatreq.CodeInvalidValue},
		{"an output without output", `{"model":"m","input":[{"type":"function_call_output","call_id":"c"}]}`, "input[0].output", chatreq.CodeMissing},
		{"a hosted tool", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"},{"type":"code_interpreter"}]}`, "tools[1].type", chatreq.CodeUnsupportedValue},
		{"a custom tool", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"apply_patch"}]}`, "tools[0].type", chatreq.CodeUnsupportedValue},
		{"a tool's name", `{"model":"m","input":"hi","tools":[{"type":"function","name":""}]}`, "tools[0].name", chatreq.CodeInvalidValue},
		{"a tool's parameters", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":[]}]}`, "tools[0].parameters", chatreq.CodeInvalidType},
		{"tool_choice names no tool", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, "tool_choice.name", chatreq.CodeInvalidValue},
		{"tool_choice required without tools", `{"model":"m","input":"hi","tool_choice":"required"}`, "tool_choice", chatreq.CodeInvalidValue},
		{"tool_choice of a hosted tool", `{"model":"m","input":"hi","tool_choice":{"type":"file_search"}}`, "tool_choice.type", chatreq.CodeUnsupportedValue},
		{"tool_choice unknown", `{"model":"m","input":"hi","tool_choice":"always"}`, "tool_choice", chatreq.CodeInvalidValue},
		{"text.format type", `{"model":"m","input":"hi","text":{"format":{"type":"xml"}}}`, "text.format.type", chatreq.CodeInvalidValue},
		{"json_schema without name", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","schema":{}}}}`, "text.format.name", chatreq.CodeMissing},
		{"json_schema without schema", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"n"}}}`, "text.format.schema", chatreq.CodeMissing},
		{"metadata not strings", `{"model":"m","input":"hi","metadata":{"a":1}}`, "metadata", chatreq.CodeInvalidType},
		{"stream not a boolean", `{"model":"m","input":"hi","stream":"yes"}`, "stream", chatreq.CodeInvalidType},
		{"prompt_cache_key not a string", `{"model":"m","input":"hi","prompt_cache_key":1}`, "prompt_cache_key", chatreq.CodeInvalidType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ToChat([]byte(tt.in))
			var perr *chatreq.Error
			require.True(t, errors.As(err, &perr), "%v", err)
			require.Equal(t, tt.param, perr.Param, perr.Message)
			require.Equal(t, tt.code, perr.Code, perr.Message)
			require.NotEmpty(t, perr.Message)
		})
	}
}

// TestToChatDeterministic: a conversation's next turn translates to a
// chat request whose prompt extends the last one's, as prompt hashes need.
func TestToChatDeterministic(t *testing.T) {
	turn1 := `{"model":"m","instructions":"i","input":[{"role":"user","content":"a"}]}`
	turn2 := `{"model":"m","instructions":"i","input":[{"role":"user","content":"a"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]},{"role":"user","content":"c"}]}`
	parse := func(body string) *chatreq.Request {
		out, _, err := ToChat([]byte(body))
		require.NoError(t, err)
		req, err := chatreq.Parse(out)
		require.NoError(t, err)
		return req
	}
	a, again, b := parse(turn1), parse(turn1), parse(turn2)
	require.Equal(t, a.PromptHash, again.PromptHash)
	var found bool
	for _, p := range b.Prefixes {
		found = found || p.GetHash() == a.PromptHash
	}
	require.True(t, found, "turn 1's prompt is a prefix of turn 2's")
}
