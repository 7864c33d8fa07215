package quality

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
)

// chunk is a stream chunk as the edge reads it: Finish and TextBytes as
// the rewrite package measures them, given by hand here.
func chunk(data string, finish bool, text int64) Chunk {
	return Chunk{Data: []byte(data), Finish: finish, TextBytes: text}
}

func TestChecks(t *testing.T) {
	stream := Request{Stream: true}
	tools := Request{Stream: true, Tools: true}
	usage := func(out int64) *pricing.Usage { return &pricing.Usage{Input: 10, Output: out} }
	tests := []struct {
		name   string
		req    Request
		chunks []Chunk
		end    End
		want   []string
	}{
		{
			name: "a good stream",
			req:  stream,
			chunks: []Chunk{
				chunk(`{"choices":[{"delta":{"role":"assistant","content":"Hel"}}]}`, false, 3),
				chunk(`{"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}`, true, 2),
			},
			end: End{Finished: true, Usage: usage(2)},
		},
		{
			name:   "finished with nothing",
			req:    stream,
			chunks: []Chunk{chunk(`{"choices":[{"delta":{"content":""},"finish_reason":"stop"}]}`, true, 0)},
			end:    End{Finished: true},
			want:   []string{NameEmpty},
		},
		{
			name:   "reasoning is something",
			req:    stream,
			chunks: []Chunk{chunk(`{"choices":[{"delta":{"reasoning":"hm"},"finish_reason":"stop"}]}`, true, 2)},
			end:    End{Finished: true},
		},
		{
			name:   "a stream without a finish_reason",
			req:    stream,
			chunks: []Chunk{chunk(`{"choices":[{"delta":{"content":"Hel"}}]}`, false, 3)},
			end:    End{},
			want:   []string{NameTruncated},
		},
		{
			name:   "an empty stream without a finish_reason is truncated, not empty",
			req:    stream,
			chunks: nil,
			end:    End{},
			want:   []string{NameTruncated},
		},
		{
			name:   "length below max_tokens: the provider cut it",
			req:    Request{Stream: true, MaxTokens: 1000},
			chunks: []Chunk{chunk(`{"choices":[{"delta":{"content":"Hel"},"finish_reason":"length"}]}`, true, 3)},
			end:    End{Finished: true, Usage: usage(200)},
			want:   []string{NameTruncated},
		},
		{
			name:   "length written with escapes is length",
			req:    Request{Stream: true, MaxTokens: 1000},
			chunks: []Chunk{chunk(`{"choices":[{"delta":{"content":"Hel"},"finish_reason":"\u006cength"}]}`, true, 3)},
			end:    End{Finished: true, Usage: usage(200)},
			want:   []string{NameTruncated},
		},
		{
			name:   "length in the text is not a finish reason",
			req:    Request{Stream: true, MaxTokens: 1000},
			chunks: []Chunk{chunk(`{"choices":[{"delta":{"content":"\"length\""},"finish_reason":"stop"}]}`, true, 8)},
			end:    End{Finished: true, Usage: usage(200)},
		},
		{
			name:   "length at max_tokens: the client's limit",
			req:    Request{Stream: true, MaxTokens: 200},
			chunks: []Chunk{chunk(`{"choices":[{"delta":{"content":"Hel"},"finish_reason":"length"}]}`, true, 3)},
			end:    End{Finished: true, Usage: usage(200)},
		},
		{
			name:   "length without max_tokens is not judged",
			req:    stream,
			chunks: []Chunk{chunk(`{"choices":[{"delta":{"content":"Hel"},"finish_reason":"length"}]}`, true, 3)},
			end:    End{Finished: true, Usage: usage(200)},
		},
		{
			name:   "length without usage is not judged",
			req:    Request{Stream: true, MaxTokens: 1000},
			chunks: []Chunk{chunk(`{"choices":[{"delta":{"content":"Hel"},"finish_reason":"length"}]}`, true, 3)},
			end:    End{Finished: true},
		},
		{
			name: "streamed tool call arguments gathered per index",
			req:  tools,
			chunks: []Chunk{
				chunk(`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"ci"}}]}}]}`, false, 5),
				chunk(`{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"[1,"}}]}}]}`, false, 5),
				chunk(`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\":\"Paris\"}"}}]}}]}`, false, 12),
				chunk(`{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"2]"}}]}}]}`, false, 2),
				chunk(`{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`, true, 0),
			},
			end: End{Finished: true},
		},
		{
			name: "a streamed call whose arguments never close",
			req:  tools,
			chunks: []Chunk{
				chunk(`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"city\":"}}]}}]}`, false, 10),
				chunk(`{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"name":"g","arguments":"{}"}}]}}]}`, false, 3),
				chunk(`{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`, true, 0),
			},
			end:  End{Finished: true},
			want: []string{NameMalformedToolCall},
		},
		{
			name: "a call without arguments",
			req:  tools,
			chunks: []Chunk{
				chunk(`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"now","arguments":""}}]},"finish_reason":"tool_calls"}]}`, true, 3),
			},
			end: End{Finished: true},
		},
		{
			name: "tool calls are not looked for without tools",
			req:  stream,
			chunks: []Chunk{
				chunk(`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{oops"}}]},"finish_reason":"tool_calls"}]}`, true, 6),
			},
			end: End{Finished: true},
		},
		{
			name: "a non-streamed answer with a malformed call",
			req:  Request{Tools: true},
			chunks: []Chunk{
				chunk(`{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"b","type":"function","function":{"name":"g","arguments":"{\"a\":"}}]},"finish_reason":"tool_calls"}]}`, true, 10),
			},
			end:  End{Finished: true},
			want: []string{NameMalformedToolCall},
		},
		{
			name: "a non-streamed answer with good calls",
			req:  Request{Tools: true},
			chunks: []Chunk{
				chunk(`{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}]}`, true, 8),
			},
			end: End{Finished: true},
		},
		{
			name:   "a non-streamed answer needs no finish to be whole",
			req:    Request{},
			chunks: []Chunk{chunk(`{"choices":[{"message":{"content":"hi"}}]}`, false, 2)},
			end:    End{},
		},
		{
			name:   "a non-streamed empty answer",
			req:    Request{},
			chunks: []Chunk{chunk(`{"choices":[{"message":{"content":""},"finish_reason":"stop"}]}`, true, 0)},
			end:    End{Finished: true},
			want:   []string{NameEmpty},
		},
		{
			name: "several failures at once",
			req:  Request{Stream: true, Tools: true, MaxTokens: 100},
			chunks: []Chunk{
				chunk(`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{"}}]},"finish_reason":"length"}]}`, true, 2),
			},
			end:  End{Finished: true, Usage: usage(5)},
			want: []string{NameMalformedToolCall, NameTruncated},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Start(tt.req, Default)
			for i := range tt.chunks {
				r.Observe(&tt.chunks[i])
			}
			require.Equal(t, tt.want, r.Failures(&tt.end))
		})
	}
}

func TestToolCallsAreBounded(t *testing.T) {
	r := Start(Request{Stream: true, Tools: true}, Default)
	for i := range maxToolCalls + 1 {
		c := chunk(`{"choices":[{"delta":{"tool_calls":[{"index":`+itoa(i)+`,"function":{"arguments":"{"}}]}}]}`, false, 1)
		r.Observe(&c)
	}
	a := r.answers[0].(*toolCallAnswer)
	require.True(t, a.overflow)
	require.Len(t, a.args, maxToolCalls)
	require.Empty(t, r.Failures(&End{Finished: true}), "past the bounds the answer is not judged")
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
		if i == 0 {
			return string(b)
		}
	}
}

func TestNoToolsNoToolCheck(t *testing.T) {
	r := Start(Request{Stream: true}, Default)
	require.Equal(t, []string{NameEmpty, NameTruncated}, r.names, "the tool call check costs nothing without tools")
	var zero *Run
	zero.Observe(&Chunk{})
	require.Nil(t, zero.Failures(&End{}))
}

// A check added to the set is run and named like the built-in ones.
type alwaysFails struct{}

func (alwaysFails) Name() string         { return "always" }
func (alwaysFails) Start(Request) Answer { return alwaysFails{} }
func (alwaysFails) Observe(*Chunk)       {}
func (alwaysFails) Failed(*End) bool     { return true }

func TestExtensible(t *testing.T) {
	r := Start(Request{}, append([]Check{alwaysFails{}}, Default...))
	c := chunk(`{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}`, true, 2)
	r.Observe(&c)
	require.Equal(t, []string{"always"}, r.Failures(&End{Finished: true}))
}
