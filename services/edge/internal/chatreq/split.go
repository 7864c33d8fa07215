package chatreq

import (
	"bytes"
	"encoding/json"
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
