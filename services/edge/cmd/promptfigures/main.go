// Command promptfigures prints what the edge tells Decide of each chat
// request — its token estimate, max output tokens and prompt prefixes — by
// the edge's own parser, so that callers in other languages (clients/) can
// check their implementation of the same rules against it. It reads a JSON
// array of chat completions bodies on stdin and writes a JSON array of
// figures, one per body, hashes as decimal strings (a uint64 does not fit
// a JavaScript number).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
)

// prefix is one prompt prefix as printed.
type prefix struct {
	Hash   string `json:"hash"`
	Tokens int64  `json:"tokens"`
}

// figures are one body's figures as printed.
type figures struct {
	InputTokens     int64    `json:"input_tokens"`
	MaxOutputTokens int64    `json:"max_output_tokens"`
	Prefixes        []prefix `json:"prefixes"`
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "promptfigures:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	var bodies []json.RawMessage
	if err := json.NewDecoder(in).Decode(&bodies); err != nil {
		return fmt.Errorf("read a JSON array of bodies: %w", err)
	}
	all := make([]figures, 0, len(bodies))
	for i, b := range bodies {
		r, err := chatreq.Parse(b)
		if err != nil {
			return fmt.Errorf("body %d: %w", i, err)
		}
		f := figures{InputTokens: r.InputTokens, MaxOutputTokens: r.MaxOutputTokens, Prefixes: make([]prefix, len(r.Prefixes))}
		for j, p := range r.Prefixes {
			f.Prefixes[j] = prefix{Hash: strconv.FormatUint(p.GetHash(), 10), Tokens: p.GetTokens()}
		}
		all = append(all, f)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", " ")
	return enc.Encode(all)
}
