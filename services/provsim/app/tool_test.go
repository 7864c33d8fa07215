package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
	resp = do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, body), nil)
	require.Equal(t, 200, resp.status)
	var args strings.Builder
	var name, finish string
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
			args.WriteString(tc.Function.Arguments)
		}
		if f := chunk.Choices[0].FinishReason; f != nil {
			finish = *f
		}
	}
	require.Equal(t, "read_file", name)
	require.JSONEq(t, `{"word":"look"}`, args.String())
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
