package chatreq

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// The checks of one message, as OpenAI's chat completions API makes them.

// roles are the message roles OpenAI accepts, in the order its errors list
// them; function is deprecated but still accepted.
var roles = []string{"system", "assistant", "user", "function", "tool", "developer"}

// partTypes are the content part types each role may send.
var partTypes = map[string][]string{
	"system":    {"text"},
	"developer": {"text"},
	"user":      {"text", "image_url", "input_audio", "file"},
	"assistant": {"text", "refusal"},
	"tool":      {"text"},
	"function":  {"text"},
}

// checkMessage checks what a message's role requires of it, but its
// content (see contentText), and returns its role and name.
func checkMessage(m wireMessage, i int) (role, name string, err error) {
	param := messageParam(i)
	if m.Role == nil {
		return "", "", missingErr(param + ".role")
	}
	role, ok := m.Role.(string)
	if !ok {
		return "", "", typeErrOf(param+".role", "a string", m.Role)
	}
	if !slices.Contains(roles, role) {
		return "", "", enumErr(param+".role", role, roles...)
	}
	if m.Name != nil {
		if name, ok = m.Name.(string); !ok {
			return "", "", typeErrOf(param+".name", "a string", m.Name)
		}
	} else if role == "function" {
		return "", "", missingErr(param + ".name")
	}
	if role == "tool" {
		if m.ToolCallID == nil {
			return "", "", missingErr(param + ".tool_call_id")
		}
		if _, ok := m.ToolCallID.(string); !ok {
			return "", "", typeErrOf(param+".tool_call_id", "a string", m.ToolCallID)
		}
	}
	if role == "assistant" {
		if len(m.ToolCalls) > 0 && !isNull(m.ToolCalls) {
			if err := checkToolCalls(m.ToolCalls, param+".tool_calls"); err != nil {
				return "", "", err
			}
		}
		if len(m.Function) > 0 && !isNull(m.Function) {
			if err := checkFunctionCall(m.Function, param+".function_call"); err != nil {
				return "", "", err
			}
		}
	}
	return role, name, nil
}

// structureError explains why messages did not decode as an array of
// objects. It runs only for bad requests, so it may be slow.
func structureError(raw json.RawMessage) *Error {
	items, ok := arrayOf(raw)
	if !ok {
		return typeErr("messages", "an array of objects", raw)
	}
	for i, it := range items {
		if !isObject(it) && !isNull(it) {
			return typeErr(messageParam(i), "an object", it)
		}
	}
	return typeErr("messages", "an array of objects", raw)
}

// contentText flattens a message's content to the text that is counted: a
// string as is, an array of parts as the concatenation of its text parts
// (images and audio carry no text). extra is a canonical encoding of the
// non-text parts, so that they still count in the prefix fingerprint. Null or
// absent content is allowed only where OpenAI allows it: an assistant
// message carrying tool calls, and a (deprecated) function message. Each
// part is checked as OpenAI checks it: a type the role may send, with the
// member that type needs.
func contentText(m wireMessage, role string, i int) (text, extra string, err error) {
	param := func() string { return messageParam(i) + ".content" }
	switch c := m.Content.(type) {
	case nil:
		hasCalls := (len(m.ToolCalls) > 0 && !isNull(m.ToolCalls)) || (len(m.Function) > 0 && !isNull(m.Function))
		if role == "assistant" && hasCalls || role == "function" {
			return "", "", nil
		}
		return "", "", missingErr(param())
	case string:
		return c, "", nil
	case []any:
		if len(c) == 0 && role != "assistant" {
			return "", "", emptyArrayErr(param())
		}
		var b, x strings.Builder
		for j, p := range c {
			pp := func() string { return fmt.Sprintf("%s[%d]", param(), j) }
			part, ok := p.(map[string]any)
			if !ok {
				return "", "", typeErrOf(pp(), "an object", p)
			}
			typ, ok := part["type"].(string)
			if !ok {
				return "", "", anyMissingOrType(part["type"], pp()+".type", "a string")
			}
			if typ != "text" {
				if err := checkPart(part, typ, role, pp()); err != nil {
					return "", "", err
				}
				// Maps marshal with sorted keys: a canonical form.
				enc, _ := json.Marshal(part)
				x.Write(enc)
				continue
			}
			t, ok := part["text"].(string)
			if !ok {
				return "", "", anyMissingOrType(part["text"], pp()+".text", "a string")
			}
			b.WriteString(t)
		}
		return b.String(), x.String(), nil
	default:
		return "", "", typeErrOf(param(), "one of a string or array of objects", c)
	}
}

// checkToolCalls checks an assistant message's tool_calls: a non-empty
// array of {id, type: "function", function: {name, arguments}} (or
// {id, type: "custom", custom: {name, input}}).
func checkToolCalls(raw json.RawMessage, param string) error {
	items, ok := arrayOf(raw)
	if !ok {
		return typeErr(param, "an array of objects", raw)
	}
	if len(items) == 0 {
		return emptyArrayErr(param)
	}
	for i, it := range items {
		p := fmt.Sprintf("%s[%d]", param, i)
		call, ok := objectOf(it)
		if !ok {
			return typeErr(p, "an object", it)
		}
		if _, err := requiredString(call, p+".id"); err != nil {
			return err
		}
		typ, err := requiredString(call, p+".type")
		if err != nil {
			return err
		}
		arg := "arguments"
		switch typ {
		case "function":
		case "custom":
			arg = "input"
		default:
			return enumErr(p+".type", typ, "function", "custom")
		}
		def, err := requiredObject(call, p+"."+typ, typ)
		if err != nil {
			return err
		}
		if _, err := requiredString(def, p+"."+typ+".name"); err != nil {
			return err
		}
		if _, err := requiredString(def, p+"."+typ+"."+arg); err != nil {
			return err
		}
	}
	return nil
}

// checkFunctionCall checks an assistant message's deprecated
// function_call: {name, arguments}.
func checkFunctionCall(raw json.RawMessage, param string) error {
	obj, ok := objectOf(raw)
	if !ok {
		return typeErr(param, "an object", raw)
	}
	if _, err := requiredString(obj, param+".name"); err != nil {
		return err
	}
	_, err := requiredString(obj, param+".arguments")
	return err
}

// checkPart checks a content part other than text (see contentText) of a
// message of the given role: its type is one the role may send, and the
// member named by its type is what that type needs.
func checkPart(part map[string]any, typ, role, param string) error {
	if !slices.Contains(partTypes[role], typ) {
		return enumErr(param+".type", typ, partTypes[role]...)
	}
	if typ == "refusal" {
		if _, ok := part["refusal"].(string); !ok {
			return anyMissingOrType(part["refusal"], param+".refusal", "a string")
		}
		return nil
	}
	obj, ok := part[typ].(map[string]any)
	if !ok {
		return anyMissingOrType(part[typ], param+"."+typ, "an object")
	}
	switch typ {
	case "image_url":
		if _, ok := obj["url"].(string); !ok {
			return anyMissingOrType(obj["url"], param+".image_url.url", "a string")
		}
	case "input_audio":
		if _, ok := obj["data"].(string); !ok {
			return anyMissingOrType(obj["data"], param+".input_audio.data", "a string")
		}
		format, ok := obj["format"].(string)
		if !ok {
			return anyMissingOrType(obj["format"], param+".input_audio.format", "a string")
		}
		if format != "wav" && format != "mp3" {
			return enumErr(param+".input_audio.format", format, "wav", "mp3")
		}
	}
	return nil
}

// anyMissingOrType is the error of a decoded member v that is not of the
// expected type: missing when absent or null, else of the wrong type.
func anyMissingOrType(v any, param, expected string) *Error {
	if v == nil {
		return missingErr(param)
	}
	return typeErrOf(param, expected, v)
}
