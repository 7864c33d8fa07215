package dispatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonobj"
)

// chunkInfo is what the edge learns from one answer or stream chunk.
type chunkInfo struct {
	// token is set when the chunk carries a token (see the package comment).
	token bool
	// finish is set when a choice finished.
	finish bool
	// usage is the provider's usage, when the chunk carries it.
	usage *usage
	// errMsg is set when the chunk is an error object instead of an answer.
	errMsg string
	// textBytes is the size of the generated text the chunk carries (content,
	// reasoning, tool call names and arguments), for estimating output tokens
	// when the provider reports no usage.
	textBytes int64
}

type choiceView struct {
	Delta *struct {
		Content          *string         `json:"content"`
		ReasoningContent *string         `json:"reasoning_content"`
		Reasoning        *string         `json:"reasoning"`
		ToolCalls        json.RawMessage `json:"tool_calls"`
	} `json:"delta"`
	// Message is a non-streamed answer's; read leniently, as it used to pass
	// through unread.
	Message *struct {
		Content          lenientText     `json:"content"`
		ReasoningContent lenientText     `json:"reasoning_content"`
		Reasoning        lenientText     `json:"reasoning"`
		ToolCalls        json.RawMessage `json:"tool_calls"`
	} `json:"message"`
	FinishReason *string `json:"finish_reason"`
}

// lenientText is a JSON string; any other value reads as no text.
type lenientText string

// UnmarshalJSON implements [json.Unmarshaler].
func (t *lenientText) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*t = lenientText(s)
	}
	return nil
}

// toolCallText is the generated text of a tool_calls array: every function
// name and arguments string. Anything unreadable counts as none.
func toolCallText(raw json.RawMessage) int64 {
	if len(raw) == 0 || isNull(raw) {
		return 0
	}
	var calls []struct {
		Function struct {
			Name      lenientText `json:"name"`
			Arguments lenientText `json:"arguments"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &calls) != nil {
		return 0
	}
	var n int64
	for _, c := range calls {
		n += int64(len(c.Function.Name) + len(c.Function.Arguments))
	}
	return n
}

func strLen(s *string) int64 {
	if s == nil {
		return 0
	}
	return int64(len(*s))
}

type usageView struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	// PromptCacheHitTokens is DeepSeek's name for cached prompt tokens.
	PromptCacheHitTokens *int64 `json:"prompt_cache_hit_tokens"`
}

var errMalformed = errors.New("malformed answer")

// rewriter turns a provider's answer or chunks into the client's: id set to
// the edge's request id, model to the canonical model, a top-level provider,
// and usage carrying what the client is billed as usage.cost.
type rewriter struct {
	// id replaces the provider's completion id; nil keeps it.
	id json.RawMessage
	// model and provider are JSON strings.
	model, provider json.RawMessage
	// keepUsage forwards usage to the client; without it a usage-only chunk
	// is dropped and usage removed from other chunks.
	keepUsage bool
	// cost prices a usage for the client, set as usage.cost; nil adds none.
	cost func(usage) float64
	// addUsage builds a usage object for an answer without one, from the
	// generated text's size; nil adds none. Used for non-streamed answers.
	addUsage func(textBytes int64) json.RawMessage
}

// rewrite inspects one answer or chunk and re-encodes it for the client. It
// returns a nil output for a usage-only chunk the client did not ask for.
// Every other field passes through unchanged.
func (rw *rewriter) rewrite(data []byte) ([]byte, chunkInfo, error) {
	var info chunkInfo
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return nil, info, fmt.Errorf("%w: not a JSON object", errMalformed)
	}
	rawChoices, hasChoices := fields["choices"]
	if e, ok := fields["error"]; ok && !isNull(e) && !hasChoices {
		info.errMsg = parseProviderError(data).Message
		if info.errMsg == "" {
			info.errMsg = "provider sent an error"
		}
		return nil, info, nil
	}
	rawUsage, hasUsage := fields["usage"]
	hasUsage = hasUsage && !isNull(rawUsage)
	if !hasChoices && !hasUsage {
		return nil, info, fmt.Errorf("%w: no choices", errMalformed)
	}
	var choices []choiceView
	if hasChoices {
		if err := json.Unmarshal(rawChoices, &choices); err != nil {
			return nil, info, fmt.Errorf("%w: choices: %w", errMalformed, err)
		}
	}
	for _, c := range choices {
		if c.FinishReason != nil && *c.FinishReason != "" {
			info.finish = true
		}
		if m := c.Message; m != nil {
			info.textBytes += int64(len(m.Content)+len(m.ReasoningContent)+len(m.Reasoning)) + toolCallText(m.ToolCalls)
		}
		if c.Delta == nil {
			continue
		}
		hasTools := len(c.Delta.ToolCalls) > 0 && !isNull(c.Delta.ToolCalls) && string(bytes.TrimSpace(c.Delta.ToolCalls)) != "[]"
		if nonEmpty(c.Delta.Content) || nonEmpty(c.Delta.ReasoningContent) || nonEmpty(c.Delta.Reasoning) || hasTools {
			info.token = true
		}
		info.textBytes += strLen(c.Delta.Content) + strLen(c.Delta.ReasoningContent) + strLen(c.Delta.Reasoning)
		if hasTools {
			info.textBytes += toolCallText(c.Delta.ToolCalls)
		}
	}
	info.token = info.token || info.finish
	if hasUsage {
		var u usageView
		if json.Unmarshal(rawUsage, &u) == nil {
			info.usage = &usage{input: u.PromptTokens, output: u.CompletionTokens}
			switch {
			case u.PromptTokensDetails != nil:
				info.usage.cached = u.PromptTokensDetails.CachedTokens
			case u.PromptCacheHitTokens != nil:
				info.usage.cached = *u.PromptCacheHitTokens
			}
		}
	}
	switch {
	case !rw.keepUsage:
		if hasUsage && len(choices) == 0 {
			return nil, info, nil
		}
		delete(fields, "usage")
	case info.usage != nil && rw.cost != nil:
		fields["usage"] = withCost(rawUsage, rw.cost(*info.usage))
	case !hasUsage && rw.addUsage != nil:
		fields["usage"] = rw.addUsage(info.textBytes)
	}
	if rw.id != nil {
		fields["id"] = rw.id
	}
	fields["model"] = rw.model
	fields["provider"] = rw.provider
	return jsonobj.Encode(fields), info, nil
}

// withCost returns the usage object with cost set (replacing a provider's
// own cost field, which is in the provider's terms, not the client's bill).
func withCost(rawUsage json.RawMessage, cost float64) json.RawMessage {
	var u map[string]json.RawMessage
	if json.Unmarshal(rawUsage, &u) != nil || u == nil {
		return rawUsage
	}
	u["cost"] = appendCost(nil, cost)
	return jsonobj.Encode(u)
}

func nonEmpty(s *string) bool { return s != nil && *s != "" }

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// setAnswerHeaders writes the status line of a successful answer. It is
// called only once the answer is known to be good, so that until then the
// attempt can still be abandoned for another endpoint.
func setAnswerHeaders(w http.ResponseWriter, ep *switchboardv1.Endpoint, stream bool) {
	h := w.Header()
	if stream {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		// Stops nginx-style proxies in front of the edge from buffering the stream.
		h.Set("X-Accel-Buffering", "no")
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("X-Switchboard-Provider", ep.GetProvider())
	w.WriteHeader(http.StatusOK)
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
