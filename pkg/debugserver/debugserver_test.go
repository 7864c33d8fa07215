package debugserver

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAddr(t *testing.T) {
	for in, want := range map[string]string{
		"6060":          "127.0.0.1:6060",
		":6060":         "127.0.0.1:6060",
		"127.0.0.1:0":   "127.0.0.1:0",
		"0.0.0.0:6060":  "0.0.0.0:6060",
		"[::1]:6060":    "[::1]:6060",
		" localhost:7 ": "localhost:7",
	} {
		got, err := Addr(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "  ", "host:", "a:b:c"} {
		_, err := Addr(bad)
		assert.Error(t, err, bad)
	}
}

func TestServesProfilesOnLoopback(t *testing.T) {
	s, err := Start(context.Background(), Listener{Addr: ":0", Pprof: true}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer s.Close()
	assert.True(t, strings.HasPrefix(s.Addr(), "127.0.0.1:"), s.Addr())

	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/allocs?debug=1", "/debug/pprof/cmdline"} {
		resp, err := http.Get("http://" + s.Addr() + path)
		require.NoError(t, err, path)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.NoError(t, err, path)
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.NotEmpty(t, body, path)
	}
	resp, err := http.Get("http://" + s.Addr() + "/")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "only /debug/pprof/ is served")
	http.DefaultClient.CloseIdleConnections()
}

func TestCloseNil(t *testing.T) {
	var s *Server
	s.Close()
}

func TestServesMounts(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "up 1\n") })
	s, err := Start(context.Background(), Listener{Addr: ":0", Pprof: true}, slog.New(slog.DiscardHandler),
		Mount{Pattern: "/metrics", Handler: metrics}, Mount{Pattern: "/nothing"})
	require.NoError(t, err)
	defer s.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	get := func(path string) (int, string) {
		resp, err := (&http.Client{Transport: tr}).Get("http://" + s.Addr() + path)
		require.NoError(t, err, path)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.NoError(t, err, path)
		return resp.StatusCode, string(body)
	}
	code, body := get("/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "up 1\n", body)
	code, _ = get("/debug/pprof/cmdline")
	assert.Equal(t, http.StatusOK, code, "the profiles beside it")
	code, _ = get("/nothing")
	assert.Equal(t, http.StatusNotFound, code, "a mount without a handler is not served")
}

func TestProfilesOnlyWithPprof(t *testing.T) {
	s, err := Start(context.Background(), Listener{Addr: ":0"}, slog.New(slog.DiscardHandler),
		Mount{Pattern: "/metrics", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "up 1\n") })})
	require.NoError(t, err)
	defer s.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	for path, want := range map[string]int{"/metrics": http.StatusOK, "/debug/pprof/": http.StatusNotFound, "/debug/pprof/heap": http.StatusNotFound, "/debug/pprof/cmdline": http.StatusNotFound} {
		resp, err := (&http.Client{Transport: tr}).Get("http://" + s.Addr() + path)
		require.NoError(t, err, path)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, want, resp.StatusCode, path)
	}
}

func TestResolve(t *testing.T) {
	l, err := Resolve("", "", false)
	require.NoError(t, err)
	assert.Equal(t, Listener{}, l, "off by default")
	l, err = Resolve(":9190", "", false)
	require.NoError(t, err)
	assert.Equal(t, Listener{Addr: ":9190"}, l, "no profiles without --pprof")
	l, err = Resolve(":9190", "", true)
	require.NoError(t, err)
	assert.Equal(t, Listener{Addr: ":9190", Pprof: true}, l)
	l, err = Resolve("", "6060", false)
	require.NoError(t, err)
	assert.Equal(t, Listener{Addr: "6060", Pprof: true}, l, "--debug-listen serves what it did: the profiles too")
	_, err = Resolve(":1", ":2", false)
	assert.ErrorContains(t, err, "--debug-listen")
	_, err = Resolve("", "", true)
	assert.ErrorContains(t, err, "--pprof")
	_, err = Resolve("a:b:c", "", false)
	assert.ErrorContains(t, err, "--admin-listen")
	_, err = Resolve("", "a:b:c", false)
	assert.ErrorContains(t, err, "--debug-listen")
}
