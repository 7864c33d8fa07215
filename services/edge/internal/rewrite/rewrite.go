// Package rewrite turns an OpenAI-compatible provider's chat answer, or
// each chunk of its stream, into the client's: the edge's request id, the
// canonical model name, the serving provider, and usage carrying what the
// client is billed. It also reads what the edge needs from each chunk: does
// it carry a token (Info.Token says what counts as one), did a
// choice finish, the provider's usage, an error object, and the size of the
// generated text. Framing of the event stream is the sse package's.
package rewrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonobj"
)

// Info is what the edge learns from one answer or stream chunk.
type Info struct {
	// Token is set when the chunk carries a token: a non-empty
	// delta.content, delta.reasoning_content or delta.reasoning, a non-empty
	// delta.tool_calls, or a finish_reason.
	Token bool
	// Finish is set when a choice finished.
	Finish bool
	// Usage is the provider's usage, when the chunk carries it.
	Usage *pricing.Usage
	// ErrMsg is set when the chunk is an error object instead of an answer.
	ErrMsg string
	// TextBytes is the size of the generated text the chunk carries (content,
	// reasoning, tool call names and arguments), for estimating output tokens
	// when the provider reports no usage.
	TextBytes int64
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

// Rewriter turns a provider's answer or chunks into the client's: id set to
// the edge's request id, model to the canonical model, a top-level provider,
// and usage carrying what the client is billed as usage.cost.
type Rewriter struct {
	// ID replaces the provider's completion id; nil keeps it.
	ID json.RawMessage
	// Model and Provider are JSON strings.
	Model, Provider json.RawMessage
	// KeepUsage forwards usage to the client; without it a usage-only chunk
	// is dropped and usage removed from other chunks.
	KeepUsage bool
	// Cost prices a usage for the client, set as usage.cost; nil adds none.
	Cost func(pricing.Usage) float64
	// AddUsage builds a usage object for an answer without one, from the
	// generated text's size; nil adds none. Used for non-streamed answers.
	AddUsage func(textBytes int64) json.RawMessage
}

// Rewrite inspects one answer or chunk and re-encodes it for the client. It
// returns a nil output for a usage-only chunk the client did not ask for.
// Every other field passes through unchanged.
func (rw *Rewriter) Rewrite(data []byte) ([]byte, Info, error) {
	var info Info
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return nil, info, fmt.Errorf("%w: not a JSON object", errMalformed)
	}
	rawChoices, hasChoices := fields["choices"]
	if e, ok := fields["error"]; ok && !isNull(e) && !hasChoices {
		info.ErrMsg = ParseError(data).Message
		if info.ErrMsg == "" {
			info.ErrMsg = "provider sent an error"
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
			info.Finish = true
		}
		if m := c.Message; m != nil {
			info.TextBytes += int64(len(m.Content)+len(m.ReasoningContent)+len(m.Reasoning)) + toolCallText(m.ToolCalls)
		}
		if c.Delta == nil {
			continue
		}
		hasTools := len(c.Delta.ToolCalls) > 0 && !isNull(c.Delta.ToolCalls) && string(bytes.TrimSpace(c.Delta.ToolCalls)) != "[]"
		if nonEmpty(c.Delta.Content) || nonEmpty(c.Delta.ReasoningContent) || nonEmpty(c.Delta.Reasoning) || hasTools {
			info.Token = true
		}
		info.TextBytes += strLen(c.Delta.Content) + strLen(c.Delta.ReasoningContent) + strLen(c.Delta.Reasoning)
		if hasTools {
			info.TextBytes += toolCallText(c.Delta.ToolCalls)
		}
	}
	info.Token = info.Token || info.Finish
	if hasUsage {
		var u usageView
		if json.Unmarshal(rawUsage, &u) == nil {
			info.Usage = &pricing.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
			switch {
			case u.PromptTokensDetails != nil:
				info.Usage.CachedInput = u.PromptTokensDetails.CachedTokens
			case u.PromptCacheHitTokens != nil:
				info.Usage.CachedInput = *u.PromptCacheHitTokens
			}
		}
	}
	switch {
	case !rw.KeepUsage:
		if hasUsage && len(choices) == 0 {
			return nil, info, nil
		}
		delete(fields, "usage")
	case info.Usage != nil && rw.Cost != nil:
		fields["usage"] = withCost(rawUsage, rw.Cost(*info.Usage))
	case !hasUsage && rw.AddUsage != nil:
		fields["usage"] = rw.AddUsage(info.TextBytes)
	}
	if rw.ID != nil {
		fields["id"] = rw.ID
	}
	fields["model"] = rw.Model
	fields["provider"] = rw.Provider
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

// String is s as a JSON string.
func String(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
