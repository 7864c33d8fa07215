package quality

import (
	"bytes"
	"testing"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
)

// FuzzChecks feeds arbitrary chunks, split at NUL bytes, to every check:
// whatever a provider sends, the checks never panic and name only checks
// of the set.
func FuzzChecks(f *testing.F) {
	f.Add([]byte(`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}}]}`+"\x00"+`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"}]}`), true, true, int64(10))
	f.Add([]byte(`{"choices":[{"message":{"tool_calls":[{"function":{"arguments":"{"}}]},"finish_reason":"length"}]}`), false, true, int64(100))
	f.Add([]byte(`{"choices":[{"delta":{"tool_calls":[{"index":-1},{"index":9999999999}]}}]}`), true, true, int64(0))
	f.Add([]byte(`{"choices":null}`+"\x00"+`[]`+"\x00"+`{"choices":[{"finish_reason":"length"}]}`), true, false, int64(-5))
	f.Fuzz(func(t *testing.T, data []byte, stream, tools bool, maxTokens int64) {
		r := Start(Request{Stream: stream, Tools: tools, MaxTokens: maxTokens}, Default)
		finished := false
		for _, part := range bytes.Split(data, []byte{0}) {
			c := Chunk{Data: part, Finish: bytes.Contains(part, []byte("finish_reason")), TextBytes: int64(len(part) % 7)}
			finished = finished || c.Finish
			r.Observe(&c)
		}
		for _, name := range r.Failures(&End{Finished: finished, Usage: &pricing.Usage{Output: int64(len(data))}}) {
			switch name {
			case NameEmpty, NameTruncated, NameMalformedToolCall:
			default:
				t.Fatalf("unknown failure %q", name)
			}
		}
	})
}
