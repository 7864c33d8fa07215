//go:build linux

package chaos

import (
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// sockOwner finds the process holding a connection's client end: this
// process for a connection it dialed itself, no one of other pids.
func TestSockOwnerFindsTheClientProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	require.NoError(t, err)
	defer s.Close()
	other := exec.CommandContext(t.Context(), "sleep", "30")
	require.NoError(t, other.Start())
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	require.Equal(t, os.Getpid(), sockOwner(s, []int{other.Process.Pid, os.Getpid()}))
	require.Equal(t, -1, sockOwner(s, []int{other.Process.Pid}))
}
