// Package quality owns the edge's answer-quality checks: whether an answer a
// provider completed is usable. Each check has a name, reported in
// CallReport.quality_failures so the decider can count an endpoint's
// quality failures; the set is extensible (Check).
//
// The checks see every chunk of a stream (or the whole non-streamed answer)
// after the edge has read it, with what the edge already learned from it
// (Chunk), and the answer's end (End). They are built to cost next to
// nothing per chunk: a check that needs to parse a chunk does so only when
// the request makes it relevant (tool calls are looked for only in answers
// to requests with tools) or on the rare chunk that ends a choice.
package quality

import (
	"github.com/switchboard-ai/switchboard/pkg/pricing"
)

// Request is what the checks need to know of the client's request.
type Request struct {
	// Stream is whether the answer is streamed.
	Stream bool
	// Tools is whether the request offered tools, so the answer may call them.
	Tools bool
	// MaxTokens is the request's max_completion_tokens or max_tokens, 0 when unset.
	MaxTokens int64
}

// Chunk is one chunk of a stream, or a whole non-streamed answer, as the
// edge read it.
type Chunk struct {
	// Data is the chunk's JSON. It is valid only during Observe: a check
	// copies what it keeps.
	Data []byte
	// Finish is set when a choice finished in this chunk.
	Finish bool
	// TextBytes is the size of the generated text the chunk carries
	// (content, reasoning, tool call names and arguments).
	TextBytes int64
}

// End is how the answer ended.
type End struct {
	// Finished is set when some chunk carried a finish_reason.
	Finished bool
	// Usage is the provider's usage, nil when it reported none.
	Usage *pricing.Usage
}

// Check is one named answer-quality check.
type Check interface {
	// Name is the failure's name in reports, e.g. "empty".
	Name() string
	// Start returns the check's state for one answer to req, or nil when
	// the check does not apply to such a request (it then costs nothing).
	Start(req Request) Answer
}

// Answer is a check's state for one answer.
type Answer interface {
	// Observe sees one chunk, in order.
	Observe(c *Chunk)
	// Failed reports whether the answer failed the check.
	Failed(e *End) bool
}

// Default is the edge's check set.
var Default = []Check{MalformedToolCall{}, Empty{}, Truncated{}}

// Run is the checks of one answer. The zero Run checks nothing. It is not
// safe for concurrent use: one leg reads its answer on one goroutine.
type Run struct {
	names   []string
	answers []Answer
	// namesBuf and answersBuf back names and answers for up to four
	// checks (Default has three), so that a Run is one allocation.
	namesBuf   [4]string
	answersBuf [4]Answer
}

// Start begins checking one answer to req with checks.
func Start(req Request, checks []Check) *Run {
	r := &Run{}
	r.names, r.answers = r.namesBuf[:0], r.answersBuf[:0]
	for _, c := range checks {
		if a := c.Start(req); a != nil {
			r.names = append(r.names, c.Name())
			r.answers = append(r.answers, a)
		}
	}
	return r
}

// Observe passes one chunk to every check.
func (r *Run) Observe(c *Chunk) {
	if r == nil {
		return
	}
	for _, a := range r.answers {
		a.Observe(c)
	}
}

// Failures returns the names of the checks the answer failed, nil when it
// passed them all.
func (r *Run) Failures(e *End) []string {
	if r == nil {
		return nil
	}
	var out []string
	for i, a := range r.answers {
		if a.Failed(e) {
			out = append(out, r.names[i])
		}
	}
	return out
}
