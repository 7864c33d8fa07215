// Package chatapi holds the OpenAI chat-completions wire format as the
// simulator speaks it: the parser for untrusted request bodies and the
// response, chunk and error shapes that the official SDKs decode.
package chatapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

// Request is the part of a chat-completions request the simulator acts on.
// Every other field of the body is accepted and ignored, as a provider that
// does not support a parameter would.
type Request struct {
	// Model is the model id the client asked for.
	Model string
	// Messages are the chat messages with their content flattened to text.
	Messages []tokens.Message
	// Stream asks for a server-sent-event stream of chunks.
	Stream bool
	// IncludeUsage asks for a final usage chunk (stream_options.include_usage).
	IncludeUsage bool
	// MaxTokens is the output cap the client set, nil when it set none.
	// max_completion_tokens wins over the deprecated max_tokens when both are
	// sent, as on OpenAI's API.
	MaxTokens *int64
	// Tools is the compacted JSON of the tools array, empty when absent, so
	// its token cost does not depend on the client's whitespace.
	Tools []byte
}

// wireRequest mirrors the JSON body. Content stays raw because OpenAI accepts
// a string, an array of parts, or null there.
type wireRequest struct {
	Model    string        `json:"model"`
	Messages []wireMessage `json:"messages"`
	Stream   *bool         `json:"stream"`
	Options  *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Tools               json.RawMessage `json:"tools"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Name    string          `json:"name"`
	Content json.RawMessage `json:"content"`
}

type wirePart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ErrInvalidRequest marks every error ParseRequest returns, so the handler can
// answer 400 without inspecting messages.
var ErrInvalidRequest = errors.New("invalid request")

// ParseRequest decodes and checks a chat-completions body. It never panics on
// any input; every failure wraps ErrInvalidRequest with a message fit to show
// the client.
func ParseRequest(body []byte) (Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, fmt.Errorf("%w: body is not valid JSON for a chat completion: %w", ErrInvalidRequest, err)
	}
	var errs []error
	if w.Model == "" {
		errs = append(errs, fmt.Errorf("%w: model: required", ErrInvalidRequest))
	}
	if len(w.Messages) == 0 {
		errs = append(errs, fmt.Errorf("%w: messages: at least one message is required", ErrInvalidRequest))
	}
	req := Request{
		Model:    w.Model,
		Messages: make([]tokens.Message, 0, len(w.Messages)),
	}
	for i, m := range w.Messages {
		if m.Role == "" {
			errs = append(errs, fmt.Errorf("%w: messages[%d].role: required", ErrInvalidRequest, i))
		}
		text, err := contentText(m.Content)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: messages[%d].content: %w", ErrInvalidRequest, i, err))
		}
		req.Messages = append(req.Messages, tokens.Message{Role: m.Role, Name: m.Name, Content: text})
	}
	req.MaxTokens = w.MaxTokens
	param := "max_tokens"
	if w.MaxCompletionTokens != nil {
		req.MaxTokens = w.MaxCompletionTokens
		param = "max_completion_tokens"
	}
	if req.MaxTokens != nil && *req.MaxTokens < 1 {
		errs = append(errs, fmt.Errorf("%w: %s: must be at least 1, got %d", ErrInvalidRequest, param, *req.MaxTokens))
	}
	if w.Stream != nil {
		req.Stream = *w.Stream
	}
	if w.Options != nil && w.Options.IncludeUsage != nil {
		req.IncludeUsage = *w.Options.IncludeUsage
	}
	if len(w.Tools) > 0 && !bytes.Equal(w.Tools, []byte("null")) {
		var buf bytes.Buffer
		// The body already decoded, so the raw tools value is valid JSON.
		if err := json.Compact(&buf, w.Tools); err != nil {
			errs = append(errs, fmt.Errorf("%w: tools: %w", ErrInvalidRequest, err))
		}
		req.Tools = buf.Bytes()
	}
	if len(errs) > 0 {
		return Request{}, errors.Join(errs...)
	}
	return req, nil
}

// contentText flattens a message's content: a string as is, an array of parts
// as the concatenation of its text parts (images and audio carry no text), and
// null or absent as empty, which assistant messages with tool calls send.
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case '[':
		var parts []wirePart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", fmt.Errorf("must be a string or an array of content parts: %w", err)
		}
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" {
				b.WriteString(p.Text)
			}
		}
		return b.String(), nil
	default:
		return "", errors.New("must be a string or an array of content parts")
	}
}

// PromptTokens returns the prompt's token count by the shared rule of
// pkg/tokens, plus the tokens of the compacted tools JSON, so the gateway's
// estimator and the simulator agree on every request.
func (r Request) PromptTokens() int64 {
	n := tokens.Prompt(r.Messages)
	if len(r.Tools) > 0 {
		n += tokens.Text(string(r.Tools))
	}
	return n
}

// LastUserText returns the content of the last user message, empty if none.
func (r Request) LastUserText() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}
