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

func TestAdminListenFlags(t *testing.T) {
	none := func(string) string { return "" }
	cfg, err := ParseFlags([]string{"--admin-listen", "9190"}, none, io.Discard)
	require.NoError(t, err)
	l, err := cfg.Admin()
	require.NoError(t, err)
	require.Equal(t, "9190", l.Addr)
	require.False(t, l.Pprof, "profiles only with --pprof")

	cfg, err = ParseFlags([]string{"--admin-listen", "9190", "--pprof"}, none, io.Discard)
	require.NoError(t, err)
	l, err = cfg.Admin()
	require.NoError(t, err)
	require.True(t, l.Pprof)

	_, err = ParseFlags([]string{"--pprof"}, none, io.Discard)
	require.ErrorContains(t, err, "--pprof")
	_, err = ParseFlags([]string{"--admin-listen", "1", "--debug-listen", "2"}, none, io.Discard)
	require.ErrorContains(t, err, "--debug-listen")
}

// TestAdminListener: the admin listener serves the metrics, health as the
// gRPC health service says it and the dashboard, and no profiles without
// --pprof.
func TestAdminListener(t *testing.T) {
	dir := t.TempDir()
	d, _ := startDecider(t, Config{Catalog: writeCatalog(t, dir, false), DataDir: dir, AdminListen: ":0"})
	t.Cleanup(d.Close)
	addr := d.DebugAddr()
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:"), "a port alone listens on loopback: %s", addr)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	get := func(path string) (int, http.Header, string) {
		resp, err := (&http.Client{Transport: tr}).Get("http://" + addr + path)
		require.NoError(t, err, path)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.NoError(t, err, path)
		return resp.StatusCode, resp.Header, string(body)
	}
	code, _, body := get("/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "go_goroutines")
	code, _, _ = get("/healthz")
	require.Equal(t, http.StatusOK, code)
	code, _, body = get("/readyz")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "SERVING\n", body)
	code, _, _ = get("/debug/pprof/")
	require.Equal(t, http.StatusNotFound, code, "no profiles without --pprof")
	code, h, body := get("/dashboard/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, h.Get("Content-Security-Policy"), "default-src 'none'")
	require.Contains(t, body, "static/app.js")

	d.health.Shutdown() // as Close does first: draining
	code, _, body = get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "NOT_SERVING\n", body)
	code, _, _ = get("/healthz")
	require.Equal(t, http.StatusOK, code, "liveness holds while draining")
}
