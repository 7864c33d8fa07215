package app

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDebugListenFlag(t *testing.T) {
	c, err := ParseFlags(nil, func(string) string { return "" })
	require.NoError(t, err)
	require.Empty(t, c.DebugListen, "off by default")

	c, err = ParseFlags([]string{"--debug-listen", ":6060"}, func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, ":6060", c.DebugListen)

	c, err = ParseFlags(nil, func(k string) string {
		if k == "SWITCHBOARD_EDGE_DEBUG_LISTEN" {
			return "127.0.0.1:6061"
		}
		return ""
	})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:6061", c.DebugListen)

	_, err = ParseFlags([]string{"--debug-listen", "a:b:c"}, func(string) string { return "" })
	require.ErrorContains(t, err, "--debug-listen")
}

// TestDebugListener: with --debug-listen the profiles are served on their
// own loopback port, never on the API port; without it there is no such
// listener.
func TestDebugListener(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.DebugListen = ":0" })
	addr := h.edge.DebugAddr()
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:"), "a port alone listens on loopback: %s", addr)

	resp, err := h.client.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	resp, err = h.client.Get("http://" + h.edge.Addr() + "/debug/pprof/")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.NotEqual(t, http.StatusOK, resp.StatusCode, "the API port serves no profiles")

	plain := newHarness(t, 1, nil)
	require.Empty(t, plain.edge.DebugAddr())
}
