package chatreq

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// splitObject returns the members of body, a JSON object already known to
// be valid, as json.Unmarshal into a map[string]json.RawMessage would: a
// later member of the same name wins, names are unescaped. Each value is a
// slice of body rather than a copy, and body is walked once rather than
// decoded: the values are only looked at later, and the large one, the
// messages, is decoded on its own.
func splitObject(body []byte) map[string]json.RawMessage {
	fields := make(map[string]json.RawMessage, 8)
	i := skipSpace(body, 1)
	if body[i] == '}' {
		return fields
	}
	for {
		end := skipString(body, i)
		name := memberName(body[i:end])
		i = skipSpace(body, end) // at the colon
		i = skipSpace(body, i+1)
		end = skipValue(body, i)
		fields[name] = body[i:end:end]
		i = skipSpace(body, end) // at a comma or the closing brace
		if body[i] == '}' {
			return fields
		}
		i = skipSpace(body, i+1)
	}
}

// memberName unquotes a member's name: its bytes when there is nothing to
// unescape or replace, else as encoding/json decodes it.
func memberName(quoted []byte) string {
	inner := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	var name string
	_ = json.Unmarshal(quoted, &name) // valid: checked with the body
	return name
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	// A number, true, false or null: up to the next delimiter.
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// wireFields are wireMessage's JSON names, in its field order.
var wireFields = [...]string{"role", "name", "content", "tool_calls", "function_call", "tool_call_id"}

// decodeMessages decodes the messages array, a value of a body json.Valid
// passed, into raw, as json.Unmarshal into a []wireMessage does: names are
// matched exactly, else case-insensitively, the last of a name wins,
// unknown members are skipped and a null element is a zero message. It
// reports false where json.Unmarshal fails: raw is not an array, an
// element is neither an object nor null, or a number does not fit a
// float64. It walks raw once, decoding only the values kept.
func decodeMessages(raw []byte, msgs []wireMessage) ([]wireMessage, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, false
	}
	if msgs == nil {
		msgs = []wireMessage{} // as json.Unmarshal leaves an empty array
	}
	i = skipSpace(raw, i+1)
	if raw[i] == ']' {
		return msgs, true
	}
	for {
		end := skipValue(raw, i)
		var m wireMessage
		switch raw[i] {
		case 'n': // null: a zero message
		case '{':
			if !decodeMessage(raw[i:end], &m) {
				return nil, false
			}
		default:
			return nil, false
		}
		msgs = append(msgs, m)
		i = skipSpace(raw, end) // at a comma or the closing bracket
		if raw[i] == ']' {
			return msgs, true
		}
		i = skipSpace(raw, i+1)
	}
}

// decodeMessage decodes one message object into m (see decodeMessages).
func decodeMessage(obj []byte, m *wireMessage) bool {
	i := skipSpace(obj, 1)
	if obj[i] == '}' {
		return true
	}
	for {
		end := skipString(obj, i)
		name := memberName(obj[i:end])
		i = skipSpace(obj, end) // at the colon
		i = skipSpace(obj, i+1)
		end = skipValue(obj, i)
		v := obj[i:end:end]
		var err error
		switch wireField(name) {
		case 0:
			m.Role, err = decodeAny(v)
		case 1:
			m.Name, err = decodeAny(v)
		case 2:
			m.Content, err = decodeAny(v)
		case 3:
			m.ToolCalls = v
		case 4:
			m.Function = v
		case 5:
			m.ToolCallID, err = decodeAny(v)
		}
		if err != nil {
			return false
		}
		i = skipSpace(obj, end) // at a comma or the closing brace
		if obj[i] == '}' {
			return true
		}
		i = skipSpace(obj, i+1)
	}
}

// wireField is the index in wireFields of the field a member name sets, as
// encoding/json matches it; -1 for none.
func wireField(name string) int {
	for i, f := range wireFields {
		if name == f {
			return i
		}
	}
	for i, f := range wireFields {
		if strings.EqualFold(name, f) {
			return i
		}
	}
	return -1
}

// decodeAny decodes a JSON value as json.Unmarshal into an any does, a
// string with nothing to unescape without a decode.
func decodeAny(v []byte) (any, error) {
	switch v[0] {
	case '"':
		if s, ok := asString(v); ok {
			return s, nil
		}
	case 'n':
		return nil, nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	}
	var x any
	err := json.Unmarshal(v, &x)
	return x, err
}
