// Package debugserver owns the services' opt-in debug listener: plain HTTP
// serving the Go runtime's profiles (net/http/pprof), and whatever else a
// service mounts on it (its Prometheus metrics at /metrics), on its own
// port, separate from the API and gRPC ports, and never on by default.
package debugserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof" //nolint:gosec // G108: the handlers go on a private mux of an opt-in listener, never on http.DefaultServeMux's server.
	"strings"
	"time"
)

// Addr turns a --debug-listen value into a host:port: a value without a
// host ("6060" or ":6060") listens on loopback only, since profiles show
// the process's internals to whoever connects. An explicit host (including
// 0.0.0.0) is kept as given.
func Addr(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("empty address")
	}
	if !strings.Contains(s, ":") {
		s = ":" + s
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", err
	}
	if port == "" {
		return "", fmt.Errorf("%q: no port", s)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Mount is one more handler served by the debug listener, at Pattern (a
// [http.ServeMux] pattern such as "/metrics").
type Mount struct {
	Pattern string
	Handler http.Handler
}

// Handler serves the profiles under /debug/pprof/ (index, cmdline,
// profile, symbol, trace and the named profiles such as heap, allocs and
// goroutine), and each mount with a handler.
func Handler(mounts ...Mount) http.Handler {
	mux := http.NewServeMux()
	for _, m := range mounts {
		if m.Handler != nil {
			mux.Handle(m.Pattern, m.Handler)
		}
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Server is a running debug listener.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Start listens on addr (normalised by [Addr]) and serves [Handler] with
// mounts until Close.
func Start(ctx context.Context, addr string, logger *slog.Logger, mounts ...Mount) (*Server, error) {
	a, err := Addr(addr)
	if err != nil {
		return nil, fmt.Errorf("--debug-listen %q: %w", addr, err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", a)
	if err != nil {
		return nil, fmt.Errorf("--debug-listen %s: %w", a, err)
	}
	s := &Server{
		ln:   ln,
		done: make(chan struct{}),
		srv: &http.Server{
			Handler:           Handler(mounts...),
			ReadHeaderTimeout: 10 * time.Second,
			// No WriteTimeout: a CPU profile or trace answers after the
			// seconds it was asked to record.
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("debug listener stopped", "err", err)
		}
	}()
	names := []string{"/debug/pprof/"}
	for _, m := range mounts {
		if m.Handler != nil {
			names = append(names, m.Pattern)
		}
	}
	logger.Info("debug listener serving", "addr", s.Addr(), "paths", names)
	return s, nil
}

// Addr is the host:port the debug listener serves on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the listener and cuts profiles being recorded. It is safe on
// a nil Server.
func (s *Server) Close() {
	if s == nil {
		return
	}
	_ = s.srv.Close()
	<-s.done
}
