package bearer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

func TestCallerRefused(t *testing.T) {
	err := CallerError(codes.Unauthenticated, "unknown bearer token")
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.True(t, CallerRefused(err))
	require.True(t, CallerRefused(fmt.Errorf("wrapped: %w", err)))
	require.False(t, CallerRefused(status.Error(codes.Unauthenticated, "invalid API key")), "a client's refusal")
	require.False(t, CallerRefused(errors.New("x")))
	require.False(t, CallerRefused(nil))
}
