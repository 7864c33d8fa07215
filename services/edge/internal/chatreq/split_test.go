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
