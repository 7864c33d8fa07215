package chatreq

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// splitCases are valid JSON objects whose members are hard to find: names
// and values with escapes, brackets inside strings, nesting, repeats,
// whitespace everywhere.
var splitCases = []string{
	`{}`,
	` { } `,
	`{"a":1}`,
	"{\n\t\"a\" :\r\n 1 , \"b\" : [ ] , \"c\":{ }\n}",
	`{"model":"m","messages":[{"role":"user","content":"q"}],"stream":true}`,
	`{"s":"a\"b\\","t":"}]{[","u":"\\\"","v":"\u00e9\ud83d\ude00"}`,
	`{"a\"b":1,"c\\d":2,"\u0065":3,"caf\u00e9":4,"é":5,"":6}`,
	"{\"bad\xff\":1,\"ok\":\"bad\xffvalue\"}",
	`{"x":1,"x":[1,2],"x":{"y":"z"}}`,
	`{"n":-1.5e+10,"m":0,"t":true,"f":false,"z":null}`,
	`{"deep":[[[{"a":[{"b":"]]]}}}"}]}]]],"after":"x"}`,
	`{"a":[1,"2",{"3":[4]}],"b":{"c":{"d":{}}},"e":[]}`,
}

// TestSplitObjectMatchesUnmarshal: the members found are what
// json.Unmarshal into a map gives, value bytes included.
func TestSplitObjectMatchesUnmarshal(t *testing.T) {
	for _, body := range append(append([]string{}, splitCases...), fuzzSeeds...) {
		checkSplit(t, []byte(body))
	}
}

// checkSplit compares splitObject with json.Unmarshal on body, when body
// is a valid object.
func checkSplit(t *testing.T, body []byte) {
	t.Helper()
	var want map[string]json.RawMessage
	if json.Unmarshal(body, &want) != nil || want == nil {
		return
	}
	trimmed := trimSpace(body)
	got := splitObject(trimmed)
	require.Equal(t, len(want), len(got), "%s", body)
	for k, v := range want {
		require.Contains(t, got, k, "%s", body)
		require.Equal(t, string(v), string(got[k]), "%s: member %q", body, k)
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func FuzzSplitObject(f *testing.F) {
	for _, s := range splitCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkSplit(t, body)
	})
}

// messagesCases are messages arrays, good and bad, whose decoding has
// corners: null elements, names in other cases or escaped, repeated names,
// unknown members, numbers a float64 cannot hold, content parts.
var messagesCases = []string{
	`[]`,
	`[{"role":"user","content":"q"}]`,
	` [ { "role" : "system" , "content" : "s" } , {"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"u"}}]} ] `,
	`[null,{"role":"user","content":"q"}]`,
	`[{"ROLE":"user","Content":"q","NAME":"n"}]`,
	`[{"role":"user","Role":"assistant","content":"a","content":null}]`,
	`[{"Role":"user","role":"assistant"}]`,
	`[{"r\u006fle":"user","content":"\u00e9\n"}]`,
	`[{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}],"TOOL_CALLS":null}]`,
	`[{"role":"tool","tool_call_id":"c","content":"r","function_call":{"name":"f"},"extra":{"deep":[1,2,{"x":1e400}]}}]`,
	`[{"role":1e400,"content":"q"}]`,
	`[{"role":"user","content":[{"type":"text","text":"x","n":1e999}]}]`,
	`[{"role":5,"name":true,"content":false,"tool_call_id":[1]}]`,
	`[{"tool_callſ":[1],"role":"user","content":"q"}]`,
	`[1]`,
	`[{"role":"user","content":"q"},"x"]`,
	`[[]]`,
	`{"role":"user"}`,
	`"messages"`,
	`[{}]`,
	"[{\"role\":\"us\xffer\",\"content\":\"q\"}]",
}

// TestDecodeMessagesMatchesUnmarshal: the messages decoded are what
// json.Unmarshal into []wireMessage gives, and fail where it fails.
func TestDecodeMessagesMatchesUnmarshal(t *testing.T) {
	for _, raw := range messagesCases {
		checkMessages(t, []byte(raw))
	}
}

func checkMessages(t *testing.T, raw []byte) {
	t.Helper()
	if !json.Valid(raw) || string(trimSpace(raw)) == "null" {
		return // Parse never decodes such messages
	}
	var want []wireMessage
	wantErr := json.Unmarshal(raw, &want)
	got, ok := decodeMessages(trimSpace(raw), nil)
	require.Equal(t, wantErr == nil, ok, "%s: %v", raw, wantErr)
	if ok {
		require.Equal(t, want, got, "%s", raw)
	}
}

func FuzzDecodeMessages(f *testing.F) {
	for _, s := range messagesCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkMessages(t, raw)
	})
}
