package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
)

// item is one input item. Only the fields of the types the edge
// translates are read; others (an item's id and status, which OpenAI's
// own output carries back) are ignored.
type item struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// CallID, Name and Arguments are a function_call's; CallID and Output
	// a function_call_output's.
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments *string         `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// part is one content part of a message or of a function call's output.
type part struct {
	Type     string  `json:"type"`
	Text     *string `json:"text"`
	Refusal  *string `json:"refusal"`
	ImageURL *string `json:"image_url"`
	FileID   string  `json:"file_id"`
	Detail   string  `json:"detail"`
}

// input translates the input: a string is one user message; items are
// translated in order. A function_call joins the assistant message before
// it (or starts one), as the chat API wants an answer's tool calls on one
// message; a function_call_output is a tool message. Reasoning items are
// dropped: the provider's reasoning is not sent back to it.
func input(raw json.RawMessage) ([]clientapi.ChatMessage, error) {
	if null(raw) {
		return nil, missingErr("input")
	}
	if s, ok := str(raw); ok {
		return []clientapi.ChatMessage{{Role: "user", Content: s}}, nil
	}
	items, err := decodeItems(raw)
	if err != nil {
		return nil, err
	}
	var out []clientapi.ChatMessage
	// calls is the index in out of the assistant message a function_call
	// joins, -1 when the last item was not a function_call or an
	// assistant message.
	calls := -1
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			msgs, err := message(it, param)
			if err != nil {
				return nil, err
			}
			out = append(out, msgs...)
			calls = -1
			if it.Role == "assistant" {
				calls = len(out) - 1
			}
		case "function_call":
			tc, err := functionCall(it, param)
			if err != nil {
				return nil, err
			}
			if calls < 0 {
				out = append(out, clientapi.ChatMessage{Role: "assistant"})
				calls = len(out) - 1
			}
			out[calls].ToolCalls = append(out[calls].ToolCalls, tc)
		case "function_call_output":
			msgs, err := callOutput(it, param)
			if err != nil {
				return nil, err
			}
			out = append(out, msgs...)
			calls = -1
		case "reasoning", "web_search_call":
			// The provider's reasoning is not sent back to it; a web search
			// was OpenAI's, and its results are not in the item.
		case "item_reference":
			return nil, &chatreq.Error{Param: param + ".type", Code: chatreq.CodeUnsupportedValue,
				Message: "Item references are not supported: this gateway keeps no items; send the item itself."}
		case "":
			return nil, missingErr(param + ".type")
		default:
			return nil, &chatreq.Error{Param: param + ".type", Code: chatreq.CodeUnsupportedValue, Message: fmt.Sprintf(
				"Input items of type '%s' are not supported here: only message, function_call, function_call_output and reasoning are.", truncate(typ, 40))}
		}
	}
	for i := range out {
		if out[i].Role == "assistant" && out[i].Content == nil && len(out[i].ToolCalls) == 0 {
			out[i].Content = ""
		}
	}
	return out, nil
}

// decodeItems decodes the input's items in one pass, and again item by
// item only to name the one at fault.
func decodeItems(raw json.RawMessage) ([]item, error) {
	var items []item
	if err := json.Unmarshal(raw, &items); err == nil {
		return items, nil
	}
	var each []json.RawMessage
	if err := json.Unmarshal(raw, &each); err != nil {
		return nil, typeErr("input", "a string or an array of input items")
	}
	for i, r := range each {
		var it item
		if err := json.Unmarshal(r, &it); err != nil {
			return nil, typeErr(fmt.Sprintf("input[%d]", i), "an input item object")
		}
	}
	return nil, typeErr("input", "a string or an array of input items")
}

// message translates a message item: system and developer messages are
// system messages (the providers behind the edge know that role), user
// and assistant ones keep theirs.
func message(it item, param string) ([]clientapi.ChatMessage, error) {
	switch it.Role {
	case "user":
		parts, err := contentParts(it.Content, param+".content", true)
		if err != nil {
			return nil, err
		}
		return []clientapi.ChatMessage{{Role: "user", Content: userContent(parts)}}, nil
	case "assistant", "system", "developer":
		parts, err := contentParts(it.Content, param+".content", false)
		if err != nil {
			return nil, err
		}
		role := it.Role
		if role == "developer" {
			role = "system"
		}
		return []clientapi.ChatMessage{{Role: role, Content: joinText(parts)}}, nil
	case "":
		return nil, missingErr(param + ".role")
	}
	return nil, enumErr(param+".role", it.Role, "user", "assistant", "system", "developer")
}

// contentParts reads a message's content, a string or an array of parts, as chat
// parts: text, and images when images is set (a user's).
func contentParts(raw json.RawMessage, param string, images bool) ([]clientapi.ChatPart, error) {
	if s, ok := str(raw); ok {
		return []clientapi.ChatPart{{Type: "text", Text: &s}}, nil
	}
	var in []part
	if null(raw) || json.Unmarshal(raw, &in) != nil {
		return nil, typeErr(param, "a string or an array of content parts")
	}
	out := make([]clientapi.ChatPart, 0, len(in))
	for j, p := range in {
		pp := fmt.Sprintf("%s[%d]", param, j)
		switch p.Type {
		case "input_text", "output_text", "text", "refusal":
			text := p.Text
			if p.Type == "refusal" {
				text = p.Refusal
			}
			if text == nil {
				return nil, missingErr(pp + ".text")
			}
			out = append(out, clientapi.ChatPart{Type: "text", Text: text})
		case "input_image":
			if !images {
				return nil, valueErr(pp+".type", "images are only accepted in user messages and function call outputs")
			}
			if p.ImageURL == nil || *p.ImageURL == "" {
				if p.FileID != "" {
					return nil, &chatreq.Error{Param: pp + ".file_id", Code: chatreq.CodeUnsupportedValue,
						Message: "Files are not supported: this gateway keeps no files; send the image as image_url (a URL or a data URL)."}
				}
				return nil, missingErr(pp + ".image_url")
			}
			detail := p.Detail
			if detail == "auto" {
				detail = ""
			}
			out = append(out, clientapi.ChatPart{Type: "image_url", ImageURL: &clientapi.ChatImageURL{URL: *p.ImageURL, Detail: detail}})
		case "":
			return nil, missingErr(pp + ".type")
		default:
			return nil, &chatreq.Error{Param: pp + ".type", Code: chatreq.CodeUnsupportedValue, Message: fmt.Sprintf(
				"Content parts of type '%s' are not supported here: only input_text, output_text and input_image are.", truncate(p.Type, 40))}
		}
	}
	return out, nil
}

// userContent is a user message's content: its text alone when it is one
// text part, else its parts.
func userContent(parts []clientapi.ChatPart) any {
	if len(parts) == 1 && parts[0].Type == "text" {
		return *parts[0].Text
	}
	return parts
}

// joinText is the text of parts, joined as the model would read them.
func joinText(parts []clientapi.ChatPart) string {
	if len(parts) == 1 {
		return *parts[0].Text
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(*p.Text)
	}
	return b.String()
}

func functionCall(it item, param string) (clientapi.ChatToolCall, error) {
	if it.CallID == "" {
		return clientapi.ChatToolCall{}, missingErr(param + ".call_id")
	}
	if !validName(it.Name) {
		return clientapi.ChatToolCall{}, valueErr(param+".name", "must be 1 to %d of A-Z a-z 0-9 _ -", maxToolName)
	}
	if it.Arguments == nil {
		return clientapi.ChatToolCall{}, missingErr(param + ".arguments")
	}
	args := strings.TrimSpace(*it.Arguments)
	if args == "" {
		args = "{}"
	}
	return clientapi.ChatToolCall{ID: it.CallID, Type: "function", Function: clientapi.ChatFunction{Name: it.Name, Arguments: args}}, nil
}

// callOutput translates a function_call_output into a tool message, its
// output's text; the images it holds follow in a user message, as a tool
// message carries text only.
func callOutput(it item, param string) ([]clientapi.ChatMessage, error) {
	if it.CallID == "" {
		return nil, missingErr(param + ".call_id")
	}
	if null(it.Output) {
		return nil, missingErr(param + ".output")
	}
	ps, err := contentParts(it.Output, param+".output", true)
	if err != nil {
		return nil, err
	}
	var text strings.Builder
	var images []clientapi.ChatPart
	for _, p := range ps {
		if p.Type != "text" {
			images = append(images, p)
			continue
		}
		text.WriteString(*p.Text)
	}
	out := []clientapi.ChatMessage{{Role: "tool", ToolCallID: it.CallID, Content: text.String()}}
	if len(images) > 0 {
		out = append(out, clientapi.ChatMessage{Role: "user", Content: images})
	}
	return out, nil
}

// wireTool is one tool of the request.
type wireTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// webSearch are the web search tools, which are dropped: OpenAI runs
// them, the providers behind the edge cannot, and a client that offers
// one by default must still be served; the model answers without it.
var webSearch = map[string]bool{"web_search": true, "web_search_preview": true,
	"web_search_2025_08_26": true, "web_search_preview_2025_03_11": true}

// toolsOf translates function tools. A web search tool is dropped, and so
// is a namespace of tools (Codex CLI offers its sub-agent tools as one, on
// every request): chat tools have no namespaces, and a call the model made
// by a flattened name could not be answered as the namespace's. Any other
// tool type (file search, code interpreter, computer use, MCP, custom
// tools with grammars...) is refused, naming tools[i].type: the model
// would be offered a tool nobody can run.
func toolsOf(raw json.RawMessage, e *echo) ([]clientapi.ChatTool, error) {
	e.Tools = []any{}
	if null(raw) {
		return nil, nil
	}
	var in []wireTool
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, typeErr("tools", "an array of tool objects")
	}
	out := make([]clientapi.ChatTool, 0, len(in))
	for i, t := range in {
		param := fmt.Sprintf("tools[%d]", i)
		switch {
		case webSearch[t.Type], t.Type == "namespace":
			continue
		case t.Type == "":
			return nil, missingErr(param + ".type")
		case t.Type != "function":
			return nil, &chatreq.Error{Param: param + ".type", Code: chatreq.CodeUnsupportedValue, Message: fmt.Sprintf(
				"Tools of type '%s' are not supported here: only function tools are (web search tools are dropped).", truncate(t.Type, 40))}
		}
		if !validName(t.Name) {
			return nil, valueErr(param+".name", "must be 1 to %d of A-Z a-z 0-9 _ -", maxToolName)
		}
		if len(out) == maxTools {
			return nil, &chatreq.Error{Param: "tools", Code: chatreq.CodeArrayTooLong,
				Message: fmt.Sprintf("Invalid 'tools': array too long. Expected an array with maximum length %d.", maxTools)}
		}
		schema, err := object(t.Parameters, param+".parameters")
		if err != nil {
			return nil, err
		}
		if schema == nil {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out = append(out, clientapi.ChatTool{Type: "function", Function: clientapi.ChatToolDef{Name: t.Name, Description: t.Description,
			Parameters: schema, Strict: t.Strict}})
		echoed := map[string]any{"type": "function", "name": t.Name, "parameters": schema, "strict": t.Strict != nil && *t.Strict}
		if t.Description != "" {
			echoed["description"] = t.Description
		}
		e.Tools = append(e.Tools, echoed)
	}
	return out, nil
}

// toolChoice sets the chat request's tool_choice from the Responses
// API's: "auto", "none", "required" or a function named.
func toolChoice(raw json.RawMessage, tools []clientapi.ChatTool, out map[string]any, e *echo) error {
	e.ToolChoice = "auto"
	if null(raw) {
		return nil
	}
	if s, ok := str(raw); ok {
		switch s {
		case "auto", "none":
		case "required":
			if len(tools) == 0 {
				return valueErr("tool_choice", "'required' needs function tools")
			}
		default:
			return enumErr("tool_choice", s, "auto", "none", "required")
		}
		e.ToolChoice = s
		if len(tools) > 0 {
			out["tool_choice"] = s
		}
		return nil
	}
	var tc struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &tc); err != nil || bytes.TrimSpace(raw)[0] != '{' {
		return typeErr("tool_choice", "a string or an object")
	}
	if tc.Type != "function" {
		return &chatreq.Error{Param: "tool_choice.type", Code: chatreq.CodeUnsupportedValue, Message: fmt.Sprintf(
			"Invalid value: '%s'. Only 'function' tool choices are supported here (or 'auto', 'none', 'required').", truncate(tc.Type, 40))}
	}
	for _, t := range tools {
		if t.Function.Name == tc.Name {
			out["tool_choice"] = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
			e.ToolChoice = map[string]string{"type": "function", "name": tc.Name}
			return nil
		}
	}
	return valueErr("tool_choice.name", "no function named '%s' is declared in tools", truncate(tc.Name, 64))
}
