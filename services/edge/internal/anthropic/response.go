package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
)

// Message is Anthropic's non-streamed answer.
type Message struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []ContentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        Usage          `json:"usage"`
}

// ContentBlock is a thinking, text or tool_use block of an answer.
type ContentBlock struct {
	Type string `json:"type"`
	// Thinking and Signature are a thinking block's; the signature is
	// empty: the reasoning is the provider's, which Anthropic did not sign.
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	Text      *string         `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// Usage is Anthropic's token accounting: input_tokens excludes the tokens
// read from or written to the prompt cache, which have their own counts.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// chatUsage is the chat-completions usage the answer's translation reads.
type chatUsage = clientapi.ChatUsage

// usageOf converts a chat usage: cache reads and writes taken out of the
// input tokens, none of them below zero.
func usageOf(u *chatUsage) Usage {
	out := Usage{InputTokens: max(u.PromptTokens, 0), OutputTokens: max(u.CompletionTokens, 0)}
	if d := u.PromptTokensDetails; d != nil {
		out.CacheReadInputTokens = min(max(d.CachedTokens, 0), out.InputTokens)
		out.CacheCreationInputTokens = min(max(d.CacheWriteTokens, 0), out.InputTokens-out.CacheReadInputTokens)
		out.InputTokens -= out.CacheReadInputTokens + out.CacheCreationInputTokens
	}
	return out
}

// MessageID is the Anthropic id of the answer to the request with the
// edge's request id reqID: "msg_" and the id's own part, so the two are
// told from each other and either leads to the other.
func MessageID(reqID string) string {
	return "msg_" + strings.TrimPrefix(reqID, "gen-")
}

// toolUseID is a tool call's id, or one made from the message's when the
// provider sent none.
func toolUseID(id, msgID string, i int) string {
	if id != "" {
		return id
	}
	return fmt.Sprintf("toolu_%s_%d", strings.TrimPrefix(msgID, "msg_"), i)
}

// stopReason maps a chat finish_reason to Anthropic's stop_reason and
// stop_sequence. A provider that names the stop string it stopped on
// (stop_reason, as vLLM sends it) gets stop_sequence when it is one the
// client asked for.
func stopReason(finish *string, named any, stops []string) (reason string, seq *string) {
	f := ""
	if finish != nil {
		f = *finish
	}
	switch f {
	case "length":
		return "max_tokens", nil
	case "tool_calls", "function_call":
		return "tool_use", nil
	case "content_filter":
		return "refusal", nil
	}
	if s, ok := named.(string); ok {
		for _, st := range stops {
			if s == st {
				return "stop_sequence", &s
			}
		}
	}
	return "end_turn", nil
}

// FromChat translates a chat completion body into Anthropic's message.
func FromChat(body []byte, reqID string, req Request) ([]byte, error) {
	a, ch, err := clientapi.ReadCompletion(body)
	if err != nil {
		return nil, err
	}
	m := Message{ID: MessageID(reqID), Type: "message", Role: "assistant", Model: a.Model, Content: []ContentBlock{}}
	if m.Model == "" {
		m.Model = req.Model
	}
	if r := ch.Message.Reasoning(); r != "" && req.Thinking {
		m.Content = append(m.Content, ContentBlock{Type: "thinking", Thinking: &r, Signature: new(string)})
	}
	if c := ch.Message.Content; c != nil && *c != "" {
		m.Content = append(m.Content, ContentBlock{Type: "text", Text: c})
	}
	for i, tc := range ch.Message.ToolCalls {
		m.Content = append(m.Content, ContentBlock{Type: "tool_use", ID: toolUseID(tc.ID, m.ID, i),
			Name: tc.Function.Name, Input: toolInput(tc.Function.Arguments)})
	}
	reason, seq := stopReason(ch.FinishReason, ch.StopReason, req.StopSequences)
	if len(ch.Message.ToolCalls) > 0 {
		// Some providers finish a tool turn with "stop".
		reason, seq = "tool_use", nil
	}
	m.StopReason, m.StopSequence = &reason, seq
	if a.Usage != nil {
		m.Usage = usageOf(a.Usage)
	}
	return json.Marshal(m)
}

// toolInput is a tool call's arguments as a JSON object: {} when the
// provider sent none, and the text under "arguments" when what it sent is
// not an object, so the client sees it rather than a decoding error.
func toolInput(args string) json.RawMessage {
	args = strings.TrimSpace(args)
	if args == "" {
		return json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) == nil && obj != nil {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(map[string]string{"arguments": args})
	return b
}
