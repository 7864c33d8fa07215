package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	"github.com/switchboard-ai/switchboard/services/provsim/internal/chatapi"
)

// TestToolDirective: [[provsim:tool=NAME]] in the last user message makes
// the reply call NAME, whole or streamed in pieces; once the tool's result
// follows, the reply is text again.
func TestToolDirective(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "", ModelConfig{ID: "m"})
	c := newClient(t)

	body := userMsg("m", "look [[provsim:tool=read_file]] here")
	body["max_tokens"] = 2
	resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, body), nil)
	require.Equal(t, 200, resp.status)
	var got struct {
		Choices []struct {
			Message struct {
				Content   string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Type     string `json:"type"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &got))
	ch := got.Choices[0]
	require.Equal(t, "tool_calls", ch.FinishReason)
	require.Equal(t, "look here ", ch.Message.Content, "the directive is not echoed")
	require.Len(t, ch.Message.ToolCalls, 1)
	require.Equal(t, "read_file", ch.Message.ToolCalls[0].Function.Name)
	require.Equal(t, "function", ch.Message.ToolCalls[0].Type)
	require.NotEmpty(t, ch.Message.ToolCalls[0].ID)
	require.JSONEq(t, `{"word":"look"}`, ch.Message.ToolCalls[0].Function.Arguments)

	body["stream"] = true
	name, args, finish := streamedToolCall(t, c, p.URL(), body)
	require.Equal(t, "read_file", name)
	require.JSONEq(t, `{"word":"look"}`, args)
	require.Equal(t, "tool_calls", finish)

	// The tool's result follows: text again.
	body = map[string]any{"model": "m", "max_tokens": 2, "messages": []any{
		map[string]any{"role": "user", "content": "look [[provsim:tool=read_file]] here"},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "c1", "type": "function",
			"function": map[string]any{"name": "read_file", "arguments": "{}"}}}},
		map[string]any{"role": "tool", "tool_call_id": "c1", "content": "data"},
	}}
	resp = do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, body), nil)
	require.Equal(t, 200, resp.status)
	got.Choices = nil
	require.NoError(t, json.Unmarshal(resp.body, &got))
	require.Equal(t, "length", got.Choices[0].FinishReason)
	require.Empty(t, got.Choices[0].Message.ToolCalls)
}

// streamedToolCall sends body as a stream and returns the tool call it
// streamed, rebuilt from its pieces, and the finish reason.
func streamedToolCall(t *testing.T, c *http.Client, url string, body map[string]any) (name, args, finish string) {
	t.Helper()
	resp := do(t, c, http.MethodPost, url+"/chat/completions", chatBody(t, body), nil)
	require.Equal(t, 200, resp.status, string(resp.body))
	var b strings.Builder
	for _, e := range sseEvents(t, resp.body) {
		if e == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Index    *int `json:"index"`
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(e), &chunk), e)
		for _, tc := range chunk.Choices[0].Delta.ToolCalls {
			require.NotNil(t, tc.Index)
			name += tc.Function.Name
			b.WriteString(tc.Function.Arguments)
		}
		if f := chunk.Choices[0].FinishReason; f != nil {
			finish = *f
		}
	}
	return name, b.String(), finish
}

// completion is the part of a non-streamed reply these tests read.
type completion struct {
	Choices []struct {
		Message struct {
			Content   string `json:"content"`
			ToolCalls []struct {
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

// TestScriptedToolArguments: [[provsim:tool=NAME {...}]] calls NAME with
// exactly that JSON object (compacted), whole or streamed; arguments that
// are not JSON are refused with a 400 that says so.
func TestScriptedToolArguments(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "", ModelConfig{ID: "m"})
	c := newClient(t)
	tests := []struct {
		name, prompt, tool, wantArgs, wantText string
	}{
		{name: "shell command", prompt: `run [[provsim:tool=Bash {"command": "echo hi", "description": "say hi"}]] now`,
			tool: "Bash", wantArgs: `{"command":"echo hi","description":"say hi"}`, wantText: "run now "},
		{name: "brackets inside the JSON", prompt: `[[provsim:tool=shell {"command":["bash","-lc","echo [[x]]"]}]]`,
			tool: "shell", wantArgs: `{"command":["bash","-lc","echo [[x]]"]}`, wantText: "ok ok "},
		{name: "nested object over lines", prompt: "[[provsim:tool=Write {\"file_path\":\"/tmp/a\",\n\"opts\":{\"x\":1}}]]",
			tool: "Write", wantArgs: `{"file_path":"/tmp/a","opts":{"x":1}}`, wantText: "ok ok "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := userMsg("m", tt.prompt)
			body["max_tokens"] = 2
			resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, body), nil)
			require.Equal(t, 200, resp.status, string(resp.body))
			var got completion
			require.NoError(t, json.Unmarshal(resp.body, &got))
			require.Equal(t, "tool_calls", got.Choices[0].FinishReason)
			require.Equal(t, tt.wantText, got.Choices[0].Message.Content, "the directive is not echoed")
			require.Len(t, got.Choices[0].Message.ToolCalls, 1)
			require.Equal(t, tt.tool, got.Choices[0].Message.ToolCalls[0].Function.Name)
			require.Equal(t, tt.wantArgs, got.Choices[0].Message.ToolCalls[0].Function.Arguments)

			body["stream"] = true
			name, args, finish := streamedToolCall(t, c, p.URL(), body)
			require.Equal(t, tt.tool, name)
			require.Equal(t, tt.wantArgs, args)
			require.Equal(t, "tool_calls", finish)
		})
	}

	// A system message after the user's (Claude Code's instructions, in
	// chat form) leaves the user's message the last turn.
	body := map[string]any{"model": "m", "max_tokens": 1, "messages": []any{
		map[string]any{"role": "user", "content": `[[provsim:tool=Read {"file_path":"/a"}]]`},
		map[string]any{"role": "system", "content": "# Environment"},
	}}
	resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, body), nil)
	require.Equal(t, 200, resp.status, string(resp.body))
	var got completion
	require.NoError(t, json.Unmarshal(resp.body, &got))
	require.Len(t, got.Choices[0].Message.ToolCalls, 1)
	require.Equal(t, `{"file_path":"/a"}`, got.Choices[0].Message.ToolCalls[0].Function.Arguments)

	// An agent's large max_tokens does not delay the call: a few words
	// come first, not the whole cap.
	body = userMsg("m", "run it now please [[provsim:tool=Bash {\"command\":\"ls\"}]]")
	body["max_tokens"] = 32000
	resp = do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, body), nil)
	require.Equal(t, 200, resp.status, string(resp.body))
	got = completion{}
	require.NoError(t, json.Unmarshal(resp.body, &got))
	require.Len(t, got.Choices[0].Message.ToolCalls, 1)
	require.LessOrEqual(t, len(strings.Fields(got.Choices[0].Message.Content)), toolPreambleTokens)

	for _, prompt := range []string{`[[provsim:tool=Bash {"command": }]]`, `[[provsim:tool=Bash {"a":1} {"b":2}]]`} {
		resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("m", prompt)), nil)
		require.Equal(t, http.StatusBadRequest, resp.status, prompt)
		e := decodeError(t, resp.body)
		require.Equal(t, "invalid_request_error", e.Type)
		require.Contains(t, e.Message, `tool directive for "Bash"`)
		require.Contains(t, e.Message, "not a JSON object")
	}
}

// TestToolResultReply: once a tool's result is the last message, the reply
// quotes it ("tool result: " and its first 200 characters) and ends the
// turn, unless max_tokens cuts it first.
func TestToolResultReply(t *testing.T) {
	t.Parallel()
	// The model's own length is below the quote's: the quote is whole.
	p := startProvider(t, "", ModelConfig{ID: "m", DefaultOutputTokens: 2})
	c := newClient(t)
	long := strings.Repeat("é", 150) + " " + strings.Repeat("x", 100)
	tests := []struct {
		name, result string
		maxTokens    any
		want, finish string
	}{
		{name: "short result", result: "switchboard-42\n", want: "tool result: switchboard-42 ", finish: "stop"},
		{name: "first 200 characters", result: long, want: "tool result: " + strings.Repeat("é", 150) + " " + strings.Repeat("x", 49) + " ", finish: "stop"},
		{name: "empty result", result: "", want: "tool result: ", finish: "stop"},
		{name: "max_tokens cuts it", result: "a b c d", maxTokens: 3, want: "tool result: a ", finish: "length"},
		{name: "max_tokens above it", result: "a b c d", maxTokens: 100, want: "tool result: a b c d ", finish: "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := map[string]any{"model": "m", "messages": []any{
				map[string]any{"role": "user", "content": `go [[provsim:tool=Bash {"command":"echo"}]]`},
				map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "c1", "type": "function",
					"function": map[string]any{"name": "Bash", "arguments": `{"command":"echo"}`}}}},
				map[string]any{"role": "tool", "tool_call_id": "c1", "content": tt.result},
				// Instructions after the result leave it the last turn.
				map[string]any{"role": "system", "content": "# Environment"},
			}}
			if tt.maxTokens != nil {
				body["max_tokens"] = tt.maxTokens
			}
			resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, body), nil)
			require.Equal(t, 200, resp.status, string(resp.body))
			var got completion
			require.NoError(t, json.Unmarshal(resp.body, &got))
			require.Equal(t, tt.want, got.Choices[0].Message.Content)
			require.Equal(t, tt.finish, got.Choices[0].FinishReason)
			require.Empty(t, got.Choices[0].Message.ToolCalls)
			require.Equal(t, int64(len(strings.Fields(tt.want))), got.Usage.CompletionTokens)
		})
	}
}

// FuzzToolDirective: no prompt makes the directive parser panic, and what
// it accepts as arguments is always one compact JSON object.
func FuzzToolDirective(f *testing.F) {
	for _, s := range []string{`[[provsim:tool=Bash {"command":"echo hi"}]]`, `[[provsim:tool=x]]`, `[[provsim:tool=x {]]`,
		`[[provsim:tool=x {"a":"}]]"}]]`, `[[provsim:tool=x {} {}]]`, "[[provsim:tool=x {\n}]]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, prompt string) {
		name, args, err := toolDirective(chatapi.Request{Messages: []tokens.Message{{Role: "user", Content: prompt}}})
		if err != nil {
			require.Empty(t, name)
			return
		}
		if args != nil {
			require.NotEmpty(t, name)
			var obj map[string]any
			require.NoError(t, json.Unmarshal(args, &obj), "%s", args)
			require.NotContains(t, string(args), "\n")
		}
		words, _ := replyWords(chatapi.Request{Messages: []tokens.Message{{Role: "user", Content: prompt}}})
		require.NotEmpty(t, words)
	})
}
