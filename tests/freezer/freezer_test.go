package freezer

import (
	"bufio"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echo serves a line echo on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	t.Helper()
	_, err := c.Write([]byte(line + "\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
	got, err := r.ReadString('\n')
	return got, err
}

// A frozen proxy keeps the connections it holds open and passes nothing on
// them, new ones included; healed, it delivers what it held, in order. A
// connection its hold function leaves out passes all along.
func TestFreezeHoldsAndHealDelivers(t *testing.T) {
	var accepted atomic.Int64
	// The second connection accepted is not held.
	p, err := Start(echo(t), func(net.Conn) bool { return accepted.Add(1) != 2 })
	require.NoError(t, err)
	t.Cleanup(p.Close)

	old, oldR := dial(t, p.Addr())
	got, err := roundTrip(t, old, oldR, "before", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "before\n", got)
	spared, sparedR := dial(t, p.Addr())
	got, err = roundTrip(t, spared, sparedR, "spared", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "spared\n", got)

	p.Set(true)
	_, err = roundTrip(t, old, oldR, "during", 300*time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "nothing passes while frozen")
	fresh, freshR := dial(t, p.Addr())
	_, err = roundTrip(t, fresh, freshR, "new", 300*time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a connection accepted while frozen passes nothing either")
	got, err = roundTrip(t, spared, sparedR, "still", 10*time.Second)
	require.NoError(t, err, "a connection not held passes while frozen")
	require.Equal(t, "still\n", got)

	p.Set(false)
	for _, c := range []struct {
		conn net.Conn
		r    *bufio.Reader
		want string
	}{{old, oldR, "during\n"}, {fresh, freshR, "new\n"}} {
		require.NoError(t, c.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		got, err = c.r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, c.want, got, "the held bytes arrive once healed")
	}
}

// Close ends every connection, frozen ones included, and returns.
func TestCloseEndsFrozenConnections(t *testing.T) {
	p, err := Start(echo(t), nil)
	require.NoError(t, err)
	c, r := dial(t, p.Addr())
	_, err = roundTrip(t, c, r, "hi", 10*time.Second)
	require.NoError(t, err)
	p.Set(true)
	_, err = c.Write([]byte("held\n"))
	require.NoError(t, err)
	p.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = io.ReadAll(r)
	require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "closed by the proxy (EOF or a reset), not left hanging")
}
