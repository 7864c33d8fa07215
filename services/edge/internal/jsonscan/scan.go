// Package jsonscan is the edge's one reader of raw JSON text: a Scanner
// that walks a text in place, accepting exactly what encoding/json accepts
// and reading member names as it does, the helpers that decode what it
// scanned (names, strings, lengths, integers) without a second pass, and
// Pieces, which follows a value arriving in pieces on a stream. The
// rewriting of providers' answers (rewrite), the splitting of clients'
// request bodies (chatreq) and the Messages stream's tool arguments
// (anthropic) all read JSON through it.
package jsonscan

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner walks JSON text in place. It accepts exactly what encoding/json
// accepts (the same grammar, the same escapes, control characters refused
// in strings, invalid UTF-8 let through, containers nested at most
// MaxDepth deep), so that a text it refuses is one json.Unmarshal
// refuses. Every method that scans a value leaves the position just past
// it and reports false on a syntax error; a false anywhere makes the whole
// text malformed. The zero Scanner scans an empty text.
//
// A hand scanner rather than a library: its callers must refuse exactly
// the texts encoding/json refuses, read duplicate keys (last one wins) and
// struct field names (case-insensitively) as encoding/json reads them, and
// learn all they need while it validates, in one pass with no allocation.
// The JSON libraries at hand either parse into a tree, validate in a second
// pass with rules of their own, or copy on every edit.
type Scanner struct {
	data []byte
	pos  int
}

// New returns a Scanner at the start of data.
func New(data []byte) Scanner { return Scanner{data: data} }

// Data is the text scanned.
func (s *Scanner) Data() []byte { return s.data }

// Pos is the offset of the next byte to scan.
func (s *Scanner) Pos() int { return s.pos }

// Step consumes the byte Peek returned: the '{' or '[' of a container the
// caller walks with NextKey or NextElem.
func (s *Scanner) Step() { s.pos++ }

// AtEnd skips white space and reports whether the text ends there.
func (s *Scanner) AtEnd() bool {
	s.Space()
	return s.pos == len(s.data)
}

// Valid reports whether data is one JSON value, white space around it
// allowed: json.Valid, in one pass of the Scanner.
func Valid(data []byte) bool {
	s := Scanner{data: data}
	return s.Skip(1) && s.AtEnd()
}

// Unquote decodes raw, a JSON string with white space around it allowed,
// as json.Unmarshal into a string does; false when raw is not one string.
// A string with nothing to unescape or replace is its bytes, copied once.
func Unquote(raw []byte) (string, bool) {
	s := Scanner{data: raw}
	if s.Peek() != '"' {
		return "", false
	}
	start := s.pos
	f, ok := s.Str()
	if !ok {
		return "", false
	}
	end := s.pos
	if !s.AtEnd() {
		return "", false
	}
	inner := raw[start+1 : end-1]
	if f&StrEscape == 0 && (f&StrNonASCII == 0 || utf8.Valid(inner)) {
		return string(inner), true
	}
	return string(AppendUnquoted(make([]byte, 0, len(inner)), inner)), true
}

// MaxDepth is encoding/json's limit on nested objects and arrays.
const MaxDepth = 10000

// Span is data[Start:End].
type Span struct{ Start, End int }

// Space skips white space.
func (s *Scanner) Space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// Peek returns the next byte after white space, 0 at the end.
func (s *Scanner) Peek() byte {
	s.Space()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// StrFlags say what a string holds beyond plain ASCII text.
type StrFlags uint8

// The flags of a string: StrEscape for a backslash escape, StrNonASCII
// for a byte of 0x80 or more.
const (
	StrEscape StrFlags = 1 << iota
	StrNonASCII
)

// Str scans the string at the position (a '"'), saying what it holds.
func (s *Scanner) Str() (StrFlags, bool) {
	var f StrFlags
	d := s.data
	i := s.pos + 1
	for i < len(d) {
		for i < len(d) && plainByte[d[i]] {
			i++
		}
		if i == len(d) {
			break
		}
		c := d[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return f, true
		case c == '\\':
			f |= StrEscape
			if i+1 >= len(d) {
				return f, false
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || hex4(d[i+2:i+6]) < 0 {
					return f, false
				}
				i += 6
			default:
				return f, false
			}
		case c < 0x20:
			return f, false
		default:
			if c >= 0x80 {
				f |= StrNonASCII
			}
			i++
		}
	}
	return f, false
}

// plainByte marks the bytes a string holds as they are: all but the quote,
// the backslash, control characters and bytes of multi-byte UTF-8.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// hex4 is the value of four hex digits, -1 if they are not.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// Number scans the number at the position: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *Scanner) Number() bool {
	d := s.data
	i := s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	s.pos = i
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// Literal scans the literal word (true, false or null) at the position.
func (s *Scanner) Literal(word string) bool {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return false
	}
	s.pos += len(word)
	return true
}

// Skip scans the value at the position (after white space) at nesting
// depth depth: 1 for a whole text, one more inside each container.
func (s *Scanner) Skip(depth int) bool {
	switch s.Peek() {
	case '{':
		if depth > MaxDepth {
			return false
		}
		s.pos++
		for first := true; ; first = false {
			_, more, ok := s.NextKey(first)
			if !ok {
				return false
			}
			if !more {
				return true
			}
			if !s.Skip(depth + 1) {
				return false
			}
		}
	case '[':
		if depth > MaxDepth {
			return false
		}
		s.pos++
		for first := true; ; first = false {
			more, ok := s.NextElem(first)
			if !ok {
				return false
			}
			if !more {
				return true
			}
			if !s.Skip(depth + 1) {
				return false
			}
		}
	case '"':
		_, ok := s.Str()
		return ok
	case 't':
		return s.Literal("true")
	case 'f':
		return s.Literal("false")
	case 'n':
		return s.Literal("null")
	default:
		return s.Number()
	}
}

// Key is an object member's name as scanned.
type Key struct {
	Raw   Span // with its quotes
	Flags StrFlags
}

// NextKey steps to the next member of the object whose '{' was consumed:
// first says no member was read yet. It returns the member's name with pos
// at its value, or more false once the object's '}' was consumed.
func (s *Scanner) NextKey(first bool) (k Key, more, ok bool) {
	c := s.Peek()
	if c == '}' {
		s.pos++
		return k, false, true
	}
	if !first {
		if c != ',' {
			return k, false, false
		}
		s.pos++
		c = s.Peek()
	}
	if c != '"' {
		return k, false, false
	}
	k.Raw.Start = s.pos
	if k.Flags, ok = s.Str(); !ok {
		return k, false, false
	}
	k.Raw.End = s.pos
	if s.Peek() != ':' {
		return k, false, false
	}
	s.pos++
	s.Space()
	return k, true, true
}

// NextElem steps to the next element of the array whose '[' was consumed,
// as NextKey does for objects.
func (s *Scanner) NextElem(first bool) (more, ok bool) {
	c := s.Peek()
	if c == ']' {
		s.pos++
		return false, true
	}
	if !first {
		if c != ',' {
			return false, false
		}
		s.pos++
	}
	s.Space()
	return true, true
}

// Plain reports whether the key's text is its name as is.
func (k Key) Plain() bool { return k.Flags == 0 }

// Name is k's decoded name: in data when plain, else appended to buf.
func (s *Scanner) Name(k Key, buf []byte) (name, newBuf []byte) {
	raw := s.data[k.Raw.Start+1 : k.Raw.End-1]
	if k.Flags&StrEscape == 0 {
		// Without escapes the name is the text, invalid UTF-8 aside, which
		// decodes to U+FFFD: equal to no ASCII name either way, and equal
		// to another Key's exactly when its decoded text is.
		if k.Flags&StrNonASCII == 0 || utf8.Valid(raw) {
			return raw, buf
		}
	}
	start := len(buf)
	buf = AppendUnquoted(buf, raw)
	return buf[start:], buf
}

// Is reports whether k is exactly name (a map key).
func (s *Scanner) Is(k Key, name string) bool {
	return string(s.Exact(k)) == name
}

// Exact is k's name for comparing with an ASCII name: its text, or
// its decoded name when escaped (on the stack when short).
func (s *Scanner) Exact(k Key) []byte {
	if k.Flags&StrEscape == 0 {
		return s.data[k.Raw.Start+1 : k.Raw.End-1]
	}
	n, _ := s.Name(k, nil)
	return n
}

// Matches reports whether k names the struct field name, as
// encoding/json matches them: exactly or under Unicode case folding.
func (s *Scanner) Matches(k Key, name string) bool {
	raw := s.data[k.Raw.Start+1 : k.Raw.End-1]
	if k.Plain() {
		if len(raw) != len(name) {
			return false
		}
		for i := range len(raw) {
			a, b := raw[i], name[i]
			if 'A' <= a && a <= 'Z' {
				a += 'a' - 'A'
			}
			if a != b {
				return false
			}
		}
		return true
	}
	var arr [32]byte
	n, _ := s.Name(k, arr[:0])
	return strings.EqualFold(string(n), name)
}

// DecodedLen is the length of the string raw (with its quotes, already
// scanned) as encoding/json decodes it: escapes resolved, invalid UTF-8
// and unpaired surrogates each turned into U+FFFD.
func DecodedLen(raw []byte, f StrFlags) int64 {
	b := raw[1 : len(raw)-1]
	if f == 0 {
		return int64(len(b))
	}
	var n int64
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '\\':
			if b[i+1] != 'u' {
				n++
				i += 2
				continue
			}
			r := hex4(b[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
					if utf16.DecodeRune(r, hex4(b[i+2:])) != utf8.RuneError {
						n += 4
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			n += int64(utf8.RuneLen(r))
		case c < utf8.RuneSelf:
			n++
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				n += int64(utf8.RuneLen(utf8.RuneError))
			} else {
				n += int64(size)
			}
			i += size
		}
	}
	return n
}

// AppendUnquoted appends the text of the string body b (scanned, without
// its quotes) as encoding/json decodes it.
func AppendUnquoted(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '\\':
			switch b[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(b[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
						if dec := utf16.DecodeRune(r, hex4(b[i+2:])); dec != utf8.RuneError {
							dst = utf8.AppendRune(dst, dec)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, b[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, b[i:i+size]...)
			}
			i += size
		}
	}
	return dst
}

// ParseInt64 reads a scanned JSON number as encoding/json reads one into an
// int64: an integer in range, or not at all.
func ParseInt64(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		if n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
		if n > 1<<63 {
			return 0, false
		}
	}
	if neg {
		return -int64(n), true // n <= 1<<63: -(1<<63) wraps to itself, the least int64
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}
