package rewrite

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonobj"
)

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

// refToolCallText is the generated text of a tool_calls array: every function
// name and arguments string. Anything unreadable counts as none.
func refToolCallText(raw json.RawMessage) int64 {
	if len(raw) == 0 || refIsNull(raw) {
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

func refStrLen(s *string) int64 {
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

// referenceRewrite is how the edge rewrote answers and chunks before it
// did so on the bytes: every chunk decoded into a map and re-encoded. The
// tests hold Rewrite to it.
func (rw *Rewriter) referenceRewrite(data []byte) ([]byte, Info, error) {
	var info Info
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return nil, info, fmt.Errorf("%w: not a JSON object", errMalformed)
	}
	rawChoices, hasChoices := fields["choices"]
	if e, ok := fields["error"]; ok && !refIsNull(e) && !hasChoices {
		info.ErrMsg = ParseError(data).Message
		if info.ErrMsg == "" {
			info.ErrMsg = "provider sent an error"
		}
		return nil, info, nil
	}
	rawUsage, hasUsage := fields["usage"]
	hasUsage = hasUsage && !refIsNull(rawUsage)
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
			info.TextBytes += int64(len(m.Content)+len(m.ReasoningContent)+len(m.Reasoning)) + refToolCallText(m.ToolCalls)
		}
		if c.Delta == nil {
			continue
		}
		hasTools := len(c.Delta.ToolCalls) > 0 && !refIsNull(c.Delta.ToolCalls) && string(bytes.TrimSpace(c.Delta.ToolCalls)) != "[]"
		if refNonEmpty(c.Delta.Content) || refNonEmpty(c.Delta.ReasoningContent) || refNonEmpty(c.Delta.Reasoning) || hasTools {
			info.Token = true
		}
		info.TextBytes += refStrLen(c.Delta.Content) + refStrLen(c.Delta.ReasoningContent) + refStrLen(c.Delta.Reasoning)
		if hasTools {
			info.TextBytes += refToolCallText(c.Delta.ToolCalls)
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
		fields["usage"] = referenceWithCost(rawUsage, rw.Cost(*info.Usage))
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

// referenceWithCost returns the usage object with cost set (replacing a provider's
// own cost field, which is in the provider's terms, not the client's bill).
func referenceWithCost(rawUsage json.RawMessage, cost float64) json.RawMessage {
	var u map[string]json.RawMessage
	if json.Unmarshal(rawUsage, &u) != nil || u == nil {
		return rawUsage
	}
	u["cost"] = appendCost(nil, cost)
	return jsonobj.Encode(u)
}

func refNonEmpty(s *string) bool { return s != nil && *s != "" }

func refIsNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }
