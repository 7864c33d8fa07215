package quality

import (
	"bytes"
	"encoding/json"
)

// The check names, as reports carry them.
const (
	NameMalformedToolCall = "malformed_tool_call"
	NameEmpty             = "empty"
	NameTruncated         = "truncated"
)

// Empty fails an answer that finished without generating anything: no
// content and no tool call. Text of any kind counts as something, reasoning
// included, so that the check needs no parsing (the edge already measures
// each chunk's generated text).
type Empty struct{}

// Name implements [Check.Name].
func (Empty) Name() string { return NameEmpty }

// Start implements [Check.Start].
func (Empty) Start(Request) Answer { return &emptyAnswer{} }

type emptyAnswer struct{ text bool }

func (a *emptyAnswer) Observe(c *Chunk) { a.text = a.text || c.TextBytes > 0 }

// Failed: only a finished answer is judged empty; one that never finished
// is the truncated check's.
func (a *emptyAnswer) Failed(e *End) bool { return e.Finished && !a.text }

// Truncated fails an answer cut short: a stream that ended without any
// finish_reason, or a finish_reason "length" although the answer's output
// tokens (by the provider's usage) stayed below the request's max_tokens —
// the provider stopped it, not the client's limit. Without max_tokens or
// usage a "length" finish is not judged.
type Truncated struct{}

// Name implements [Check.Name].
func (Truncated) Name() string { return NameTruncated }

// Start implements [Check.Start].
func (Truncated) Start(req Request) Answer { return &truncatedAnswer{req: req} }

type truncatedAnswer struct {
	req    Request
	length bool
}

// lengthValue is the finish reason "length" as JSON writes it unescaped.
var lengthValue = []byte(`"length"`)

// Observe parses only the chunks that finish a choice and may say
// "length": without a backslash in the chunk, the string can only be
// written as it is, so a chunk holding neither is passed over unparsed.
func (a *truncatedAnswer) Observe(c *Chunk) {
	if !c.Finish || a.length {
		return
	}
	if bytes.IndexByte(c.Data, '\\') < 0 && !bytes.Contains(c.Data, lengthValue) {
		return
	}
	var v struct {
		Choices []struct {
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	if json.Unmarshal(c.Data, &v) != nil {
		return
	}
	for _, ch := range v.Choices {
		if ch.FinishReason != nil && *ch.FinishReason == "length" {
			a.length = true
		}
	}
}

func (a *truncatedAnswer) Failed(e *End) bool {
	if a.req.Stream && !e.Finished {
		return true
	}
	return a.length && a.req.MaxTokens > 0 && e.Usage != nil && e.Usage.Output < a.req.MaxTokens
}

// MalformedToolCall fails an answer with a tool call whose arguments are not
// valid JSON. In a stream the arguments come in fragments, gathered per
// tool call index. Only answers to requests with tools are looked at, and
// of their chunks only those that mention tool_calls are parsed. Empty
// arguments count as no arguments, not as malformed.
type MalformedToolCall struct{}

// Name implements [Check.Name].
func (MalformedToolCall) Name() string { return NameMalformedToolCall }

// Start implements [Check.Start].
func (MalformedToolCall) Start(req Request) Answer {
	if !req.Tools {
		return nil
	}
	return &toolCallAnswer{}
}

// The bounds of what is gathered of one answer's tool calls: a provider
// cannot make the edge hold more. Past them the answer is not judged.
const (
	maxToolCalls     = 128
	maxToolCallBytes = 4 << 20
)

var toolCallsKey = []byte(`"tool_calls"`)

type toolCallAnswer struct {
	args      map[int][]byte // by tool call index
	size      int
	overflow  bool
	malformed bool // a call arrived whole and was not valid
}

type toolCallView struct {
	Index    *int `json:"index"`
	Function *struct {
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

func (a *toolCallAnswer) Observe(c *Chunk) {
	if a.overflow || !bytes.Contains(c.Data, toolCallsKey) {
		return
	}
	var v struct {
		Choices []struct {
			Delta *struct {
				ToolCalls []toolCallView `json:"tool_calls"`
			} `json:"delta"`
			Message *struct {
				ToolCalls []toolCallView `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(c.Data, &v) != nil {
		// The edge has already read this chunk; an unreadable tool_calls
		// shape is the malformed chunk check's, not this one's.
		return
	}
	for _, ch := range v.Choices {
		if m := ch.Message; m != nil {
			// A non-streamed answer: every call is whole.
			for _, tc := range m.ToolCalls {
				if tc.Function != nil && tc.Function.Arguments != nil && !validArgs([]byte(*tc.Function.Arguments)) {
					a.malformed = true
				}
			}
		}
		if d := ch.Delta; d != nil {
			for i, tc := range d.ToolCalls {
				a.fragment(tc, i)
			}
		}
	}
}

// fragment appends a streamed call's arguments fragment to its index's.
func (a *toolCallAnswer) fragment(tc toolCallView, pos int) {
	idx := pos
	if tc.Index != nil {
		idx = *tc.Index
	}
	if a.args == nil {
		a.args = map[int][]byte{}
	}
	frag := ""
	if tc.Function != nil && tc.Function.Arguments != nil {
		frag = *tc.Function.Arguments
	}
	cur, ok := a.args[idx]
	if !ok && len(a.args) >= maxToolCalls {
		a.overflow = true
		return
	}
	a.size += len(frag)
	if a.size > maxToolCallBytes {
		a.overflow = true
		return
	}
	a.args[idx] = append(cur, frag...)
}

func (a *toolCallAnswer) Failed(*End) bool {
	if a.malformed {
		return true
	}
	if a.overflow {
		return false
	}
	for _, args := range a.args {
		if !validArgs(args) {
			return true
		}
	}
	return false
}

// validArgs reports whether a tool call's arguments are a JSON value, or
// nothing at all.
func validArgs(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || json.Valid(b)
}
