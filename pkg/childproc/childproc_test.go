package childproc

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStartStop(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("no sleep binary: %v", err)
	}
	log := filepath.Join(t.TempDir(), "sleep.log")
	c, err := Start("sleeper", exec.CommandContext(t.Context(), sleep, "60"), log)
	require.NoError(t, err)
	require.Positive(t, c.Pid())
	require.NoError(t, c.Err(), "running: no exit error yet")
	c.Stop()
	select {
	case <-c.Exited():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	require.Error(t, c.Err(), "ended by SIGTERM")
	_, err = os.Stat(log)
	require.NoError(t, err, "its stderr went to the log file")
	c.Stop() // a second Stop is harmless
	var none *Child
	none.Stop()
}

func TestStartFailure(t *testing.T) {
	_, err := Start("missing", exec.CommandContext(t.Context(), filepath.Join(t.TempDir(), "no-such-binary")), filepath.Join(t.TempDir(), "x.log"))
	require.ErrorContains(t, err, "start missing")
}

func TestFreePort(t *testing.T) {
	addr, err := FreePort()
	require.NoError(t, err)
	host, _, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err, "free a moment ago, so usable now")
	require.NoError(t, ln.Close())
}
