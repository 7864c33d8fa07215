// Package debugserver owns the services' admin listener: plain HTTP on its
// own port, apart from the API and gRPC ports, serving what a service
// mounts on it (its Prometheus metrics at /metrics, its health at /healthz
// and /readyz, the decider's dashboard) and, only when asked (--pprof), the
// Go runtime's profiles (net/http/pprof under /debug/pprof/). It is never on
// by default. --debug-listen, the listener's former name, still starts it,
// with the profiles, as before.
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

// Addr turns an --admin-listen value into a host:port: a value without a
// host ("6060" or ":6060") listens on loopback only, since metrics and
// profiles show the process's internals to whoever connects. An explicit
// host (including 0.0.0.0) is kept as given.
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

// Listener is what a service's flags ask of its admin listener.
type Listener struct {
	// Addr is --admin-listen: where it listens; empty for no listener.
	Addr string
	// Pprof is --pprof: whether it also serves the Go profiles.
	Pprof bool
}

// Resolve reads the admin flags: --admin-listen, --pprof and the deprecated
// --debug-listen, which is --admin-listen with --pprof (what it served
// before the listener had a name of its own). Setting both addresses, or
// --pprof without a listener, is an error naming the flags.
func Resolve(admin, debug string, pprof bool) (Listener, error) {
	switch {
	case admin != "" && debug != "":
		return Listener{}, errors.New("--debug-listen is the former name of --admin-listen (with --pprof): set one of them")
	case debug != "":
		if _, err := Addr(debug); err != nil {
			return Listener{}, fmt.Errorf("--debug-listen %q: %w", debug, err)
		}
		return Listener{Addr: debug, Pprof: true}, nil
	case admin != "":
		if _, err := Addr(admin); err != nil {
			return Listener{}, fmt.Errorf("--admin-listen %q: %w", admin, err)
		}
		return Listener{Addr: admin, Pprof: pprof}, nil
	case pprof:
		return Listener{}, errors.New("--pprof serves the profiles on the admin listener: it needs --admin-listen")
	}
	return Listener{}, nil
}

// Mount is one more handler served by the admin listener, at Pattern (a
// [http.ServeMux] pattern such as "/metrics").
type Mount struct {
	Pattern string
	Handler http.Handler
}

// Handler serves each mount with a handler, and with pprof the profiles
// under /debug/pprof/ (index, cmdline, profile, symbol, trace and the named
// profiles such as heap, allocs and goroutine). Without pprof no path under
// /debug/pprof/ is served.
func Handler(pprofOn bool, mounts ...Mount) http.Handler {
	mux := http.NewServeMux()
	for _, m := range mounts {
		if m.Handler != nil {
			mux.Handle(m.Pattern, m.Handler)
		}
	}
	if pprofOn {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Server is a running admin listener.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Start listens on l.Addr (normalised by [Addr]) and serves [Handler] with
// mounts until Close.
func Start(ctx context.Context, l Listener, logger *slog.Logger, mounts ...Mount) (*Server, error) {
	a, err := Addr(l.Addr)
	if err != nil {
		return nil, fmt.Errorf("--admin-listen %q: %w", l.Addr, err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", a)
	if err != nil {
		return nil, fmt.Errorf("--admin-listen %s: %w", a, err)
	}
	s := &Server{
		ln:   ln,
		done: make(chan struct{}),
		srv: &http.Server{
			Handler:           Handler(l.Pprof, mounts...),
			ReadHeaderTimeout: 10 * time.Second,
			// No WriteTimeout: a CPU profile or trace answers after the
			// seconds it was asked to record.
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("admin listener stopped", "err", err)
		}
	}()
	var names []string
	for _, m := range mounts {
		if m.Handler != nil {
			names = append(names, m.Pattern)
		}
	}
	if l.Pprof {
		names = append(names, "/debug/pprof/")
	}
	logger.Info("admin listener serving", "addr", s.Addr(), "paths", names)
	return s, nil
}

// Addr is the host:port the admin listener serves on.
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
