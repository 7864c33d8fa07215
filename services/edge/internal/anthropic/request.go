// Package anthropic is the edge's Anthropic Messages API: it translates a
// Messages request into the chat-completions request the edge routes and
// serves, and the chat-completions answer (a body or a stream of chunks)
// back into Anthropic's message, its stream events and its errors, so a
// Messages client (Claude Code, the Anthropic SDKs) sees the Anthropic API
// whichever provider serves it. For endpoints that speak the Messages API
// themselves (catalog api: anthropic) it also owns the other direction
// (upstream_request.go, upstream_answer.go): a Messages client's request
// relayed as it is and its answer read on the way (Relay), or a chat
// request translated into a Messages request and the answer back into
// chat (FromChatRequest, ChatAnswer, ChatStream).
package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-ai/switchboard/pkg/numfmt"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
)

// Request is what the answer's translation needs to know of the Messages
// request it answers.
type Request struct {
	// Model is the model the client asked for.
	Model string
	// Stream is whether the client asked for a stream of events.
	Stream bool
	// StopSequences are the client's stop_sequences, to name the one an
	// answer stopped on when the provider says which.
	StopSequences []string
	// Thinking is whether the client asked for extended thinking: the
	// provider's reasoning, if it sends any, is then answered as thinking
	// blocks (without a signature); otherwise it is dropped.
	Thinking bool
	// CacheWriteTokens is the estimated prompt, in Anthropic's cache order
	// (tools, system, messages), up to its last cache_control breakpoint,
	// and CacheWrite1hTokens up to its last breakpoint with ttl 1h: what an
	// endpoint caching by breakpoint writes when it holds none of it. 0
	// without breakpoints. (cacheBreakpoints)
	CacheWriteTokens, CacheWrite1hTokens int64
}

// Options say what ToChat requires of a request.
type Options struct {
	// CountOnly accepts a request without max_tokens, as count_tokens
	// takes one (Optional).
	CountOnly bool
}

// wireRequest is the part of a Messages request the edge reads. Every
// field stays raw and is decoded by the translation of that field, so an
// error names it. Fields not listed (service_tier, container,
// context_management...) are ignored: the providers behind the edge have
// no use for them.
type wireRequest struct {
	Model json.RawMessage `json:"model"`
	// Messages is decoded with the body, in the one pass that checks it:
	// decoding it again from raw JSON would make a long conversation cost
	// another pass.
	Messages      []wireMessage   `json:"messages"`
	System        json.RawMessage `json:"system"`
	MaxTokens     json.RawMessage `json:"max_tokens"`
	StopSequences json.RawMessage `json:"stop_sequences"`
	Stream        json.RawMessage `json:"stream"`
	Temperature   json.RawMessage `json:"temperature"`
	TopP          json.RawMessage `json:"top_p"`
	TopK          json.RawMessage `json:"top_k"`
	Metadata      json.RawMessage `json:"metadata"`
	Tools         json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	Thinking      json.RawMessage `json:"thinking"`
	// Provider is the edge's own routing options, passed on as the chat
	// API takes them.
	Provider json.RawMessage `json:"provider"`
}

// block is one content block of a message, a system prompt or a tool
// result. Only the fields of the types the edge translates are read.
type block struct {
	Type string `json:"type"`
	// Text is a text block's.
	Text *string `json:"text"`
	// Source is an image's or a document's.
	Source *source `json:"source"`
	// ID, Name and Input are a tool_use block's.
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// ToolUseID, Content and IsError are a tool_result block's.
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type source struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

type wireMessage struct {
	Role    json.RawMessage `json:"role"`
	Content json.RawMessage `json:"content"`
}

type wireTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type wireToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// Chat-completions shapes the translation writes.
type (
	chatMessage  = clientapi.ChatMessage
	chatPart     = clientapi.ChatPart
	chatImageURL = clientapi.ChatImageURL
	chatToolCall = clientapi.ChatToolCall
	chatFunction = clientapi.ChatFunction
	chatTool     = clientapi.ChatTool
	chatToolDef  = clientapi.ChatToolDef
)

// Bounds of the chat API the translation must fit, checked here so a
// Messages client hears of them in its own terms.
const (
	// maxStopSequences bounds stop_sequences, as the chat API bounds stop.
	maxStopSequences = 4
	// maxTools bounds tools.
	maxTools = 128
	// maxToolName bounds a tool's name, whose characters are those of
	// validToolName (Anthropic's own rule as well as the chat API's).
	maxToolName = clientapi.MaxToolName
)

func fieldErr(param, format string, args ...any) *chatreq.Error {
	return &chatreq.Error{Param: param, Message: fmt.Sprintf(format, args...)}
}

// ToChat translates a Messages request body into a chat-completions
// request body, and returns what the answer's translation needs. It never
// panics; every failure is a *chatreq.Error naming the Messages field.
// The translation is deterministic, so a conversation's turns translate to
// chat requests whose prompts extend each other, as the edge's prompt
// hashes need.
func ToChat(body []byte, o Options) ([]byte, Request, error) {
	var req Request
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nil, req, &chatreq.Error{Message: "the request body must be a JSON object"}
	}
	if !utf8.Valid(body) {
		// Raw parts (schemas, tool inputs) pass on as they are.
		return nil, req, &chatreq.Error{Message: "the request body must be UTF-8 JSON"}
	}
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		// Messages is the one field not decoded as raw JSON.
		if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) && strings.HasPrefix(te.Field, "messages") {
			return nil, req, fieldErr("messages", "must be an array of message objects")
		}
		return nil, req, &chatreq.Error{Message: "the request body is not valid JSON: " + err.Error()}
	}
	out := map[string]any{}
	model, ok := str(w.Model)
	if !ok || model == "" {
		return nil, req, fieldErr("model", "must be a non-empty string")
	}
	req.Model = model
	out["model"] = model

	var msgs []chatMessage
	if !null(w.System) {
		text, err := systemText(w.System, "system")
		if err != nil {
			return nil, req, err
		}
		msgs = append(msgs, chatMessage{Role: "system", Content: text})
	}
	conv, err := messages(w.Messages)
	if err != nil {
		return nil, req, err
	}
	out["messages"] = append(msgs, conv...)

	switch {
	case !null(w.MaxTokens):
		n, err := strconv.ParseInt(string(bytes.TrimSpace(w.MaxTokens)), 10, 64)
		if err != nil || n < 1 || n > chatreq.MaxTokens {
			return nil, req, fieldErr("max_tokens", "must be an integer from 1 to %d", chatreq.MaxTokens)
		}
		out["max_tokens"] = n
	case !o.CountOnly:
		return nil, req, fieldErr("max_tokens", "is required")
	}
	if !null(w.Stream) {
		if err := json.Unmarshal(w.Stream, &req.Stream); err != nil {
			return nil, req, fieldErr("stream", "must be a boolean")
		}
		if req.Stream {
			out["stream"] = true
			// The usage chunk is what message_delta's usage is made of.
			out["stream_options"] = map[string]bool{"include_usage": true}
		}
	}
	if !null(w.StopSequences) {
		if err := json.Unmarshal(w.StopSequences, &req.StopSequences); err != nil {
			return nil, req, fieldErr("stop_sequences", "must be an array of strings")
		}
		if len(req.StopSequences) > maxStopSequences {
			return nil, req, fieldErr("stop_sequences", "must hold at most %d strings (the most the providers behind this gateway take)", maxStopSequences)
		}
		if len(req.StopSequences) > 0 {
			out["stop"] = req.StopSequences
		}
	}
	// Anthropic's ranges, narrower than the chat API's.
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		max  float64
		int  bool
	}{{"temperature", w.Temperature, 1, false}, {"top_p", w.TopP, 1, false}, {"top_k", w.TopK, chatreq.MaxTokens, true}} {
		if null(f.raw) {
			continue
		}
		var v float64
		if err := json.Unmarshal(f.raw, &v); err != nil || v < 0 || v > f.max || f.int && v != math.Trunc(v) {
			if f.int {
				return nil, req, fieldErr(f.name, "must be a non-negative integer")
			}
			return nil, req, fieldErr(f.name, "must be a number from 0 to %s", numfmt.Number(f.max))
		}
		out[f.name] = json.RawMessage(bytes.TrimSpace(f.raw))
	}
	if !null(w.Metadata) {
		var md struct {
			UserID *string `json:"user_id"`
		}
		if err := json.Unmarshal(w.Metadata, &md); err != nil {
			return nil, req, fieldErr("metadata", "must be an object with an optional string user_id")
		}
		if md.UserID != nil && *md.UserID != "" {
			out["user"] = *md.UserID
		}
	}
	if !null(w.Tools) {
		tools, err := toolsOf(w.Tools)
		if err != nil {
			return nil, req, err
		}
		if len(tools) > 0 {
			out["tools"] = tools
		}
	}
	if !null(w.ToolChoice) {
		if err := toolChoice(w.ToolChoice, out); err != nil {
			return nil, req, err
		}
	}
	if err := checkToolChoice(out); err != nil {
		return nil, req, err
	}
	if !null(w.Provider) {
		out["provider"] = json.RawMessage(bytes.TrimSpace(w.Provider))
	}
	if !null(w.Thinking) {
		// Not passed on (whether an endpoint reasons is its own), and
		// never an error: it only says whether reasoning is answered.
		var th struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(w.Thinking, &th)
		req.Thinking = th.Type == "enabled" || th.Type == "adaptive"
	}
	if bytes.Contains(body, []byte(`"cache_control"`)) {
		req.CacheWriteTokens, req.CacheWrite1hTokens = cacheBreakpoints(&w)
	}
	chat, err := clientapi.EncodeChat(out)
	return chat, req, err
}

// systemText is a system prompt (the request's, or a system message's
// content at param), a string or an array of text blocks, as one string:
// the blocks joined by blank lines, as the model would read them.
func systemText(raw json.RawMessage, param string) (string, error) {
	if s, ok := str(raw); ok {
		return s, nil
	}
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", fieldErr(param, "must be a string or an array of text blocks")
	}
	parts := make([]string, 0, len(blocks))
	for i, b := range blocks {
		if b.Type != "text" || b.Text == nil {
			return "", fieldErr(fmt.Sprintf("%s[%d]", param, i), "must be a text block")
		}
		parts = append(parts, *b.Text)
	}
	return strings.Join(parts, "\n\n"), nil
}

// messages translates the conversation. An assistant message becomes one
// assistant message (its text, its tool_use blocks as tool calls); a user
// message becomes a tool message per tool_result block, first, as the chat
// API wants them right after the assistant's calls, then a user message
// with the rest of its blocks, if any; a system message (the Messages
// API's mid-conversation instructions, which Claude Code sends after its
// first user turn) becomes a system message where it stands, as the chat
// API takes them anywhere.
func messages(in []wireMessage) ([]chatMessage, error) {
	if in == nil {
		return nil, fieldErr("messages", "is required")
	}
	if len(in) == 0 {
		return nil, fieldErr("messages", "must contain at least one message")
	}
	var out []chatMessage
	for i, m := range in {
		param := fmt.Sprintf("messages[%d]", i)
		blocks, text, err := contentBlocks(m.Content, param+".content")
		if err != nil {
			return nil, err
		}
		role, _ := str(m.Role)
		switch role {
		case "user":
			msgs, err := userMessages(blocks, text, param+".content")
			if err != nil {
				return nil, err
			}
			out = append(out, msgs...)
		case "assistant":
			msg, err := assistantMessage(blocks, text, param+".content")
			if err != nil {
				return nil, err
			}
			out = append(out, msg)
		case "system":
			sys, err := systemText(m.Content, param+".content")
			if err != nil {
				return nil, err
			}
			out = append(out, chatMessage{Role: "system", Content: sys})
		default:
			return nil, fieldErr(param+".role", `must be "user", "assistant" or "system"`)
		}
	}
	return out, nil
}

// contentBlocks reads a message's content: a string (returned as text,
// blocks nil) or an array of blocks.
func contentBlocks(raw json.RawMessage, param string) ([]block, *string, error) {
	if s, ok := str(raw); ok {
		return nil, &s, nil
	}
	var blocks []block
	if null(raw) || json.Unmarshal(raw, &blocks) != nil {
		return nil, nil, fieldErr(param, "must be a string or an array of content blocks")
	}
	return blocks, nil, nil
}

func userMessages(blocks []block, text *string, param string) ([]chatMessage, error) {
	if text != nil {
		return []chatMessage{{Role: "user", Content: *text}}, nil
	}
	var out []chatMessage
	var parts []chatPart
	for j, b := range blocks {
		bp := fmt.Sprintf("%s[%d]", param, j)
		switch b.Type {
		case "tool_result":
			if b.ToolUseID == "" {
				return nil, fieldErr(bp+".tool_use_id", "must be a non-empty string")
			}
			content, images, err := toolResult(b, bp)
			if err != nil {
				return nil, err
			}
			out = append(out, chatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: content})
			// A tool message carries text only: its images follow in the
			// user message.
			parts = append(parts, images...)
		case "thinking", "redacted_thinking":
			// Nothing a chat provider can take.
		default:
			p, err := part(b, bp)
			if err != nil {
				return nil, err
			}
			parts = append(parts, p)
		}
	}
	switch {
	case len(parts) == 1 && parts[0].Type == "text":
		out = append(out, chatMessage{Role: "user", Content: *parts[0].Text})
	case len(parts) > 0:
		out = append(out, chatMessage{Role: "user", Content: parts})
	case len(out) == 0:
		return nil, fieldErr(param, "must contain at least one content block")
	}
	return out, nil
}

// part translates a text, image or text document block.
func part(b block, param string) (chatPart, error) {
	switch b.Type {
	case "text":
		if b.Text == nil {
			return chatPart{}, fieldErr(param+".text", "must be a string")
		}
		return chatPart{Type: "text", Text: b.Text}, nil
	case "image":
		if b.Source == nil {
			return chatPart{}, fieldErr(param+".source", "is required")
		}
		switch b.Source.Type {
		case "base64":
			if b.Source.MediaType == "" || b.Source.Data == "" {
				return chatPart{}, fieldErr(param+".source", "a base64 image needs media_type and data")
			}
			return chatPart{Type: "image_url", ImageURL: &chatImageURL{URL: "data:" + b.Source.MediaType + ";base64," + b.Source.Data}}, nil
		case "url":
			if b.Source.URL == "" {
				return chatPart{}, fieldErr(param+".source.url", "must be a non-empty string")
			}
			return chatPart{Type: "image_url", ImageURL: &chatImageURL{URL: b.Source.URL}}, nil
		}
		return chatPart{}, fieldErr(param+".source.type", `must be "base64" or "url"`)
	case "document":
		if b.Source != nil && b.Source.Type == "text" {
			t := b.Source.Data
			return chatPart{Type: "text", Text: &t}, nil
		}
		return chatPart{}, fieldErr(param, "only plain-text documents are supported")
	case "":
		return chatPart{}, fieldErr(param+".type", "must be a non-empty string")
	}
	return chatPart{}, fieldErr(param+".type", "content blocks of type %q are not supported here", truncate(b.Type, 40))
}

// toolResult is a tool_result's content as the tool message's text, and
// its images. An error result says so in its text: the chat API has no
// flag for it.
func toolResult(b block, param string) (string, []chatPart, error) {
	var text strings.Builder
	var images []chatPart
	if s, ok := str(b.Content); ok {
		text.WriteString(s)
	} else if !null(b.Content) {
		var blocks []block
		if err := json.Unmarshal(b.Content, &blocks); err != nil {
			return "", nil, fieldErr(param+".content", "must be a string or an array of content blocks")
		}
		for k, c := range blocks {
			p, err := part(c, fmt.Sprintf("%s.content[%d]", param, k))
			if err != nil {
				return "", nil, err
			}
			if p.Type != "text" {
				images = append(images, p)
				continue
			}
			if text.Len() > 0 {
				text.WriteString("\n")
			}
			text.WriteString(*p.Text)
		}
	}
	if b.IsError {
		return "Error: " + text.String(), images, nil
	}
	return text.String(), images, nil
}

func assistantMessage(blocks []block, text *string, param string) (chatMessage, error) {
	msg := chatMessage{Role: "assistant"}
	if text != nil {
		msg.Content = *text
		return msg, nil
	}
	var b strings.Builder
	for j, bl := range blocks {
		bp := fmt.Sprintf("%s[%d]", param, j)
		switch bl.Type {
		case "text":
			if bl.Text == nil {
				return msg, fieldErr(bp+".text", "must be a string")
			}
			b.WriteString(*bl.Text)
		case "tool_use":
			if bl.ID == "" || bl.Name == "" {
				return msg, fieldErr(bp, "a tool_use block needs an id and a name")
			}
			if !validToolName(bl.Name) {
				return msg, fieldErr(bp+".name", "must be 1 to %d of A-Z a-z 0-9 _ -", maxToolName)
			}
			args := "{}"
			if !null(bl.Input) {
				var c bytes.Buffer
				if err := json.Compact(&c, bl.Input); err != nil || c.Len() == 0 || c.Bytes()[0] != '{' {
					return msg, fieldErr(bp+".input", "must be an object")
				}
				args = c.String()
			}
			msg.ToolCalls = append(msg.ToolCalls, chatToolCall{ID: bl.ID, Type: "function",
				Function: chatFunction{Name: bl.Name, Arguments: args}})
		case "thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
			"code_execution_tool_result", "mcp_tool_use", "mcp_tool_result":
			// The provider's reasoning is not sent back to it; the calls of
			// Anthropic's own tools and their results were Anthropic's.
		default:
			return msg, fieldErr(bp+".type", "assistant content blocks of type %q are not supported here", truncate(bl.Type, 40))
		}
	}
	if b.Len() > 0 || len(msg.ToolCalls) == 0 {
		msg.Content = b.String()
	}
	return msg, nil
}

// toolsOf translates client tools into function tools. Anthropic's own
// tools, named by a type (web search and code execution, which run at
// Anthropic; bash and the text editor, whose schemas only Anthropic's
// models know), are dropped: the providers behind the edge can run none
// of them, and a client that offers one by default (as Claude Code may
// web search) must still be served.
func toolsOf(raw json.RawMessage) ([]chatTool, error) {
	var in []wireTool
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fieldErr("tools", "must be an array of tool objects")
	}
	out := make([]chatTool, 0, len(in))
	for i, t := range in {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != "" && t.Type != "custom" {
			continue
		}
		if !validToolName(t.Name) {
			return nil, fieldErr(param+".name", "must be 1 to %d of A-Z a-z 0-9 _ -", maxToolName)
		}
		if len(out) == maxTools {
			return nil, fieldErr("tools", "must hold at most %d tools (the most the providers behind this gateway take)", maxTools)
		}
		schema := json.RawMessage(`{"type":"object","properties":{}}`)
		if !null(t.InputSchema) {
			var c bytes.Buffer
			if err := json.Compact(&c, t.InputSchema); err != nil || c.Len() == 0 || c.Bytes()[0] != '{' {
				return nil, fieldErr(param+".input_schema", "must be an object")
			}
			schema = c.Bytes()
		}
		out = append(out, chatTool{Type: "function", Function: chatToolDef{Name: t.Name, Description: t.Description, Parameters: schema}})
	}
	return out, nil
}

// toolChoice sets the chat request's tool_choice (and parallel_tool_calls)
// from Anthropic's.
func toolChoice(raw json.RawMessage, out map[string]any) error {
	var tc wireToolChoice
	if err := json.Unmarshal(raw, &tc); err != nil {
		return fieldErr("tool_choice", "must be an object")
	}
	switch tc.Type {
	case "auto":
		out["tool_choice"] = "auto"
	case "any":
		out["tool_choice"] = "required"
	case "none":
		out["tool_choice"] = "none"
	case "tool":
		if tc.Name == "" {
			return fieldErr("tool_choice.name", "must be a non-empty string")
		}
		out["tool_choice"] = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
	default:
		return fieldErr("tool_choice.type", `must be one of "auto", "any", "tool", "none"`)
	}
	if tc.DisableParallelToolUse && tc.Type != "none" {
		out["parallel_tool_calls"] = false
	}
	return nil
}

// checkToolChoice refuses a tool_choice naming a tool the request does not
// declare, or asking for a tool call without tools, in the Messages API's
// terms: the chat parser would refuse it in its own.
func checkToolChoice(out map[string]any) error {
	tools, _ := out["tools"].([]chatTool)
	switch tc := out["tool_choice"].(type) {
	case string:
		if tc == "required" && len(tools) == 0 {
			return fieldErr("tool_choice", `"any" needs tools`)
		}
	case map[string]any:
		name := tc["function"].(map[string]string)["name"]
		for _, t := range tools {
			if t.Function.Name == name {
				return nil
			}
		}
		return fieldErr("tool_choice.name", "no tool named %q is declared in tools", truncate(name, 64))
	}
	return nil
}

// JSON helpers shared with the other client API translations.
var (
	str           = chatreq.String
	null          = clientapi.Null
	truncate      = clientapi.Truncate
	validToolName = clientapi.ValidToolName
)

// cacheMark is the cache_control of a tool, a system block or a content block.
type cacheMark struct {
	CacheControl *struct {
		TTL string `json:"ttl"`
	} `json:"cache_control"`
}

// cacheBreakpoints estimates the prompt up to its last cache breakpoint
// and up to its last 1-hour one, walking it in Anthropic's cache order
// (tools, system, messages) and counting each tool or block by the shared
// token rule over its JSON (pkg/tokens: a little more than its text, which
// the decider bounds by the prompt's estimate), each message with its
// overhead.
func cacheBreakpoints(w *wireRequest) (all, hour int64) {
	total := int64(tokens.PromptOverhead)
	walk := func(raw json.RawMessage) {
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			// A string: no breakpoint in it.
			total += tokens.Text(string(raw))
			return
		}
		for _, it := range items {
			total += tokens.Text(string(it))
			var m cacheMark
			if json.Unmarshal(it, &m) != nil || m.CacheControl == nil {
				continue
			}
			all = total
			if m.CacheControl.TTL == "1h" {
				hour = total
			}
		}
	}
	if !null(w.Tools) {
		walk(w.Tools)
	}
	if !null(w.System) {
		walk(w.System)
	}
	for _, m := range w.Messages {
		total += tokens.MessageOverhead
		walk(m.Content)
	}
	return all, hour
}
