package clientapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
)

// EncodeChat writes a translated chat request body: JSON without HTML
// escaping (a prompt's "<" stays as the client sent it), no trailing
// newline.
func EncodeChat(out map[string]any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, &chatreq.Error{Message: "the request could not be translated: " + err.Error()}
	}
	return bytes.TrimSpace(b.Bytes()), nil
}

// The chat-completions shapes a client API's translation writes (the
// request) and reads (the answer and its chunks), and the JSON helpers
// every translation uses.

// ChatMessage is one message of a chat request.
type ChatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCalls  []ChatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

// ChatPart is one content part of a chat message: text or an image.
type ChatPart struct {
	Type     string        `json:"type"`
	Text     *string       `json:"text,omitempty"`
	ImageURL *ChatImageURL `json:"image_url,omitempty"`
}

// ChatImageURL is an image part's image.
type ChatImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

// ChatToolCall is one tool call of an assistant message.
type ChatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function ChatFunction `json:"function"`
}

// ChatFunction is a tool call's function and its arguments (JSON text).
type ChatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatTool is one function tool of a chat request.
type ChatTool struct {
	Type     string      `json:"type"`
	Function ChatToolDef `json:"function"`
}

// ChatToolDef is a function tool's definition.
type ChatToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ChatAnswer is a chat completion or one chunk of its stream, as the edge
// answers it: with the provider that served it.
type ChatAnswer struct {
	ID       string       `json:"id"`
	Model    string       `json:"model"`
	Provider string       `json:"provider"`
	Choices  []ChatChoice `json:"choices"`
	Usage    *ChatUsage   `json:"usage"`
	Error    any          `json:"error"`
}

// ChatChoice is a completion's choice, or a chunk's.
type ChatChoice struct {
	Message      *ChatMessageOut `json:"message"`
	Delta        *ChatMessageOut `json:"delta"`
	FinishReason *string         `json:"finish_reason"`
	// StopReason is the stop string some providers (vLLM) name.
	StopReason any `json:"stop_reason"`
}

// ChatMessageOut is a choice's message, or a chunk's delta.
type ChatMessageOut struct {
	Content *string `json:"content"`
	// ReasoningContent and Reasoning are the provider's reasoning, under
	// either name providers give it.
	ReasoningContent *string             `json:"reasoning_content"`
	ReasoningText    *string             `json:"reasoning"`
	ToolCalls        []ChatToolCallDelta `json:"tool_calls"`
}

// Reasoning is the message's reasoning text, "" when it has none.
func (m *ChatMessageOut) Reasoning() string {
	switch {
	case m.ReasoningContent != nil && *m.ReasoningContent != "":
		return *m.ReasoningContent
	case m.ReasoningText != nil:
		return *m.ReasoningText
	}
	return ""
}

// ChatToolCallDelta is a tool call of a message, or a chunk's part of one.
type ChatToolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// ChatUsage is a chat usage object: its prompt_tokens include the cached
// ones; cost is the edge's (USD).
type ChatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens     int64 `json:"cached_tokens"`
		CacheWriteTokens int64 `json:"cache_write_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
	Cost json.RawMessage `json:"cost"`
}

// Chunk is one event of a chat stream, read.
type Chunk struct {
	// Done is set for the stream's end, "[DONE]".
	Done bool
	// Failed is set for an error the stream ended with instead (an error
	// object, or data that is not JSON); ErrType and ErrMessage say what
	// it was ("" and a default message when it did not say).
	Failed     bool
	ErrType    string
	ErrMessage string
	// Answer is the chunk, when neither of the above.
	Answer ChatAnswer
}

// ReadChunk reads one chat stream event's data.
func ReadChunk(data []byte) Chunk {
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return Chunk{Done: true}
	}
	var c Chunk
	if err := json.Unmarshal(data, &c.Answer); err != nil {
		return Chunk{Failed: true, ErrMessage: "the provider's answer could not be read"}
	}
	if a := c.Answer; a.Error != nil && len(a.Choices) == 0 {
		c.Failed, c.ErrMessage = true, "the provider's stream failed"
		if m, isObj := a.Error.(map[string]any); isObj {
			if v, isStr := m["message"].(string); isStr && v != "" {
				c.ErrMessage = v
			}
			c.ErrType, _ = m["type"].(string)
		}
	}
	return c
}

// ReadCompletion reads a chat completion body: the answer and its first
// choice, which has a message.
func ReadCompletion(body []byte) (*ChatAnswer, *ChatChoice, error) {
	var a ChatAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, nil, fmt.Errorf("decode chat completion: %w", err)
	}
	if len(a.Choices) == 0 || a.Choices[0].Message == nil {
		return nil, nil, errors.New("decode chat completion: no choice")
	}
	return &a, &a.Choices[0], nil
}

// MaxToolName bounds a tool's name, whose characters are those of
// ValidToolName (the chat API's rule, and Anthropic's and OpenAI's).
const MaxToolName = 64

// ValidToolName reports whether name is 1 to MaxToolName of A-Z a-z 0-9 _ -.
func ValidToolName(name string) bool {
	if name == "" || len(name) > MaxToolName {
		return false
	}
	for i := range len(name) {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Null reports whether raw is absent or JSON null.
func Null(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// Object compacts raw, which must be a JSON object; ok is false when it
// is not one.
func Object(raw json.RawMessage) (json.RawMessage, bool) {
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil || c.Len() == 0 || c.Bytes()[0] != '{' {
		return nil, false
	}
	return c.Bytes(), true
}

// Truncate cuts s to n bytes, marking the cut, for quoting a client's
// value in an error.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
