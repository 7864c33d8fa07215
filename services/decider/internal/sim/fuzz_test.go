package sim

import (
	"bytes"
	"testing"
)

// FuzzParseTrace feeds the trace parser arbitrary bytes: it must return
// records or an error, never panic, and every record it returns must be
// valid input for the engine.
func FuzzParseTrace(f *testing.F) {
	f.Add([]byte(`{"at": 5, "conversation": "a", "prompt_tokens": 60000, "output_tokens": 300, "stream": true}`))
	f.Add([]byte("{\"at\": 1.5, \"prompt_tokens\": \"2k\", \"output_tokens\": 10, \"sort\": \"latency\"}\n\n{}"))
	f.Add([]byte(`{"at": 1e308, "prompt_tokens": -1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := ParseTrace(bytes.NewReader(data))
		if err != nil {
			return
		}
		for i, r := range recs {
			if r.PromptTokens <= 0 || r.OutputTokens < 0 || r.MaxTokens < 0 || !(r.At >= 0) {
				t.Fatalf("invalid record accepted: %+v", r)
			}
			if i > 0 && recs[i-1].At > r.At {
				t.Fatalf("records not in arrival order")
			}
		}
	})
}
