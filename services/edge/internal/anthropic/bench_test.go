package anthropic

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkToChat translates a coding agent's turn: a long system prompt,
// tools, and a conversation of tool calls and results.
func BenchmarkToChat(b *testing.B) {
	for _, turns := range []int{1, 50} {
		b.Run(fmt.Sprintf("turns=%d", turns), func(b *testing.B) {
			var msgs []string
			for i := range turns {
				msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":%q}]}`, i, strings.Repeat("line of output\n", 200)),
					fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"reading"},{"type":"tool_use","id":"t%d","name":"Read","input":{"file_path":"/a/b.go"}}]}`, i+1))
			}
			msgs = append(msgs, `{"role":"user","content":"go on"}`)
			body := []byte(`{"model":"m","max_tokens":4096,"stream":true,"system":[{"type":"text","text":` + fmt.Sprintf("%q", strings.Repeat("You are an agent. ", 2000)) + `}],
				"tools":[{"name":"Read","input_schema":{"type":"object","properties":{"file_path":{"type":"string"}}}}],"messages":[` + strings.Join(msgs, ",") + `]}`)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := ToChat(body, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStream translates a stream of text chunks as the pipeline
// writes them, one event per write.
func BenchmarkStream(b *testing.B) {
	chunk := []byte(chatStream(`{"id":"gen-abc","model":"vendor/m","provider":"a","choices":[{"index":0,"delta":{"content":"token "}}]}`))
	b.ReportAllocs()
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "text/event-stream")
	w := NewWriter(rec, "gen-abc")
	w.WriteHeader(http.StatusOK)
	for b.Loop() {
		if _, err := w.Write(chunk); err != nil {
			b.Fatal(err)
		}
		rec.Body.Reset()
	}
}
