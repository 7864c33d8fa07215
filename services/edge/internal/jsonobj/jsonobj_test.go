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
