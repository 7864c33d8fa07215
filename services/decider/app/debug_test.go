package app

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDebugListenFlag(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	cfg, err := ParseFlags(nil, none, io.Discard)
	require.NoError(t, err)
	require.Empty(t, cfg.DebugListen, "off by default")

	cfg, err = ParseFlags([]string{"--debug-listen", "6060"}, none, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "6060", cfg.DebugListen)

	_, err = ParseFlags([]string{"--debug-listen", "a:b:c"}, none, io.Discard)
	require.ErrorContains(t, err, "--debug-listen")
}

// TestDebugListener: with --debug-listen the profiles are served over plain
// HTTP on their own loopback port; without it there is no such listener.
func TestDebugListener(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, _ := startDecider(t, Config{Catalog: writeCatalog(t, dir, false), DataDir: dir, DebugListen: ":0"})
	t.Cleanup(d.Close)
	addr := d.DebugAddr()
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:"), "a port alone listens on loopback: %s", addr)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "goroutine profile")

	dir2 := t.TempDir()
	plain, _ := startDecider(t, Config{Catalog: writeCatalog(t, dir2, false), DataDir: dir2})
	t.Cleanup(plain.Close)
	require.Empty(t, plain.DebugAddr())
}
