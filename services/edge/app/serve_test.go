package app

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeFailureEndsRun: when the HTTP server stops on its own (its
// listener broke), the edge does not sit there alive and deaf: wait returns
// the error, so Run exits non-zero and the process is restarted.
func TestServeFailureEndsRun(t *testing.T) {
	h := newHarness(t, 1, nil)
	require.NoError(t, h.edge.ln.Close())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // hang guard only
	defer cancel()
	err := h.edge.wait(ctx)
	require.Error(t, err)
	require.ErrorContains(t, err, "http server")
	require.NoError(t, ctx.Err(), "wait returned because the server failed, not because the guard expired")
}

// TestVersionFromLinker: the Makefile's -X sets Version, and the edge
// announces it (Report hello, User-Agent).
func TestVersionFromLinker(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v9.9.9-test"
	require.Equal(t, "v9.9.9-test", BuildVersion())
	Version = "dev"
	require.NotEmpty(t, BuildVersion())
}
