package chatreq

import (
	"encoding/json"

	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonscan"
)

// splitObject returns the members of body, a JSON object already known to
// be valid, as json.Unmarshal into a map[string]json.RawMessage would: a
// later member of the same name wins, names are unescaped. Each value is a
// slice of body rather than a copy, and body is walked once rather than
// decoded: the values are only looked at later, and the large one, the
// messages, is decoded on its own.
func splitObject(body []byte) map[string]json.RawMessage {
	fields := make(map[string]json.RawMessage, 8)
	s := jsonscan.New(body)
	s.Peek()
	s.Step() // the '{'
	var buf []byte
	for first := true; ; first = false {
		k, more, ok := s.NextKey(first)
		if !ok || !more {
			return fields
		}
		start := s.Pos()
		s.Skip(2)
		var name []byte
		name, buf = s.Name(k, buf[:0])
		fields[string(name)] = body[start:s.Pos():s.Pos()]
	}
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
	s := jsonscan.New(raw)
	if s.Peek() != '[' {
		return nil, false
	}
	s.Step()
	if msgs == nil {
		msgs = []wireMessage{} // as json.Unmarshal leaves an empty array
	}
	for first := true; ; first = false {
		more, ok := s.NextElem(first)
		if !ok {
			return nil, false
		}
		if !more {
			return msgs, true
		}
		var m wireMessage
		switch s.Peek() {
		case 'n': // null: a zero message
			ok = s.Literal("null")
		case '{':
			ok = decodeMessage(&s, &m)
		default:
			return nil, false
		}
		if !ok {
			return nil, false
		}
		msgs = append(msgs, m)
	}
}

// decodeMessage decodes the message object at s's position into m (see
// decodeMessages).
func decodeMessage(s *jsonscan.Scanner, m *wireMessage) bool {
	s.Step() // the '{'
	data := s.Data()
	for first := true; ; first = false {
		k, more, ok := s.NextKey(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		start := s.Pos()
		if !s.Skip(3) {
			return false
		}
		v := data[start:s.Pos():s.Pos()]
		var err error
		switch wireField(s, k) {
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
	}
}

// wireField is the index in wireFields of the field the member named k
// sets, as encoding/json matches it (no two of the names fold to the same
// one, so the first that matches is the field); -1 for none.
func wireField(s *jsonscan.Scanner, k jsonscan.Key) int {
	for i, f := range wireFields {
		if s.Matches(k, f) {
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
