package rewrite

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner walks JSON text in place. It accepts exactly what encoding/json
// accepts (the same grammar, the same escapes, control characters refused
// in strings, invalid UTF-8 let through, containers nested at most
// maxDepth deep), so that a chunk the rewriting refuses is one
// json.Unmarshal refused before. Every method that scans a value leaves pos
// just past it and reports false on a syntax error; a false anywhere makes
// the whole text malformed.
//
// A hand scanner rather than a library: the rewriting must refuse exactly
// the texts encoding/json refuses, read duplicate keys (last one wins) and
// struct field names (case-insensitively) as encoding/json reads them, and
// learn all it needs while it validates, in one pass with no allocation. The
// JSON libraries at hand either parse into a tree, validate in a second pass
// with rules of their own, or copy on every edit.
type scanner struct {
	data []byte
	pos  int
}

// maxDepth is encoding/json's limit on nested objects and arrays.
const maxDepth = 10000

// span is data[start:end].
type span struct{ start, end int }

// ws skips white space.
func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// strFlags say what a string holds beyond plain ASCII text.
type strFlags uint8

const (
	strEscape   strFlags = 1 << iota // a backslash escape
	strNonASCII                      // a byte of 0x80 or more
)

// str scans the string at pos (a '"').
func (s *scanner) str() (strFlags, bool) {
	var f strFlags
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
			f |= strEscape
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
				f |= strNonASCII
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

// num scans the number at pos: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) num() bool {
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

// lit scans the literal word (true, false or null) at pos.
func (s *scanner) lit(word string) bool {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return false
	}
	s.pos += len(word)
	return true
}

// skip scans the value at pos (after white space) at nesting depth depth.
func (s *scanner) skip(depth int) bool {
	switch s.peek() {
	case '{':
		if depth > maxDepth {
			return false
		}
		s.pos++
		for first := true; ; first = false {
			_, more, ok := s.nextKey(first)
			if !ok {
				return false
			}
			if !more {
				return true
			}
			if !s.skip(depth + 1) {
				return false
			}
		}
	case '[':
		if depth > maxDepth {
			return false
		}
		s.pos++
		for first := true; ; first = false {
			more, ok := s.nextElem(first)
			if !ok {
				return false
			}
			if !more {
				return true
			}
			if !s.skip(depth + 1) {
				return false
			}
		}
	case '"':
		_, ok := s.str()
		return ok
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		return s.num()
	}
}

// key is an object member's name as scanned.
type key struct {
	raw   span // with its quotes
	flags strFlags
}

// nextKey steps to the next member of the object whose '{' was consumed:
// first says no member was read yet. It returns the member's name with pos
// at its value, or more false once the object's '}' was consumed.
func (s *scanner) nextKey(first bool) (k key, more, ok bool) {
	c := s.peek()
	if c == '}' {
		s.pos++
		return k, false, true
	}
	if !first {
		if c != ',' {
			return k, false, false
		}
		s.pos++
		c = s.peek()
	}
	if c != '"' {
		return k, false, false
	}
	k.raw.start = s.pos
	if k.flags, ok = s.str(); !ok {
		return k, false, false
	}
	k.raw.end = s.pos
	if s.peek() != ':' {
		return k, false, false
	}
	s.pos++
	s.ws()
	return k, true, true
}

// nextElem steps to the next element of the array whose '[' was consumed,
// as nextKey does for objects.
func (s *scanner) nextElem(first bool) (more, ok bool) {
	c := s.peek()
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
	s.ws()
	return true, true
}

// plain reports whether the key's text is its name as is.
func (k key) plain() bool { return k.flags == 0 }

// name is the key's decoded name: in data when plain, else appended to buf.
func (s *scanner) name(k key, buf []byte) (name, newBuf []byte) {
	raw := s.data[k.raw.start+1 : k.raw.end-1]
	if k.flags&strEscape == 0 {
		// Without escapes the name is the text, invalid UTF-8 aside, which
		// decodes to U+FFFD: equal to no ASCII name either way, and equal
		// to another key's exactly when its decoded text is.
		if k.flags&strNonASCII == 0 || utf8.Valid(raw) {
			return raw, buf
		}
	}
	start := len(buf)
	buf = appendUnquoted(buf, raw)
	return buf[start:], buf
}

// is reports whether the key is exactly name (a map key).
func (s *scanner) is(k key, name string) bool {
	return string(s.exact(k)) == name
}

// exact is the key's name for comparing with an ASCII name: its text, or
// its decoded name when escaped (on the stack when short).
func (s *scanner) exact(k key) []byte {
	if k.flags&strEscape == 0 {
		return s.data[k.raw.start+1 : k.raw.end-1]
	}
	n, _ := s.name(k, nil)
	return n
}

// matches reports whether the key names the struct field name, as
// encoding/json matches them: exactly or under Unicode case folding.
func (s *scanner) matches(k key, name string) bool {
	raw := s.data[k.raw.start+1 : k.raw.end-1]
	if k.plain() {
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
	n, _ := s.name(k, arr[:0])
	return strings.EqualFold(string(n), name)
}

// decodedLen is the length of the string raw (with its quotes, already
// scanned) as encoding/json decodes it: escapes resolved, invalid UTF-8
// and unpaired surrogates each turned into U+FFFD.
func decodedLen(raw []byte, f strFlags) int64 {
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

// appendUnquoted appends the text of the string body b (scanned, without
// its quotes) as encoding/json decodes it.
func appendUnquoted(dst, b []byte) []byte {
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

// parseInt64 reads a scanned JSON number as encoding/json reads one into an
// int64: an integer in range, or not at all.
func parseInt64(b []byte) (int64, bool) {
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
