package anthropic

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
)

func TestToChat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		opts Options
		// want is the chat request, compared as JSON.
		want string
		req  Request
	}{
		{
			name: "minimal",
			in:   `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
			req:  Request{Model: "m"},
		},
		{
			name: "system string, sampling, stop, metadata, stream",
			in: `{"model":"m","max_tokens":10,"system":"be brief","stream":true,"temperature":0.5,"top_p":0.9,"top_k":40,
				"stop_sequences":["END"],"metadata":{"user_id":"u1"},"messages":[{"role":"user","content":"hi"}]}`,
			want: `{"model":"m","max_tokens":10,"stream":true,"stream_options":{"include_usage":true},"temperature":0.5,"top_p":0.9,
				"top_k":40,"stop":["END"],"user":"u1","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`,
			req: Request{Model: "m", Stream: true, StopSequences: []string{"END"}},
		},
		{
			name: "system blocks with cache_control; thinking not passed on, but noted",
			in: `{"model":"m","max_tokens":10,"thinking":{"type":"enabled","budget_tokens":1024},
				"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b"}],
				"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"system","content":"a\n\nb"},{"role":"user","content":"hi"}]}`,
			req:  Request{Model: "m", Thinking: true, CacheWriteTokens: 46}, // up to the system breakpoint
		},
		{
			name: "images: base64 and url",
			in: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"what?"},
				{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}},
				{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"what?"},
				{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`,
			req: Request{Model: "m"},
		},
		{
			name: "tool turn: tool_use, tool_result string and blocks, error result, text after",
			in: `{"model":"m","max_tokens":10,"tools":[{"name":"read","description":"reads","input_schema":{"type":"object","properties":{"p":{"type":"string"}}},"cache_control":{"type":"ephemeral"}}],
				"tool_choice":{"type":"any","disable_parallel_tool_use":true},
				"messages":[{"role":"user","content":"go"},
				{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"reading"},
					{"type":"tool_use","id":"t1","name":"read","input":{"p": "a"}},{"type":"tool_use","id":"t2","name":"read","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"A"},
					{"type":"tool_result","tool_use_id":"t2","is_error":true,"content":[{"type":"text","text":"no"},{"type":"text","text":"such"},
						{"type":"image","source":{"type":"base64","media_type":"image/png","data":"BB"}}]},
					{"type":"text","text":"next?"}]}]}`,
			want: `{"model":"m","max_tokens":10,"tool_choice":"required","parallel_tool_calls":false,
				"tools":[{"type":"function","function":{"name":"read","description":"reads","parameters":{"type":"object","properties":{"p":{"type":"string"}}}}}],
				"messages":[{"role":"user","content":"go"},
				{"role":"assistant","content":"reading","tool_calls":[{"id":"t1","type":"function","function":{"name":"read","arguments":"{\"p\":\"a\"}"}},
					{"id":"t2","type":"function","function":{"name":"read","arguments":"{}"}}]},
				{"role":"tool","tool_call_id":"t1","content":"A"},
				{"role":"tool","tool_call_id":"t2","content":"Error: no\nsuch"},
				{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,BB"}},{"type":"text","text":"next?"}]}]}`,
			req: Request{Model: "m", CacheWriteTokens: 39}, // up to the tool's breakpoint
		},
		{
			name: "assistant with tool calls only has null content; tool_result only gives no user message",
			in: `{"model":"m","max_tokens":10,"tools":[{"name":"read"}],"tool_choice":{"type":"tool","name":"read"},"messages":[{"role":"user","content":"go"},
				{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"read","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}`,
			want: `{"model":"m","max_tokens":10,"tool_choice":{"type":"function","function":{"name":"read"}},
				"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object","properties":{}}}}],"messages":[{"role":"user","content":"go"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"read","arguments":"{}"}}]},
				{"role":"tool","tool_call_id":"t1","content":""}]}`,
			req: Request{Model: "m"},
		},
		{
			name: "Anthropic's own tools and their calls are dropped",
			in: `{"model":"m","max_tokens":1,"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5},{"name":"f","type":"custom"}],
				"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"server_tool_use","id":"s","name":"web_search","input":{}},
				{"type":"web_search_tool_result","tool_use_id":"s","content":[]},{"type":"text","text":"found"}]}]}`,
			want: `{"model":"m","max_tokens":1,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],
				"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"found"}]}`,
			req: Request{Model: "m"},
		},
		{
			name: "mid-conversation system messages stay where they are",
			in: `{"model":"m","max_tokens":1,"system":"top","messages":[{"role":"user","content":"x"},
				{"role":"system","content":[{"type":"text","text":"# Environment"},{"type":"text","text":"cwd /p","cache_control":{"type":"ephemeral"}}]},
				{"role":"assistant","content":"y"},{"role":"user","content":"z"},{"role":"system","content":"later"}]}`,
			want: `{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"top"},{"role":"user","content":"x"},
				{"role":"system","content":"# Environment\n\ncwd /p"},{"role":"assistant","content":"y"},{"role":"user","content":"z"},
				{"role":"system","content":"later"}]}`,
			// The breakpoint in the system message ends a prompt of 41 tokens
			// (cacheBreakpoints), which the endpoints that cache by breakpoints write.
			req: Request{Model: "m", CacheWriteTokens: 41},
		},
		{
			name: "tool_choice auto and none",
			in:   `{"model":"m","max_tokens":1,"tool_choice":{"type":"none"},"messages":[{"role":"user","content":"x"}]}`,
			want: `{"model":"m","max_tokens":1,"tool_choice":"none","messages":[{"role":"user","content":"x"}]}`,
			req:  Request{Model: "m"},
		},
		{
			name: "count_tokens needs no max_tokens; routing options pass",
			in:   `{"model":"m","provider":{"sort":"price"},"messages":[{"role":"user","content":"x"}]}`,
			opts: Options{CountOnly: true},
			want: `{"model":"m","provider":{"sort":"price"},"messages":[{"role":"user","content":"x"}]}`,
			req:  Request{Model: "m"},
		},
		{
			name: "a text document is text",
			in:   `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc"}}]}]}`,
			want: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"doc"}]}`,
			req:  Request{Model: "m"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, req, err := ToChat([]byte(tt.in), tt.opts)
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(out))
			require.Equal(t, tt.req, req)
			// The chat pipeline takes what the translation makes.
			_, err = chatreq.Parse(out)
			require.NoError(t, err)
		})
	}
}

func TestToChatErrors(t *testing.T) {
	tests := []struct {
		name, in, param string
	}{
		{"not an object", `[]`, ""},
		{"invalid JSON", `{"model":`, ""},
		{"no model", `{"max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, "model"},
		{"no max_tokens", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"max_tokens zero", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"max_tokens huge", `{"model":"m","max_tokens":99999999999,"messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"no messages", `{"model":"m","max_tokens":1}`, "messages"},
		{"empty messages", `{"model":"m","max_tokens":1,"messages":[]}`, "messages"},
		{"bad role", `{"model":"m","max_tokens":1,"messages":[{"role":"wizard","content":"x"}]}`, "messages[0].role"},
		{"system message with an image", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"system","content":[{"type":"text","text":"a"},{"type":"image"}]}]}`, "messages[1].content[1]"},
		{"system message content a number", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"system","content":1}]}`, "messages[1].content"},
		{"bad content", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":3}]}`, "messages[0].content"},
		{"unknown block", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"audio"}]}]}`, "messages[0].content[0].type"},
		{"tool_use without id", `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"n"}]}]}`, "messages[0].content[0]"},
		{"tool_use input not an object", `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"i","name":"n","input":[1]}]}]}`, "messages[0].content[0].input"},
		{"tool_result without id", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result"}]}]}`, "messages[0].content[0].tool_use_id"},
		{"five stop sequences", `{"model":"m","max_tokens":1,"stop_sequences":["a","b","c","d","e"],"messages":[{"role":"user","content":"x"}]}`, "stop_sequences"},
		{"tool name with a dot", `{"model":"m","max_tokens":1,"tools":[{"name":"a.b"}],"messages":[{"role":"user","content":"x"}]}`, "tools[0].name"},
		{"too many tools", `{"model":"m","max_tokens":1,"tools":[` + strings.TrimSuffix(strings.Repeat(`{"name":"t"},`, maxTools+1), ",") + `],"messages":[{"role":"user","content":"x"}]}`, "tools"},
		{"tool_use name with a space", `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"i","name":"a b"}]}]}`, "messages[0].content[0].name"},
		{"tool without name", `{"model":"m","max_tokens":1,"tools":[{"input_schema":{}}],"messages":[{"role":"user","content":"x"}]}`, "tools[0].name"},
		{"tool_choice naming no tool", `{"model":"m","max_tokens":1,"tools":[{"name":"a"}],"tool_choice":{"type":"tool","name":"b"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice.name"},
		{"tool_choice any without tools", `{"model":"m","max_tokens":1,"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice"},
		{"empty user content", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[]}]}`, "messages[0].content"},
		{"bad tool_choice", `{"model":"m","max_tokens":1,"tool_choice":{"type":"some"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice.type"},
		{"temperature above 1", `{"model":"m","max_tokens":1,"temperature":1.5,"messages":[{"role":"user","content":"x"}]}`, "temperature"},
		{"top_k not an integer", `{"model":"m","max_tokens":1,"top_k":1.5,"messages":[{"role":"user","content":"x"}]}`, "top_k"},
		{"bad temperature", `{"model":"m","max_tokens":1,"temperature":"hot","messages":[{"role":"user","content":"x"}]}`, "temperature"},
		{"bad system", `{"model":"m","max_tokens":1,"system":[{"type":"image"}],"messages":[{"role":"user","content":"x"}]}`, "system[0]"},
		{"image without source", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image"}]}]}`, "messages[0].content[0].source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ToChat([]byte(tt.in), Options{})
			var perr *chatreq.Error
			require.True(t, errors.As(err, &perr), "%v", err)
			require.Equal(t, tt.param, perr.Param, perr.Message)
		})
	}
}

// TestToChatDeterministic checks that a conversation's next turn
// translates to a chat request whose messages extend the previous turn's,
// which the edge's prompt hashes (and so cache-aware routing) rely on.
func TestToChatDeterministic(t *testing.T) {
	turn1 := `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"sys"}],"messages":[{"role":"user","content":"a"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"b":1, "a":2}}]}]}`
	turn2 := `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"sys"}],"messages":[{"role":"user","content":"a"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"b":1, "a":2}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]}]}`
	c1, _, err := ToChat([]byte(turn1), Options{})
	require.NoError(t, err)
	c2, _, err := ToChat([]byte(turn2), Options{})
	require.NoError(t, err)
	r1, err := chatreq.Parse(c1)
	require.NoError(t, err)
	r2, err := chatreq.Parse(c2)
	require.NoError(t, err)
	var hashes []uint64
	for _, p := range r2.Prefixes {
		hashes = append(hashes, p.GetHash())
	}
	require.Contains(t, hashes, r1.PromptHash, "turn 1's prompt is a prefix of turn 2's")
}
