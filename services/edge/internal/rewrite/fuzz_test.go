package rewrite

import (
	"encoding/json"
	"testing"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/invoice"
)

// FuzzRewrite feeds provider answers and chunks, which the edge does not
// control, through the rewriter: it must never panic, and whatever it sends
// the client must be a JSON object with the edge's id, model and provider.
func FuzzRewrite(f *testing.F) {
	for _, s := range []string{
		`{"id":"x","choices":[{"delta":{"content":"hi"}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{}"}}]},"finish_reason":null}]}`,
		`{"choices":[{"message":{"content":"hi","tool_calls":[{"function":{"arguments":"{\"a\":1}"}}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}}}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"prompt_cache_hit_tokens":1,"cost":9}}`,
		`{"choices":[{"message":{"content":[{"type":"text","text":"x"}]}}]}`,
		`{"error":{"message":"boom"}}`,
		`{"usage":null,"choices":null}`,
		`[]`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	price := &switchboardv1.Price{Input: 1, CachedInput: 0.5, Output: 2}
	f.Fuzz(func(t *testing.T, data []byte, keepUsage bool) {
		rw := Rewriter{
			ID: String("gen-1"), Model: String("m"), Provider: String("p"), KeepUsage: keepUsage,
			Cost: func(u pricing.Usage) float64 {
				c, _ := invoice.Charge(u, price, invoice.Caps{MaxOutputTokens: 5})
				return c
			},
			AddUsage: func(n int64) json.RawMessage {
				return UsageJSON(pricing.Usage{Input: 1, Output: invoice.TextTokens(n)}, 0.5)
			},
		}
		out, info, err := rw.Rewrite(data)
		if err != nil || out == nil {
			return
		}
		if info.TextBytes < 0 {
			t.Fatalf("negative text size %d", info.TextBytes)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("output is not a JSON object: %v\n%s", err, out)
		}
		if string(m["id"]) != `"gen-1"` || string(m["model"]) != `"m"` || string(m["provider"]) != `"p"` {
			t.Fatalf("id, model or provider not rewritten: %s", out)
		}
	})
}
