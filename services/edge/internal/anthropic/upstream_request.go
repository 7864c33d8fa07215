package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// What the edge sends an endpoint that speaks the Messages API itself
// (catalog api: anthropic): a Messages client's own body with only the
// model changed (NativeBody), or a chat request translated into a Messages
// request (FromChatRequest), the inverse of ToChat.

// DefaultMaxTokens is the max_tokens of a translated chat request that
// sets none: the Messages API requires one, and 4096 is what every model
// sold behind it produces at least.
const DefaultMaxTokens = 4096

// NativeBody is a Messages client's body for an anthropic endpoint: the
// same members, model set to the endpoint's model name and the edge's own
// provider routing options removed. Everything else (cache_control
// breakpoints, thinking blocks and their signatures, Anthropic's tools,
// betas' fields) passes as the client sent it.
func NativeBody(body []byte, model string) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return nil, errors.New("the request body is not a JSON object")
	}
	delete(obj, "provider")
	m, err := json.Marshal(model)
	if err != nil {
		return nil, fmt.Errorf("encode model: %w", err)
	}
	obj["model"] = m
	return json.Marshal(obj)
}

// chatRequestIn is the part of a chat-completions request the Messages
// translation reads.
type chatRequestIn struct {
	Messages            []chatMessageIn `json:"messages"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Stop                json.RawMessage `json:"stop"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int64          `json:"top_k"`
	Stream              bool            `json:"stream"`
	Tools               []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	User              string          `json:"user"`
}

type chatMessageIn struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// chatPartIn is one part of a chat message's content.
type chatPartIn struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

// outMessage is one message of the translated request.
type outMessage struct {
	Role    string           `json:"role"`
	Content []map[string]any `json:"content"`
}

// FromChatRequest translates a chat-completions request (as the edge sends
// it upstream, model already set) into a Messages request for model:
// system and developer messages → system, text and image parts → blocks,
// assistant tool_calls → tool_use, tool messages → tool_result blocks,
// function tools → tools, tool_choice and parallel_tool_calls →
// tool_choice, stop → stop_sequences, max_completion_tokens or max_tokens
// (else DefaultMaxTokens) → max_tokens, user → metadata.user_id.
// Consecutive messages of one role are merged, as the Messages API wants
// turns to alternate.
func FromChatRequest(chat []byte, model string) ([]byte, error) {
	var in chatRequestIn
	if err := json.Unmarshal(chat, &in); err != nil {
		return nil, fmt.Errorf("decode chat request: %w", err)
	}
	out := map[string]any{"model": model, "max_tokens": DefaultMaxTokens}
	switch {
	case in.MaxCompletionTokens != nil && *in.MaxCompletionTokens > 0:
		out["max_tokens"] = *in.MaxCompletionTokens
	case in.MaxTokens != nil && *in.MaxTokens > 0:
		out["max_tokens"] = *in.MaxTokens
	}
	var system []map[string]any
	var msgs []outMessage
	add := func(role string, blocks ...map[string]any) {
		if len(blocks) == 0 {
			return
		}
		if n := len(msgs); n > 0 && msgs[n-1].Role == role {
			msgs[n-1].Content = append(msgs[n-1].Content, blocks...)
			return
		}
		msgs = append(msgs, outMessage{Role: role, Content: blocks})
	}
	for i, m := range in.Messages {
		blocks, err := chatContent(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		switch m.Role {
		case "system", "developer":
			system = append(system, blocks...)
		case "user":
			add("user", blocks...)
		case "assistant":
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name,
					"input": toolInput(tc.Function.Arguments)})
			}
			add("assistant", blocks...)
		case "tool":
			res := map[string]any{"type": "tool_result", "tool_use_id": m.ToolCallID}
			if len(blocks) > 0 {
				res["content"] = blocks
			}
			add("user", res)
		default:
			return nil, fmt.Errorf("messages[%d].role: %q is not a chat role", i, m.Role)
		}
	}
	if msgs == nil {
		msgs = []outMessage{}
	}
	out["messages"] = msgs
	if len(system) > 0 {
		out["system"] = system
	}
	if stops := stopList(in.Stop); len(stops) > 0 {
		out["stop_sequences"] = stops
	}
	for k, v := range map[string]any{"temperature": in.Temperature, "top_p": in.TopP, "top_k": in.TopK} {
		switch p := v.(type) {
		case *float64:
			if p != nil {
				out[k] = *p
			}
		case *int64:
			if p != nil {
				out[k] = *p
			}
		}
	}
	if in.Stream {
		out["stream"] = true
	}
	if in.User != "" {
		out["metadata"] = map[string]string{"user_id": in.User}
	}
	if len(in.Tools) > 0 {
		tools := make([]map[string]any, 0, len(in.Tools))
		for _, t := range in.Tools {
			schema := t.Function.Parameters
			if null(schema) {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			tool := map[string]any{"name": t.Function.Name, "input_schema": schema}
			if t.Function.Description != "" {
				tool["description"] = t.Function.Description
			}
			tools = append(tools, tool)
		}
		out["tools"] = tools
		if tc := messagesToolChoice(in.ToolChoice, in.ParallelToolCalls); tc != nil {
			out["tool_choice"] = tc
		}
	}
	return json.Marshal(out)
}

// chatContent turns a chat message's content (a string, parts or null)
// into Messages content blocks.
func chatContent(raw json.RawMessage) ([]map[string]any, error) {
	if null(raw) {
		return nil, nil
	}
	if s, ok := str(raw); ok {
		if s == "" {
			return nil, nil
		}
		return []map[string]any{{"type": "text", "text": s}}, nil
	}
	var parts []chatPartIn
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, errors.New("must be a string or a list of parts")
	}
	var blocks []map[string]any
	for _, p := range parts {
		switch p.Type {
		case "text":
			if p.Text != "" {
				blocks = append(blocks, map[string]any{"type": "text", "text": p.Text})
			}
		case "image_url":
			blocks = append(blocks, map[string]any{"type": "image", "source": imageSource(p.ImageURL.URL)})
		}
	}
	return blocks, nil
}

// imageSource is a Messages image source for a chat image_url: a data URL
// becomes base64 data, any other URL a url source.
func imageSource(u string) map[string]any {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		if media, data, ok := strings.Cut(rest, ";base64,"); ok {
			return map[string]any{"type": "base64", "media_type": media, "data": data}
		}
	}
	return map[string]any{"type": "url", "url": u}
}

// stopList reads chat's stop: a string or a list of them.
func stopList(raw json.RawMessage) []string {
	if s, ok := str(raw); ok {
		if s == "" {
			return nil
		}
		return []string{s}
	}
	var l []string
	_ = json.Unmarshal(raw, &l)
	return l
}

// messagesToolChoice maps chat's tool_choice and parallel_tool_calls onto
// Messages' tool_choice: auto → auto, required → any, none → none, a named
// function → tool; nil when neither says anything.
func messagesToolChoice(raw json.RawMessage, parallel *bool) map[string]any {
	var tc map[string]any
	if s, ok := str(raw); ok {
		switch s {
		case "auto":
			tc = map[string]any{"type": "auto"}
		case "required":
			tc = map[string]any{"type": "any"}
		case "none":
			tc = map[string]any{"type": "none"}
		}
	} else if !null(raw) {
		var named struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &named) == nil && named.Function.Name != "" {
			tc = map[string]any{"type": "tool", "name": named.Function.Name}
		}
	}
	if parallel != nil && !*parallel {
		if tc == nil {
			tc = map[string]any{"type": "auto"}
		}
		if tc["type"] != "none" {
			tc["disable_parallel_tool_use"] = true
		}
	}
	return tc
}
