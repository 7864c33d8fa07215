package quality

import "testing"

// BenchmarkObserve is the checks' cost per stream chunk: a content chunk of
// an answer to a request without tools (the common case), with tools, a
// tool call fragment, and the chunk that finishes the answer.
func BenchmarkObserve(b *testing.B) {
	content := chunk(`{"id":"gen-1","object":"chat.completion.chunk","model":"m","provider":"p","choices":[{"index":0,"delta":{"content":"Hello there, how can I help?"}}]}`, false, 28)
	toolFrag := chunk(`{"id":"gen-1","object":"chat.completion.chunk","model":"m","provider":"p","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`, false, 8)
	finish := chunk(`{"id":"gen-1","object":"chat.completion.chunk","model":"m","provider":"p","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`, true, 0)
	for _, bc := range []struct {
		name string
		req  Request
		c    Chunk
	}{
		{"content, no tools", Request{Stream: true}, content},
		{"content, tools", Request{Stream: true, Tools: true}, content},
		{"tool call fragment", Request{Stream: true, Tools: true}, toolFrag},
		{"finish, stop", Request{Stream: true}, finish},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := Start(bc.req, Default)
			b.ReportAllocs()
			for b.Loop() {
				r.Observe(&bc.c)
			}
		})
	}
}
