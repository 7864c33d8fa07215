package jsonscan

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// seeds are valid and broken texts that exercise the grammar's corners:
// escapes, surrogates, invalid UTF-8, control characters, numbers at the
// edge of their syntax and of int64, repeated and escaped names, white
// space everywhere, and texts cut short.
var seeds = []string{
	``, ` `, `{}`, `[]`, ` { } `, `[ ]`, `null`, `true`, `false`, `nul`, `tru`, `nulll`, `0`, `-0`, `01`, `-`, `1.`, `.5`,
	`1e`, `1e+`, `1E-7`, `-12.5e+10`, `1.5E3x`, `9223372036854775807`, `9223372036854775808`, `-9223372036854775808`,
	`-9223372036854775809`, `99999999999999999999`, `1.0`, `1e0`, `"`, `""`, `"\"`, `"\\"`, `"\/"`, `"\x"`, `"\u00e9"`,
	`"\u00E9"`, `"\u00g9"`, `"\u12"`, `"\ud83d\ude00"`, `"\ud800"`, `"\ud800x"`, `"\udc00\ud800"`, `"\ud800\u0041"`,
	"\"\xff\xfe\"", "\"\xe2\x82\"", "\"caf\xc3\xa9\"", "\"a\tb\"", "\"a\x00b\"", "\"a\x7fb\"", `{"a":1,}`, `[1,]`,
	`[,1]`, `{,"a":1}`, `{"a" 1}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`, `[1 2]`, `{"a":1}}`, `[[]`, `[]]`, `{"a":[}]}`,
	`{"x":1,"x":[1,2],"x":{"y":"z"}}`, `{"a\"b":1,"c\\d":2,"\u0065":3,"caf\u00e9":4,"é":5,"":6}`,
	"{\"bad\xff\":1,\"ok\":\"bad\xffvalue\"}", `{"deep":[[[{"a":[{"b":"]]]}}}"}]}]]],"after":"x"}`,
	"{\n\t\"a\" :\r\n 1 , \"b\" : [ ] , \"c\":{ }\n}", "\v{}", "{}\f", "\u00a0{}", `{"a":1}x`, `{} {}`,
	`{"K":1,"k":2,"\u212a":3}`, `{"a":"\ud83d\ude00\ud83d"}`, `"\u0000"`, `{"\u0000":0}`,
}

// gen writes a random JSON value nested at most depth deep: strings with
// escapes, non-ASCII and broken UTF-8, numbers of every shape, names that
// repeat.
func gen(r *rand.Rand, b *bytes.Buffer, depth int) {
	ws := func() {
		for r.IntN(4) == 0 {
			b.WriteByte(" \t\n\r"[r.IntN(4)])
		}
	}
	ws()
	n := r.IntN(10)
	if depth <= 0 && n < 2 {
		n += 2
	}
	switch n {
	case 0:
		b.WriteByte('{')
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteByte(',')
			}
			ws()
			genString(r, b)
			ws()
			b.WriteByte(':')
			gen(r, b, depth-1)
		}
		ws()
		b.WriteByte('}')
	case 1:
		b.WriteByte('[')
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteByte(',')
			}
			gen(r, b, depth-1)
		}
		ws()
		b.WriteByte(']')
	case 2, 3, 4:
		genString(r, b)
	case 5:
		b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
	default:
		genNumber(r, b)
	}
	ws()
}

var pieces = []string{"a", "K", "k", "\u212a", "é", "\xff", "\xe2\x82", "\\n", "\\\"", "\\\\", "\\/", "\\u0041", "\\u00e9",
	"\\ud83d\\ude00", "\\ud800", "\\udc00", "\\u0000", "\t", "\x01", "<&>", "model", "choices", " ", "}", "]", "\""}

func genString(r *rand.Rand, b *bytes.Buffer) {
	b.WriteByte('"')
	for range r.IntN(5) {
		p := pieces[r.IntN(len(pieces))]
		if p == "\"" || p == "\t" || p == "\x01" {
			if r.IntN(8) != 0 {
				continue // mostly valid strings; the mutations break them
			}
		}
		b.WriteString(p)
	}
	b.WriteByte('"')
}

func genNumber(r *rand.Rand, b *bytes.Buffer) {
	switch r.IntN(4) {
	case 0:
		b.WriteString([]string{"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
			"18446744073709551616", "1e400", "-0", "0.0", "1E+2", "00", "1.e3"}[r.IntN(11)])
		return
	case 1:
		b.WriteByte('-')
	}
	b.WriteString([]string{"0", "1", "42", "123456789"}[r.IntN(4)])
	if r.IntN(3) == 0 {
		b.WriteString([]string{".5", ".25", ".0"}[r.IntN(3)])
	}
	if r.IntN(3) == 0 {
		b.WriteString([]string{"e3", "E-2", "e+10"}[r.IntN(3)])
	}
}

// mutate breaks a text in a few places: a byte deleted, doubled or
// replaced by one the grammar cares about.
func mutate(r *rand.Rand, b []byte) []byte {
	const special = "{}[]\",:\\ -+.eE0u\x00\xff"
	for range r.IntN(3) + 1 {
		if len(b) == 0 {
			return b
		}
		i := r.IntN(len(b))
		switch r.IntN(3) {
		case 0:
			b = append(b[:i:i], b[i+1:]...)
		case 1:
			b = append(b[:i+1:i+1], b[i:]...)
		default:
			b[i] = special[r.IntN(len(special))]
		}
	}
	return b
}

// corpus is the seeds, random documents and random documents broken.
func corpus() [][]byte {
	var out [][]byte
	for _, s := range seeds {
		out = append(out, []byte(s))
	}
	r := rand.New(rand.NewPCG(24, 1))
	for range 5000 {
		var b bytes.Buffer
		gen(r, &b, 4)
		out = append(out, bytes.Clone(b.Bytes()))
		out = append(out, mutate(r, bytes.Clone(b.Bytes())))
	}
	for _, depth := range []int{MaxDepth - 1, MaxDepth, MaxDepth + 1} {
		out = append(out, []byte(strings.Repeat("[", depth)+strings.Repeat("]", depth)))
		out = append(out, []byte(strings.Repeat(`{"a":`, depth)+"1"+strings.Repeat("}", depth)))
	}
	return out
}

// TestMatchesEncodingJSON holds the Scanner to encoding/json on every text
// of the corpus: the same accept or refuse decision, and the same values
// where it accepts.
func TestMatchesEncodingJSON(t *testing.T) {
	valid := 0
	for _, data := range corpus() {
		if check(t, data) {
			valid++
		}
	}
	t.Logf("%d valid texts of the corpus", valid)
	if valid < 1000 {
		t.Fatalf("only %d valid texts: the generator no longer exercises the values", valid)
	}
}

// FuzzScanner is the differential check of TestMatchesEncodingJSON on
// arbitrary bytes.
func FuzzScanner(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check(t, data)
	})
}

// check compares the Scanner with encoding/json on data: Valid with
// json.Valid; for a string, Unquote and DecodedLen with json.Unmarshal into
// a string; for a number, ParseInt64 with json.Unmarshal into an int64; for
// an object, the members NextKey and Name find with json.Unmarshal into a
// map of raw values, and Matches with a struct field's match. It reports
// whether data is valid.
func check(t *testing.T, data []byte) bool {
	t.Helper()
	ok := Valid(data)
	if ok != json.Valid(data) {
		t.Fatalf("%q: Valid says %v, json.Valid %v", data, ok, !ok)
	}
	var str string
	strErr := json.Unmarshal(data, &str)
	isString := strErr == nil && bytes.HasPrefix(bytes.TrimSpace(data), []byte(`"`)) // not null, which leaves str alone
	got, gotOK := Unquote(data)
	if gotOK != isString || gotOK && got != str {
		t.Fatalf("%q: Unquote gives %q %v, json.Unmarshal %q %v", data, got, gotOK, str, strErr)
	}
	if !ok {
		return false
	}
	s := New(data)
	switch c := s.Peek(); {
	case c == '"':
		start := s.Pos()
		f, _ := s.Str()
		if n := DecodedLen(data[start:s.Pos()], f); n != int64(len(str)) {
			t.Fatalf("%q: DecodedLen %d, json.Unmarshal's string has %d bytes", data, n, len(str))
		}
	case c == '-' || '0' <= c && c <= '9':
		var want int64
		wantErr := json.Unmarshal(data, &want)
		n, nOK := ParseInt64(bytes.TrimSpace(data))
		if nOK != (wantErr == nil) || n != want {
			t.Fatalf("%q: ParseInt64 %d %v, json.Unmarshal %d %v", data, n, nOK, want, wantErr)
		}
	case c == '{':
		checkObject(t, data)
	}
	return true
}

// checkObject compares the members of the valid object data with
// json.Unmarshal's.
func checkObject(t *testing.T, data []byte) {
	t.Helper()
	var want map[string]json.RawMessage
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("%q: %v", data, err)
	}
	var field struct {
		K int `json:"k"`
	}
	if err := json.Unmarshal(data, &field); err != nil {
		field.K = -1 // a k of another type: compared below only when an int
	}
	got := map[string]string{}
	s := New(data)
	s.Peek()
	s.Step()
	var last []byte // the raw value of the last member Matches "k"
	for first := true; ; first = false {
		k, more, ok := s.NextKey(first)
		if !ok {
			t.Fatalf("%q: NextKey failed on a valid object", data)
		}
		if !more {
			break
		}
		start := s.Pos()
		if !s.Skip(2) {
			t.Fatalf("%q: Skip failed on a valid object", data)
		}
		name, _ := s.Name(k, nil)
		got[string(name)] = string(data[start:s.Pos()])
		if s.Is(k, "k") != (string(name) == "k") {
			t.Fatalf("%q: Is(%q, k) disagrees with the name %q", data, data[k.Raw.Start:k.Raw.End], name)
		}
		if s.Matches(k, "k") {
			last = data[start:s.Pos()]
		}
	}
	if !s.AtEnd() {
		t.Fatalf("%q: text after the object", data)
	}
	if len(got) != len(want) {
		t.Fatalf("%q: %d members, json.Unmarshal %d", data, len(got), len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != string(v) {
			t.Fatalf("%q: member %q is %q (%v), json.Unmarshal's %q", data, k, g, ok, v)
		}
	}
	// The struct field takes the last member Matches finds, as encoding/json
	// does, when that member is an int.
	var n int
	if last != nil && json.Unmarshal(last, &n) == nil && field.K != -1 && n != field.K {
		t.Fatalf("%q: the field k matched %q, encoding/json read %d", data, last, field.K)
	}
}
