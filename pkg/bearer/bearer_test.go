package bearer

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFileRotates(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(p, []byte("first\n"), 0o600))
	now := time.Unix(1000, 0)
	f, err := NewFile(p, Options{Every: time.Second, Now: func() time.Time { return now }})
	require.NoError(t, err)
	md, err := f.GetRequestMetadata(t.Context())
	require.NoError(t, err)
	require.Equal(t, "Bearer first", md["authorization"])
	require.False(t, f.RequireTransportSecurity())

	require.NoError(t, os.WriteFile(p, []byte("second-token"), 0o600))
	md, _ = f.GetRequestMetadata(t.Context())
	require.Equal(t, "Bearer first", md["authorization"], "not checked again within Every")
	now = now.Add(time.Second)
	md, _ = f.GetRequestMetadata(t.Context())
	require.Equal(t, "Bearer second-token", md["authorization"])

	// An empty or missing file during a rotation keeps the last token.
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	now = now.Add(time.Second)
	md, err = f.GetRequestMetadata(t.Context())
	require.NoError(t, err)
	require.Equal(t, "Bearer second-token", md["authorization"])
}

func TestFileErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := NewFile(filepath.Join(dir, "missing"), Options{})
	require.ErrorContains(t, err, "token file")
	p := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(p, []byte(" \n"), 0o600))
	_, err = NewFile(p, Options{})
	require.ErrorContains(t, err, "is empty")
	require.NoError(t, os.WriteFile(p, []byte("two words"), 0o600))
	_, err = NewFile(p, Options{})
	require.ErrorContains(t, err, "one word")
	require.NotContains(t, err.Error(), "two words", "the token is never in an error")
}

func TestToken(t *testing.T) {
	md, err := Token("abc").GetRequestMetadata(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]string{"authorization": "Bearer abc"}, md)
}
