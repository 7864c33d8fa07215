package app

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestStartFailureReleasesWhatItOpened: a start that fails at its last
// step (the debug listener's address is taken) closes what the steps
// before it opened: the HTTP listener (its address can be listened on
// again), the decider connection and every goroutine.
func TestStartFailureReleasesWhatItOpened(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listen := free.Addr().String()
	require.NoError(t, free.Close())

	_, err = Start(t.Context(), Config{Listen: listen, Decider: "127.0.0.1:1", DebugListen: taken.Addr().String()}, nil)
	require.ErrorContains(t, err, taken.Addr().String())

	again, err := net.Listen("tcp", listen)
	require.NoError(t, err, "the HTTP listener was closed")
	require.NoError(t, again.Close())
}
