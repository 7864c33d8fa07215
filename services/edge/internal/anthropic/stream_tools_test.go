package anthropic

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
)

// translate runs chat chunks through a Stream and returns its events.
func translate(req Request, chunks ...string) string {
	s := NewStream("gen-abc", req, 12)
	var out []byte
	for _, c := range chunks {
		out = s.Event(out, []byte(c))
	}
	return string(s.Event(out, []byte("[DONE]")))
}

// assemble checks that events are a valid Messages stream, blocks strictly
// one after another (start, deltas, stop) with indices 0, 1, 2..., and
// returns the message they build, as the SDKs accumulate it.
func assemble(t *testing.T, events string) Message {
	t.Helper()
	var m Message
	open := -1
	var partial []strings.Builder
	for _, ev := range strings.Split(strings.TrimSuffix(events, "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(strings.TrimPrefix(ev, "event: "), "\ndata: ")
		require.True(t, ok, "event %q", ev)
		var e struct {
			Index        int             `json:"index"`
			Message      Message         `json:"message"`
			ContentBlock ContentBlock    `json:"content_block"`
			Delta        json.RawMessage `json:"delta"`
		}
		require.NoError(t, json.Unmarshal([]byte(data), &e), data)
		switch name {
		case "message_start":
			m = e.Message
		case "content_block_start":
			require.Equal(t, -1, open, "block %d starts while %d is open", e.Index, open)
			require.Equal(t, len(m.Content), e.Index, "blocks are numbered in order")
			open = e.Index
			e.ContentBlock.Input = nil
			m.Content = append(m.Content, e.ContentBlock)
			partial = append(partial, strings.Builder{})
		case "content_block_delta":
			require.Equal(t, open, e.Index, "a delta for a block that is not open")
			var d struct {
				Type, Text, Thinking string
				PartialJSON          string `json:"partial_json"`
			}
			require.NoError(t, json.Unmarshal(e.Delta, &d))
			switch d.Type {
			case "text_delta":
				*m.Content[open].Text += d.Text
			case "thinking_delta":
				*m.Content[open].Thinking += d.Thinking
			case "input_json_delta":
				partial[open].WriteString(d.PartialJSON)
			}
		case "content_block_stop":
			require.Equal(t, open, e.Index, "a stop for a block that is not open")
			if b := &m.Content[open]; b.Type == "tool_use" {
				b.Input = toolInput(partial[open].String())
			}
			open = -1
		case "message_delta":
			var d struct {
				StopReason *string `json:"stop_reason"`
			}
			require.NoError(t, json.Unmarshal(e.Delta, &d))
			require.Equal(t, -1, open, "message_delta with a block open")
			m.StopReason = d.StopReason
		}
	}
	return m
}

func TestStreamInterleavedToolCallsGolden(t *testing.T) {
	got := translate(Request{},
		`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"read","arguments":""}}]}}]}`,
		`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"ls","arguments":""}}]}}]}`,
		`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"p\":"}}]}}]}`,
		`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"d\":"}}]}}]}`,
		`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a}\"}"}}]}}]}`,
		`{"model":"vendor/m","choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"2}"}}]}}]}`,
		`{"model":"vendor/m","choices":[{"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":30,"completion_tokens":9}}`)
	want := evStart +
		"event: content_block_start\ndata: {\"content_block\":{\"id\":\"call_a\",\"input\":{},\"name\":\"read\",\"type\":\"tool_use\"},\"index\":0,\"type\":\"content_block_start\"}\n\n" +
		"event: content_block_delta\ndata: {\"delta\":{\"partial_json\":\"{\\\"p\\\":\",\"type\":\"input_json_delta\"},\"index\":0,\"type\":\"content_block_delta\"}\n\n" +
		// The brace inside the string does not end call_a's arguments; the
		// one after it does, and call_b gets its block with what it sent.
		"event: content_block_delta\ndata: {\"delta\":{\"partial_json\":\"\\\"a}\\\"}\",\"type\":\"input_json_delta\"},\"index\":0,\"type\":\"content_block_delta\"}\n\n" +
		"event: content_block_stop\ndata: {\"index\":0,\"type\":\"content_block_stop\"}\n\n" +
		"event: content_block_start\ndata: {\"content_block\":{\"id\":\"call_b\",\"input\":{},\"name\":\"ls\",\"type\":\"tool_use\"},\"index\":1,\"type\":\"content_block_start\"}\n\n" +
		"event: content_block_delta\ndata: {\"delta\":{\"partial_json\":\"{\\\"d\\\":\",\"type\":\"input_json_delta\"},\"index\":1,\"type\":\"content_block_delta\"}\n\n" +
		"event: content_block_delta\ndata: {\"delta\":{\"partial_json\":\"2}\",\"type\":\"input_json_delta\"},\"index\":1,\"type\":\"content_block_delta\"}\n\n" +
		"event: content_block_stop\ndata: {\"index\":1,\"type\":\"content_block_stop\"}\n\n" +
		"event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"type\":\"message_delta\",\"usage\":{\"input_tokens\":30,\"output_tokens\":9,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}}\n\n" +
		evStop
	require.Equal(t, want, got)
}

func TestStreamInterleavedToolCallsWaitForTheEnd(t *testing.T) {
	// Arguments that never become a whole object (a provider's bare
	// string) keep the later call waiting until the answer ends; text
	// after the calls ends the wait too.
	tests := []struct {
		name   string
		chunks []string
		want   []ContentBlock
	}{
		{
			name: "until the end",
			chunks: []string{
				`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"\"x"}},{"index":1,"id":"b","function":{"name":"g","arguments":"{"}}]}}]}`,
				`{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"}"}},{"index":0,"function":{"arguments":"y\""}}]}}]}`,
			},
			want: []ContentBlock{
				{Type: "tool_use", ID: "a", Name: "f", Input: json.RawMessage(`{"arguments":"\"xy\""}`)},
				{Type: "tool_use", ID: "b", Name: "g", Input: json.RawMessage(`{}`)},
			},
		},
		{
			name: "calls that all have index 0 are told apart by their ids",
			chunks: []string{
				`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\":1}"}}]}}]}`,
				`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"g","arguments":"{\"y\":"}}]}}]}`,
				`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"2}"}}]}}]}`,
			},
			want: []ContentBlock{
				{Type: "tool_use", ID: "a", Name: "f", Input: json.RawMessage(`{"x":1}`)},
				{Type: "tool_use", ID: "b", Name: "g", Input: json.RawMessage(`{"y":2}`)},
			},
		},
		{
			name: "until text",
			chunks: []string{
				`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"k\":"}}]}}]}`,
				`{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"[1]"}}]}}]}`,
				`{"choices":[{"delta":{"content":"done"}}]}`,
			},
			want: []ContentBlock{
				{Type: "tool_use", ID: "a", Name: "f", Input: json.RawMessage(`{"arguments":"{\"k\":"}`)},
				{Type: "tool_use", ID: "b", Name: "g", Input: json.RawMessage(`{"arguments":"[1]"}`)},
				{Type: "text", Text: new("done")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := assemble(t, translate(Request{}, tt.chunks...))
			require.Equal(t, tt.want, m.Content)
		})
	}
}

// TestStreamParallelToolCallsAnyInterleaving feeds parallel tool calls
// cut into pieces and interleaved at random, and checks the stream is
// valid and builds the message the non-streamed answer translates to.
func TestStreamParallelToolCallsAnyInterleaving(t *testing.T) {
	calls := []struct{ id, name, args string }{
		{"call_0", "read", `{"path":"a/b.go","lines":[1,2]}`},
		{"call_1", "grep", `{"pattern":"}\"{","escaped":"\\\\"}`},
		{"call_2", "ls", `{}`},
		{"call_3", "run", `{"cmd":["go","test"],"env":{"A":"{"}}`},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		n := 1 + rng.IntN(len(calls))
		var pieces [][]string
		for _, c := range calls[:n] {
			var p []string
			for rest := c.args; rest != ""; {
				k := 1 + rng.IntN(min(len(rest), 6))
				p, rest = append(p, rest[:k]), rest[k:]
			}
			pieces = append(pieces, p)
		}
		text := rng.IntN(2) == 0
		var chunks []string
		if text {
			chunks = append(chunks, `{"model":"vendor/m","choices":[{"delta":{"content":"Let me look."}}]}`)
		}
		started := make([]bool, n)
		for left := true; left; {
			left = false
			var tcs []string
			for range 1 + rng.IntN(2) { // one or two calls' deltas per chunk
				i := rng.IntN(n)
				if len(pieces[i]) == 0 {
					continue
				}
				args, _ := json.Marshal(pieces[i][0])
				pieces[i] = pieces[i][1:]
				head := ""
				if !started[i] {
					started[i] = true
					head = fmt.Sprintf(`"id":%q,"type":"function",`, calls[i].id)
					tcs = append(tcs, fmt.Sprintf(`{"index":%d,%s"function":{"name":%q,"arguments":%s}}`, i, head, calls[i].name, args))
					continue
				}
				tcs = append(tcs, fmt.Sprintf(`{"index":%d,"function":{"arguments":%s}}`, i, args))
			}
			for i := range pieces {
				left = left || len(pieces[i]) > 0
			}
			if len(tcs) > 0 {
				chunks = append(chunks, `{"model":"vendor/m","choices":[{"delta":{"tool_calls":[`+strings.Join(tcs, ",")+`]}}]}`)
			}
		}
		chunks = append(chunks, `{"model":"vendor/m","choices":[{"delta":{},"finish_reason":"tool_calls"}]}`)
		got := assemble(t, translate(Request{}, chunks...))

		// The same answer, not streamed, with the calls in the order they
		// started.
		var order []int
		seen := map[int]bool{}
		for _, c := range chunks {
			var a clientapi.ChatAnswer
			require.NoError(t, json.Unmarshal([]byte(c), &a))
			for _, tc := range a.Choices[0].Delta.ToolCalls {
				if !seen[tc.Index] {
					seen[tc.Index] = true
					order = append(order, tc.Index)
				}
			}
		}
		var tcs []string
		for _, i := range order {
			args, _ := json.Marshal(calls[i].args)
			tcs = append(tcs, fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}`, calls[i].id, calls[i].name, args))
		}
		content := "null"
		if text {
			content = `"Let me look."`
		}
		body, err := FromChat([]byte(`{"model":"vendor/m","choices":[{"message":{"content":`+content+`,"tool_calls":[`+strings.Join(tcs, ",")+`]},"finish_reason":"tool_calls"}]}`), "gen-abc", Request{})
		require.NoError(t, err)
		var want Message
		require.NoError(t, json.Unmarshal(body, &want))
		require.Equal(t, want.Content, got.Content, "round %d: %s", round, strings.Join(chunks, "\n"))
		require.Equal(t, want.StopReason, got.StopReason)
	}
}

// FuzzStream feeds a provider's stream, one chunk per line, and checks no
// stream makes the translation panic and every one it translates is a
// valid Messages stream: blocks one after another, each delta in its own.
func FuzzStream(f *testing.F) {
	f.Add("{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":\"}},{\"index\":1,\"function\":{\"arguments\":\"[\"}}]}}]}\n" +
		"{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"]\"}},{\"index\":0,\"function\":{\"arguments\":\"\\\"}\\\"}\"}}]}}]}\n" +
		"{\"choices\":[{\"delta\":{\"content\":\"x\",\"reasoning\":\"r\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3}}")
	f.Add(`{"choices":[{"delta":{"tool_calls":[{"index":-1,"function":{"arguments":"\\\"{"}}]}}]}`)
	f.Add(`{"error":{"message":"boom","type":"x"}}`)
	f.Fuzz(func(t *testing.T, in string) {
		s := NewStream("gen-abc", Request{Thinking: true}, 1)
		var out []byte
		for _, line := range strings.Split(in, "\n") {
			out = s.Event(out, []byte(line))
		}
		out = s.Event(out, []byte("[DONE]"))
		if !strings.Contains(string(out), "event: error\n") {
			assemble(t, string(out))
		}
	})
}
