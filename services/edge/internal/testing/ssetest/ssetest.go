// Package ssetest frames chat-completions chunks as the edge's chat
// pipeline writes them, for tests of the client API translations that
// read its stream.
package ssetest

import "strings"

// Frame frames chat chunks (or "[DONE]") as server-sent events, one data
// line each.
func Frame(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	return b.String()
}
