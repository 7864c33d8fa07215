package fakeupstream

import (
	"net/http"
	"strconv"
)

// WriteBenchStream answers as the benchmarks' provider does: five small
// chunks of text, the last with finish_reason and usage, then [DONE], each
// written and flushed on its own. It records nothing, so that a benchmark
// measures the edge.
func WriteBenchStream(w http.ResponseWriter) {
	words := [...]string{"Hello", " from", " the", " fake", " upstream"}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	var buf []byte
	for i, word := range words {
		buf = append(buf[:0], `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench-model","choices":[{"index":0,"delta":{"content":`...)
		buf = strconv.AppendQuote(buf, word)
		buf = append(buf, `},"finish_reason":`...)
		if i == len(words)-1 {
			buf = append(buf, `"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`+"\n\ndata: [DONE]"...)
		} else {
			buf = append(buf, `null}]}`...)
		}
		buf = append(buf, "\n\n"...)
		_, _ = w.Write(buf)
		_ = rc.Flush()
	}
}
