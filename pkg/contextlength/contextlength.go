// Package contextlength is a request longer than every endpoint's context
// window, as the decider, which checks it, tells the edge, which says it to
// the client in the words of the client's API: OpenAI's or Anthropic's.
package contextlength

import (
	"fmt"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// ErrorDomain and Reason mark the google.rpc.ErrorInfo detail that carries
// the figures, in its metadata under the Key* names, in decimal.
const (
	ErrorDomain = "switchboard"
	Reason      = "CONTEXT_LENGTH_EXCEEDED"

	KeyLimit        = "context_length"
	KeyPromptTokens = "prompt_tokens"
	KeyOutputTokens = "output_tokens"
)

// Exceeded are the figures of a request longer than every endpoint's
// context.
type Exceeded struct {
	// Limit is the largest context length among the endpoints, in tokens.
	Limit int64
	// PromptTokens is the prompt's estimate.
	PromptTokens int64
	// OutputTokens is the output asked for (max_tokens), 0 when none was.
	OutputTokens int64
}

// PromptOnly reports whether the prompt alone is over the limit, whatever
// the output asked for.
func (e Exceeded) PromptOnly() bool { return e.PromptTokens > e.Limit }

// OpenAIMessage is the error's message in OpenAI's words, which its clients
// know.
func (e Exceeded) OpenAIMessage() string {
	if e.PromptOnly() {
		return fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. "+
			"Please reduce the length of the messages.", e.Limit, e.PromptTokens)
	}
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens "+
		"(%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
		e.Limit, e.PromptTokens+e.OutputTokens, e.PromptTokens, e.OutputTokens)
}

// AnthropicMessage is the error's message in Anthropic's words.
func (e Exceeded) AnthropicMessage() string {
	if e.PromptOnly() {
		return fmt.Sprintf("prompt is too long: %d tokens > %d maximum", e.PromptTokens, e.Limit)
	}
	return fmt.Sprintf("input length and `max_tokens` exceed context limit: %d + %d > %d, "+
		"decrease input length or `max_tokens` and try again", e.PromptTokens, e.OutputTokens, e.Limit)
}

// Detail is the status detail that carries e.
func (e Exceeded) Detail() *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{Reason: Reason, Domain: ErrorDomain, Metadata: map[string]string{
		KeyLimit:        strconv.FormatInt(e.Limit, 10),
		KeyPromptTokens: strconv.FormatInt(e.PromptTokens, 10),
		KeyOutputTokens: strconv.FormatInt(e.OutputTokens, 10),
	}}
}

// FromStatus reads the figures Detail attached to st; false when st has
// none, or figures that are not non-negative numbers with a positive limit.
func FromStatus(st *status.Status) (Exceeded, bool) {
	for _, d := range st.Details() {
		ei, ok := d.(*errdetails.ErrorInfo)
		if !ok || ei.GetDomain() != ErrorDomain || ei.GetReason() != Reason {
			continue
		}
		var e Exceeded
		for _, f := range []struct {
			key string
			dst *int64
		}{{KeyLimit, &e.Limit}, {KeyPromptTokens, &e.PromptTokens}, {KeyOutputTokens, &e.OutputTokens}} {
			n, err := strconv.ParseInt(ei.GetMetadata()[f.key], 10, 64)
			if err != nil || n < 0 {
				return Exceeded{}, false
			}
			*f.dst = n
		}
		return e, e.Limit > 0
	}
	return Exceeded{}, false
}
