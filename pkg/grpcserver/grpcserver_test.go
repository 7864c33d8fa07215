package grpcserver

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

const (
	emptyCall = "/grpc.testing.TestService/EmptyCall"
	unaryCall = "/grpc.testing.TestService/UnaryCall"
)

// service answers EmptyCall with what call says, and UnaryCall after
// release is closed (or its context ends).
type service struct {
	testgrpc.UnimplementedTestServiceServer
	call    func(context.Context) error
	started chan struct{}
	release chan struct{}
}

func (s *service) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	if err := s.call(ctx); err != nil {
		return nil, err
	}
	return &testgrpc.Empty{}, nil
}

func (s *service) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	close(s.started)
	select {
	case <-s.release:
		return &testgrpc.SimpleResponse{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// served is a Server on bufconn with a client connection to it.
type served struct {
	srv  *Server
	svc  *service
	logs *syncBuffer
	conn *grpc.ClientConn
	done chan error
}

func serve(t *testing.T, opts Options) *served {
	t.Helper()
	logs := &syncBuffer{}
	s := New(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), opts)
	svc := &service{call: func(context.Context) error { return nil }, started: make(chan struct{}), release: make(chan struct{})}
	testgrpc.RegisterTestServiceServer(s.GRPC, svc)
	lis := bufconn.Listen(1 << 20)
	done := make(chan error, 1)
	go func() { done <- s.GRPC.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		s.GRPC.Stop()
	})
	return &served{srv: s, svc: svc, logs: logs, conn: conn, done: done}
}

func (s *served) health(t *testing.T, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	resp, err := healthpb.NewHealthClient(s.conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
	require.NoError(t, err)
	return resp.GetStatus()
}

func (s *served) empty(t *testing.T) error {
	t.Helper()
	_, err := testgrpc.NewTestServiceClient(s.conn).EmptyCall(t.Context(), &testgrpc.Empty{})
	return err
}

// Health answers NOT_SERVING until told otherwise, then for the named
// services too; reflection is off unless asked for.
func TestHealth(t *testing.T) {
	s := serve(t, Options{})
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, s.health(t, ""))
	s.srv.SetServing(true, "switchboard.v1.DeciderService")
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, s.health(t, ""))
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, s.health(t, "switchboard.v1.DeciderService"))
	s.srv.SetServing(false, "switchboard.v1.DeciderService")
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, s.health(t, ""))
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, s.health(t, "switchboard.v1.DeciderService"))

	require.NotContains(t, s.srv.GRPC.GetServiceInfo(), "grpc.reflection.v1.ServerReflection")
	with := serve(t, Options{Reflection: true})
	require.Contains(t, with.srv.GRPC.GetServiceInfo(), "grpc.reflection.v1.ServerReflection")
}

// The caller's interceptors run in the order given, inside logging and
// panic recovery: a panic in one of them, as in a handler, is an Internal
// error with a fixed message, logged with its stack, and the server lives.
func TestInterceptorOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	record := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, name)
	}
	var panicIn atomic.Value // where to panic: an interceptor's name or "handler"
	panicIn.Store("")
	mark := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			record(name)
			if panicIn.Load() == name {
				panic("boom in " + name)
			}
			return h(ctx, req)
		}
	}
	s := serve(t, Options{Unary: []grpc.UnaryServerInterceptor{mark("auth"), mark("limits")}})
	s.svc.call = func(context.Context) error {
		record("handler")
		if panicIn.Load() == "handler" {
			panic("boom in handler")
		}
		return nil
	}

	require.NoError(t, s.empty(t))
	require.Equal(t, []string{"auth", "limits", "handler"}, order)

	for _, where := range []string{"auth", "handler"} {
		t.Run("panic in "+where, func(t *testing.T) {
			panicIn.Store(where)
			err := s.empty(t)
			require.Equal(t, codes.Internal, status.Code(err), "%v", err)
			require.Equal(t, "internal error", status.Convert(err).Message(), "the panic's value stays in the log")
			require.Contains(t, s.logs.String(), "panic in handler")
			require.Contains(t, s.logs.String(), "boom in "+where)
			// The logging interceptor, outside recovery, saw the error.
			require.Contains(t, s.logs.String(), "grpc.code=Internal")
		})
	}
	panicIn.Store("")
	require.NoError(t, s.empty(t), "the server survived")
}

// Logging: a call's end is logged at a level set by its code (expected
// refusals at debug, failures of the server at error), except for hot
// methods, whose unexpected failures only are logged, by a light
// interceptor.
func TestLogging(t *testing.T) {
	levels := func(logs string, method string) []string {
		var out []string
		for line := range strings.SplitSeq(logs, "\n") {
			if !strings.Contains(line, method) {
				continue
			}
			for _, f := range strings.Fields(line) {
				if lvl, ok := strings.CutPrefix(f, "level="); ok {
					out = append(out, lvl)
				}
			}
		}
		return out
	}
	tests := []struct {
		name     string
		hot      bool
		err      error
		want     []string
		wantCode string
	}{
		{name: "ok", err: nil, want: []string{"DEBUG"}},
		{name: "refusal", err: status.Error(codes.InvalidArgument, "no"), want: []string{"DEBUG"}},
		{name: "overload", err: status.Error(codes.ResourceExhausted, "full"), want: []string{"WARN"}},
		{name: "bug", err: status.Error(codes.Internal, "broken"), want: []string{"ERROR"}},
		{name: "hot ok", hot: true, err: nil, want: nil},
		{name: "hot refusal", hot: true, err: status.Error(codes.InvalidArgument, "no"), want: nil},
		{name: "hot unavailable", hot: true, err: status.Error(codes.Unavailable, "down"), want: []string{"ERROR"}},
		{name: "hot bug", hot: true, err: status.Error(codes.Internal, "broken"), want: []string{"ERROR"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts Options
			if tt.hot {
				opts.HotMethods = []string{emptyCall}
			}
			s := serve(t, opts)
			s.svc.call = func(context.Context) error { return tt.err }
			err := s.empty(t)
			require.Equal(t, status.Code(tt.err), status.Code(err))
			require.Equal(t, tt.want, levels(s.logs.String(), "EmptyCall"), "%s", s.logs.String())
		})
	}
}

// Shutdown reports NOT_SERVING first, lets a call in flight finish, and
// returns once it did.
func TestShutdownDrains(t *testing.T) {
	s := serve(t, Options{})
	s.srv.SetServing(true)
	// A watch sees the NOT_SERVING Shutdown reports before anything stops.
	// (The server then ends the watch itself: TestShutdownEndsHealthWatches.)
	watchCtx, endWatch := context.WithCancel(t.Context())
	defer endWatch()
	watch, err := healthpb.NewHealthClient(s.conn).Watch(watchCtx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.GetStatus())

	answered := make(chan error, 1)
	go func() {
		_, err := testgrpc.NewTestServiceClient(s.conn).UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
		answered <- err
	}()
	<-s.svc.started
	stopped := make(chan struct{})
	go func() {
		s.srv.Shutdown(0, time.Minute)
		close(stopped)
	}()
	next, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, next.GetStatus())
	endWatch()
	select {
	case <-stopped:
		t.Fatal("Shutdown returned with a call in flight")
	case err := <-answered:
		t.Fatalf("the call in flight ended before it was released: %v", err)
	default:
	}
	close(s.svc.release)
	require.NoError(t, <-answered, "the call in flight finished")
	<-stopped
	require.NoError(t, <-s.done, "Serve returned, as after GracefulStop")
}

// A call that does not finish within the timeout is cut: Shutdown stops
// the server hard rather than wait for it.
func TestShutdownTimeoutStopsHard(t *testing.T) {
	s := serve(t, Options{})
	answered := make(chan error, 1)
	go func() {
		_, err := testgrpc.NewTestServiceClient(s.conn).UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
		answered <- err
	}()
	<-s.svc.started
	s.srv.Shutdown(0, 10*time.Millisecond)
	err := <-answered
	require.Error(t, err)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	<-s.done
}

// An open health Watch does not hold Shutdown until its timeout: the
// watcher is told NOT_SERVING, then the server ends the stream itself
// (Unavailable, "shutting down") and GracefulStop returns. Before, the
// watch lasted until the hard stop cut the connection under it.
func TestShutdownEndsHealthWatches(t *testing.T) {
	s := serve(t, Options{})
	s.srv.SetServing(true)
	watch, err := healthpb.NewHealthClient(s.conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.GetStatus())

	stopped := make(chan struct{})
	go func() {
		// A timeout long enough that a hard stop shows in the stream's
		// end (a transport error) rather than in a slow test passing.
		s.srv.Shutdown(0, 20*time.Second)
		close(stopped)
	}()
	next, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, next.GetStatus())
	_, err = watch.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), shuttingDown, "the server ended the watch, not the hard stop")
	<-stopped
	require.NoError(t, <-s.done, "Serve returned, as after GracefulStop")
}

// A watch opened once Shutdown began is told NOT_SERVING and ended at once.
func TestHealthWatchAfterShutdown(t *testing.T) {
	s := serve(t, Options{})
	s.srv.SetServing(true)
	s.srv.Health.Shutdown()
	s.srv.watches.end()
	watch, err := healthpb.NewHealthClient(s.conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, first.GetStatus())
	_, err = watch.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), shuttingDown)
}
