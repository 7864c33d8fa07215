package app

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeFailureEndsRun: when the gRPC server stops on its own (its
// listener broke), the decider hands over and wait returns the error, so Run
// exits non-zero instead of living on without serving.
func TestServeFailureEndsRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, _ := startDecider(t, Config{Catalog: writeCatalog(t, dir, false), DataDir: dir})
	t.Cleanup(d.Close)
	require.NoError(t, d.lis.Close())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // hang guard only
	defer cancel()
	err := d.wait(ctx)
	require.ErrorContains(t, err, "grpc server")
	require.NoError(t, ctx.Err(), "wait returned because the server failed, not because the guard expired")
}
