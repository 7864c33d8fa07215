// Package etcdtest starts an embedded etcd for tests: a real server on a
// free loopback port with its data in the test's temporary directory.
package etcdtest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

// Start starts an embedded etcd stopped when the test ends, and returns its
// client endpoint.
func Start(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := store.StartEmbedded(ctx, store.EmbeddedOptions{DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return e.Endpoint()
}

// Connect returns a store connected to endpoint, closed when the test ends.
func Connect(t testing.TB, endpoint string) *store.Store {
	t.Helper()
	s, err := store.Connect(context.Background(), []string{endpoint}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}
