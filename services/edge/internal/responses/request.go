// Package responses is the edge's OpenAI Responses API: it translates a
// Responses request (POST /v1/responses, as Codex CLI and the OpenAI SDKs
// send it) into the chat-completions request the edge routes and serves,
// and the chat-completions answer (a body or a stream of chunks) back into
// the Response object, its stream events and OpenAI's errors. Switchboard
// stores no responses: every request carries its whole input.
package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
)

// Request is what the answer's translation needs to know of the Responses
// request it answers: its model, whether it streams, and the parameters
// the Response object repeats.
type Request struct {
	// Model is the model the client asked for.
	Model string
	// Stream is whether the client asked for a stream of events.
	Stream bool
	// PromptCacheKey is the client's prompt_cache_key: the conversation
	// the request belongs to, "" when it sent none.
	PromptCacheKey string
	// CreatedAt is when the request was received, in Unix seconds (the
	// Response's created_at); set by the handler.
	CreatedAt int64

	echo echo
}

// echo is the request's parameters as the Response object repeats them.
type echo struct {
	Instructions      *string
	MaxOutputTokens   *int64
	Temperature       json.RawMessage
	TopP              json.RawMessage
	ParallelToolCalls bool
	ToolChoice        any
	Tools             []any
	Metadata          map[string]string
	Effort            *string
	Text              any
	Store             bool
	User              *string
}

// wireRequest is a Responses request's top level, every field raw, so an
// error names the field and each is decoded by its own translation.
type wireRequest map[string]json.RawMessage

// Top-level fields of the Responses API the edge reads, refuses or
// ignores. Any other is refused, as OpenAI refuses an unknown parameter.
var (
	// refused are parameters that need state the gateway does not keep,
	// refused when set, each with why.
	refused = map[string]string{
		"previous_response_id": "this gateway keeps no responses: send the whole conversation as input, with store: false",
		"conversation":         "this gateway keeps no conversations: send the whole conversation as input, with store: false",
		"prompt":               "this gateway keeps no prompt templates: send instructions and input",
	}
	// ignored are parameters accepted and not acted on: they tune
	// OpenAI's own service (its tiers, its truncation and caching, its
	// hosted tools) or describe the client (Codex CLI's client_metadata),
	// and mean nothing to the providers behind the edge.
	ignored = map[string]bool{
		"include": true, "service_tier": true, "truncation": true, "max_tool_calls": true, "top_logprobs": true,
		"stream_options": true, "prompt_cache_retention": true, "prompt_cache_options": true,
		"context_management": true, "moderation": true, "image": true, "access_programs": true, "client_metadata": true,
	}
	// read are the parameters the translation reads.
	read = map[string]bool{
		"model": true, "input": true, "instructions": true, "tools": true, "tool_choice": true,
		"parallel_tool_calls": true, "max_output_tokens": true, "temperature": true, "top_p": true,
		"reasoning": true, "text": true, "store": true, "metadata": true, "user": true, "safety_identifier": true,
		"prompt_cache_key": true, "stream": true, "background": true, "provider": true,
	}
)

// Bounds the translation checks, so a client hears of them in the
// Responses API's terms.
const (
	// minOutputTokens is OpenAI's least max_output_tokens.
	minOutputTokens = 16
	// maxTools bounds tools, as the chat API does.
	maxTools = 128
	// maxToolName bounds a function's name, whose characters are those
	// of validName.
	maxToolName = clientapi.MaxToolName
	// maxMetadata bounds metadata's keys, and maxMetadataKey and
	// maxMetadataValue their lengths, as OpenAI does.
	maxMetadata      = 16
	maxMetadataKey   = 64
	maxMetadataValue = 512
)

// efforts are the reasoning efforts passed on as reasoning_effort.
var efforts = map[string]bool{"none": true, "minimal": true, "low": true, "medium": true, "high": true, "xhigh": true}

// ToChat translates a Responses request body into a chat-completions
// request body, and returns what the answer's translation needs. It never
// panics; every failure is a *chatreq.Error naming the Responses field
// (its Param) with OpenAI's code. The translation is deterministic, so a
// conversation's turns translate to chat requests whose prompts extend
// each other, as the edge's prompt hashes need.
func ToChat(body []byte) ([]byte, Request, error) {
	var req Request
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nil, req, &chatreq.Error{Code: chatreq.CodeInvalidJSON, Message: "The request body must be a JSON object."}
	}
	if !utf8.Valid(body) {
		return nil, req, &chatreq.Error{Code: chatreq.CodeInvalidJSON, Message: "The request body must be UTF-8 JSON."}
	}
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, req, &chatreq.Error{Code: chatreq.CodeInvalidJSON,
			Message: "We could not parse the JSON body of your request: " + err.Error()}
	}
	if err := checkNames(w); err != nil {
		return nil, req, err
	}
	out := map[string]any{}
	model, ok := str(w["model"])
	switch {
	case null(w["model"]):
		return nil, req, missingErr("model")
	case !ok:
		return nil, req, typeErr("model", "a string")
	case model == "":
		return nil, req, &chatreq.Error{Param: "model", Code: chatreq.CodeEmptyString,
			Message: "Invalid 'model': empty string. Expected a string with minimum length 1."}
	}
	req.Model = model
	out["model"] = model

	var msgs []clientapi.ChatMessage
	if raw := w["instructions"]; !null(raw) {
		s, ok := str(raw)
		if !ok {
			return nil, req, typeErr("instructions", "a string")
		}
		req.echo.Instructions = &s
		if s != "" {
			msgs = append(msgs, clientapi.ChatMessage{Role: "system", Content: s})
		}
	}
	conv, err := input(w["input"])
	if err != nil {
		return nil, req, err
	}
	out["messages"] = append(msgs, conv...)

	if err := options(w, out, &req); err != nil {
		return nil, req, err
	}
	tools, err := toolsOf(w["tools"], &req.echo)
	if err != nil {
		return nil, req, err
	}
	if len(tools) > 0 {
		out["tools"] = tools
	}
	if err := toolChoice(w["tool_choice"], tools, out, &req.echo); err != nil {
		return nil, req, err
	}
	req.echo.ParallelToolCalls = true
	if raw := w["parallel_tool_calls"]; !null(raw) {
		if err := json.Unmarshal(raw, &req.echo.ParallelToolCalls); err != nil {
			return nil, req, typeErr("parallel_tool_calls", "a boolean")
		}
		if len(tools) > 0 {
			out["parallel_tool_calls"] = req.echo.ParallelToolCalls
		}
	}
	if err := textFormat(w["text"], out, &req.echo); err != nil {
		return nil, req, err
	}
	if raw := w["provider"]; !null(raw) {
		out["provider"] = json.RawMessage(bytes.TrimSpace(raw))
	}
	chat, err := clientapi.EncodeChat(out)
	return chat, req, err
}

// checkNames refuses an unknown parameter, a parameter needing state the
// gateway does not keep, and a background response, which it cannot run.
// The names are checked in order, so the error does not depend on a map's.
func checkNames(w wireRequest) error {
	names := make([]string, 0, len(w))
	for k := range w {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if why, ok := refused[k]; ok {
			if !null(w[k]) {
				return &chatreq.Error{Param: k, Code: chatreq.CodeUnsupportedValue, Message: fmt.Sprintf("'%s' is not supported: %s.", k, why)}
			}
			continue
		}
		if !read[k] && !ignored[k] {
			return &chatreq.Error{Param: k, Code: "unknown_parameter", Message: fmt.Sprintf("Unknown parameter: '%s'.", truncate(k, 64))}
		}
	}
	if raw := w["background"]; !null(raw) {
		var bg bool
		if err := json.Unmarshal(raw, &bg); err != nil {
			return typeErr("background", "a boolean")
		}
		if bg {
			return &chatreq.Error{Param: "background", Code: chatreq.CodeUnsupportedValue,
				Message: "'background' is not supported: this gateway keeps no responses to fetch later; stream the response instead."}
		}
	}
	return nil
}

// options translates the scalar parameters: stream, max_output_tokens,
// temperature, top_p, reasoning, store, metadata, user, prompt_cache_key.
func options(w wireRequest, out map[string]any, req *Request) error {
	if raw := w["stream"]; !null(raw) {
		if err := json.Unmarshal(raw, &req.Stream); err != nil {
			return typeErr("stream", "a boolean")
		}
		if req.Stream {
			out["stream"] = true
			// The usage chunk is what response.completed's usage is made of.
			out["stream_options"] = map[string]bool{"include_usage": true}
		}
	}
	if raw := w["max_output_tokens"]; !null(raw) {
		n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
		switch {
		case err != nil:
			return typeErr("max_output_tokens", "an integer")
		case n < minOutputTokens:
			return &chatreq.Error{Param: "max_output_tokens", Code: chatreq.CodeIntegerBelowMin, Message: fmt.Sprintf(
				"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= %d, but got %d instead.", minOutputTokens, n)}
		case n > chatreq.MaxTokens:
			return &chatreq.Error{Param: "max_output_tokens", Code: chatreq.CodeIntegerAboveMax, Message: fmt.Sprintf(
				"Invalid 'max_output_tokens': integer above maximum value. Expected a value <= %d, but got %d instead.", chatreq.MaxTokens, n)}
		}
		req.echo.MaxOutputTokens = &n
		out["max_tokens"] = n
	}
	// Same names and ranges as the chat API's, which checks them.
	for _, name := range []string{"temperature", "top_p"} {
		if raw := w[name]; !null(raw) {
			raw = bytes.TrimSpace(raw)
			out[name] = json.RawMessage(raw)
			if name == "temperature" {
				req.echo.Temperature = raw
			} else {
				req.echo.TopP = raw
			}
		}
	}
	if raw := w["reasoning"]; !null(raw) {
		// Passed on where an endpoint takes it, never an error: whether and
		// how hard a model reasons is the endpoint's own.
		var r struct {
			Effort string `json:"effort"`
		}
		if json.Unmarshal(raw, &r) == nil && efforts[r.Effort] {
			req.echo.Effort = &r.Effort
			out["reasoning_effort"] = r.Effort
		}
	}
	req.echo.Store = true
	if raw := w["store"]; !null(raw) {
		// Accepted either way: the gateway stores nothing.
		if err := json.Unmarshal(raw, &req.echo.Store); err != nil {
			return typeErr("store", "a boolean")
		}
	}
	if raw := w["metadata"]; !null(raw) {
		if err := json.Unmarshal(raw, &req.echo.Metadata); err != nil {
			return typeErr("metadata", "an object of strings")
		}
		if len(req.echo.Metadata) > maxMetadata {
			return &chatreq.Error{Param: "metadata", Code: chatreq.CodeTooManyProperties,
				Message: fmt.Sprintf("Invalid 'metadata': too many properties. Expected an object with at most %d properties.", maxMetadata)}
		}
		for k, v := range req.echo.Metadata {
			if len(k) > maxMetadataKey || len(v) > maxMetadataValue {
				return &chatreq.Error{Param: "metadata", Code: chatreq.CodeStringTooLong, Message: fmt.Sprintf(
					"Invalid 'metadata': keys are at most %d characters and values at most %d.", maxMetadataKey, maxMetadataValue)}
			}
		}
	}
	for _, name := range []string{"user", "safety_identifier"} {
		raw := w[name]
		if null(raw) {
			continue
		}
		s, ok := str(raw)
		if !ok {
			return typeErr(name, "a string")
		}
		if req.echo.User == nil && s != "" {
			req.echo.User = &s
			out["user"] = s
		}
	}
	if raw := w["prompt_cache_key"]; !null(raw) {
		s, ok := str(raw)
		if !ok {
			return typeErr("prompt_cache_key", "a string")
		}
		req.PromptCacheKey = s
	}
	return nil
}

// textFormat translates text.format into response_format; text.verbosity
// is not passed on.
func textFormat(raw json.RawMessage, out map[string]any, e *echo) error {
	e.Text = map[string]any{"format": map[string]string{"type": "text"}}
	if null(raw) {
		return nil
	}
	var t struct {
		Format    json.RawMessage `json:"format"`
		Verbosity *string         `json:"verbosity"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return typeErr("text", "an object")
	}
	if null(t.Format) {
		return nil
	}
	var f struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	}
	if err := json.Unmarshal(t.Format, &f); err != nil {
		return typeErr("text.format", "an object")
	}
	echoed := map[string]any{"type": f.Type}
	switch f.Type {
	case "text":
	case "json_object":
		out["response_format"] = map[string]string{"type": "json_object"}
	case "json_schema":
		if f.Name == "" {
			return missingErr("text.format.name")
		}
		if !validName(f.Name) {
			return valueErr("text.format.name", "must be 1 to %d of A-Z a-z 0-9 _ -", maxToolName)
		}
		schema, err := object(f.Schema, "text.format.schema")
		if err != nil {
			return err
		}
		if schema == nil {
			return missingErr("text.format.schema")
		}
		js := map[string]any{"name": f.Name, "schema": schema}
		if f.Description != "" {
			js["description"] = f.Description
		}
		if f.Strict != nil {
			js["strict"] = *f.Strict
		}
		out["response_format"] = map[string]any{"type": "json_schema", "json_schema": js}
		echoed = map[string]any{"type": f.Type, "name": f.Name, "schema": schema, "strict": f.Strict != nil && *f.Strict}
		if f.Description != "" {
			echoed["description"] = f.Description
		}
	case "":
		return missingErr("text.format.type")
	default:
		return enumErr("text.format.type", f.Type, "text", "json_object", "json_schema")
	}
	text := map[string]any{"format": echoed}
	if t.Verbosity != nil {
		text["verbosity"] = *t.Verbosity
	}
	e.Text = text
	return nil
}

// Errors in OpenAI's words.

func missingErr(param string) *chatreq.Error {
	return &chatreq.Error{Param: param, Code: chatreq.CodeMissing, Message: fmt.Sprintf("Missing required parameter: '%s'.", param)}
}

func typeErr(param, expected string) *chatreq.Error {
	return &chatreq.Error{Param: param, Code: chatreq.CodeInvalidType,
		Message: fmt.Sprintf("Invalid type for '%s': expected %s.", param, expected)}
}

func valueErr(param, format string, args ...any) *chatreq.Error {
	return &chatreq.Error{Param: param, Code: chatreq.CodeInvalidValue,
		Message: fmt.Sprintf("Invalid value for '%s': %s.", param, fmt.Sprintf(format, args...))}
}

func enumErr(param, got string, supported ...string) *chatreq.Error {
	return &chatreq.Error{Param: param, Code: chatreq.CodeInvalidValue, Message: fmt.Sprintf(
		"Invalid value: '%s'. Supported values are: '%s'.", truncate(got, 40), strings.Join(supported, "', '"))}
}

// object compacts raw, which must be a JSON object (nil when absent).
func object(raw json.RawMessage, param string) (json.RawMessage, error) {
	if null(raw) {
		return nil, nil
	}
	c, ok := clientapi.Object(raw)
	if !ok {
		return nil, typeErr(param, "an object")
	}
	return c, nil
}

// JSON helpers shared with the other client API translations.
var (
	str       = chatreq.String
	null      = clientapi.Null
	truncate  = clientapi.Truncate
	validName = clientapi.ValidToolName
)
