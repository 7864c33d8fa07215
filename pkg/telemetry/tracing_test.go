package telemetry

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A server that both traces and measures its calls ends each call's span:
// with a stats handler for each, the metrics one's no-op span took the
// tracing one's place in the call's context, and the recorded span never
// ended. The client's span is the server span's parent, on real gRPC.
func TestServerHandlerEndsSpansBesideMetrics(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(t.Context())) }()
	tr := NewTracing(tp)
	m, err := NewMetrics("test", "v0", true)
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Shutdown(t.Context())) }()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(ServerHandler(tr, m)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), append(tr.GRPCClient(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()

	_, err = healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	srv.GracefulStop()
	var server, client sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindServer:
			server = s
		case trace.SpanKindClient:
			client = s
		}
	}
	require.NotNil(t, server, "the server's span ended")
	require.NotNil(t, client)
	require.Equal(t, client.SpanContext().SpanID(), server.Parent().SpanID())

	rr := httptest.NewRecorder()
	m.Handler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Contains(t, rr.Body.String(), `rpc_server_call_duration_seconds_count{`, "and the call measured")
}

// Off, neither spans nor metrics: no handler at all.
func TestServerHandlerOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	require.False(t, Exporting())
	off, err := NewMetrics("test", "v0", false)
	require.NoError(t, err)
	require.Nil(t, ServerHandler(nil, off))
	require.Nil(t, (*Tracing)(nil).Tracer("x"), "no tracer: callers start no span")
	require.NotNil(t, NewTracing(sdktrace.NewTracerProvider()).Tracer("x"))
}

func TestTraceparent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc, ok := ParseTraceparent(tp)
	require.True(t, ok)
	require.True(t, sc.IsRemote())
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	require.Equal(t, tp, Traceparent(sc))
	require.Empty(t, Traceparent(trace.SpanContext{}))
	for _, bad := range []string{"", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "junk", tp + "-x"} {
		_, ok := ParseTraceparent(bad)
		require.False(t, ok, bad)
	}
}
