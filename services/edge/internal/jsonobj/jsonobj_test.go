package jsonobj

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEncode(t *testing.T) {
	got := Encode(map[string]json.RawMessage{"b": json.RawMessage(` [1, 2] `), "a": json.RawMessage(`"x\"y"`), "q\"": json.RawMessage(`null`)})
	require.Equal(t, `{"a":"x\"y","b":[1, 2],"q\"":null}`, string(got))
	var back map[string]any
	require.NoError(t, json.Unmarshal(got, &back))
	require.Equal(t, `{}`, string(Encode(nil)))
}

// TestAppendStringMatchesMarshal: a string is written as json.Marshal
// writes it, escapes, HTML-safe characters and invalid UTF-8 included.
func TestAppendStringMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "m", "org/model-7b:free", "gen-0192a3b4c5d6abcdefghijklmnop", `we"ird`, `back\slash`,
		"<html>&", "caf\u00e9", "bad\xffutf8", "line\nbreak", "\x00\x1f\x7f", "\u2028\u2029", "~ ok ~"} {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		require.Equal(t, string(want), string(AppendString(nil, s)), "%q", s)
		require.Equal(t, "x"+string(want), string(AppendString([]byte("x"), s)), "%q appended", s)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "m", `a"b`, "<", "\xff", "\u2028", "\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	})
}
