package telemetry

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

func TestSetupWithoutCollector(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	shutdown, err := Setup(t.Context(), "switchboard-test", "v0")
	require.NoError(t, err)
	_, span := otel.Tracer("t").Start(t.Context(), "op")
	require.True(t, span.SpanContext().IsValid(), "the SDK provider is installed and creates real spans")
	span.End()
	require.NoError(t, shutdown(t.Context()))
}

// Without an exporter nothing is recorded, but a caller's trace context
// still flows through: a span started under an incoming traceparent keeps
// its trace id, and is passed on to the next hop.
func TestWithoutExporterTraceContextFlowsAndNothingIsRecorded(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	shutdown, err := Setup(t.Context(), "test", "v0")
	require.NoError(t, err)
	defer func() { require.NoError(t, shutdown(context.Background())) }()

	in := http.Header{}
	in.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx := otel.GetTextMapPropagator().Extract(t.Context(), propagation.HeaderCarrier(in))
	ctx, span := otel.Tracer("test").Start(ctx, "op")
	defer span.End()
	require.False(t, span.IsRecording(), "no exporter: spans are not recorded")
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", trace.SpanContextFromContext(ctx).TraceID().String())
	_, root := otel.Tracer("test").Start(t.Context(), "root")
	defer root.End()
	require.False(t, root.IsRecording())
	require.True(t, root.SpanContext().IsValid(), "a request with no trace context still gets ids")

	out := http.Header{}
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(out))
	require.Contains(t, out.Get("traceparent"), "4bf92f3577b34da6a3ce929d0e0e4736")
}

// Off, metrics cost nothing: the no-op provider, no handler. On, a counter
// recorded on the provider is served with Prometheus's names (unit and
// _total suffixes) and the service named in target_info.
func TestMetrics(t *testing.T) {
	off, err := NewMetrics("switchboard-test", "v0", false)
	require.NoError(t, err)
	require.False(t, off.Enabled())
	require.Nil(t, off.Handler())
	_, isNoop := off.MeterProvider().(noop.MeterProvider)
	require.True(t, isNoop)
	require.NoError(t, off.Shutdown(t.Context()))

	on, err := NewMetrics("switchboard-test", "v0", true)
	require.NoError(t, err)
	require.True(t, on.Enabled())
	c, err := on.MeterProvider().Meter("t").Int64Counter("switchboard_things", metric.WithUnit("{thing}"))
	require.NoError(t, err)
	c.Add(t.Context(), 3, metric.WithAttributes(attribute.String("kind", "a")))
	h, err := on.MeterProvider().Meter("t").Float64Histogram("switchboard_wait", metric.WithUnit("s"))
	require.NoError(t, err)
	h.Record(t.Context(), 0.5)

	rec := httptest.NewRecorder()
	on.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	body := rec.Body.String()
	require.Contains(t, body, `switchboard_things_total{kind="a"} 3`)
	require.Contains(t, body, `switchboard_wait_seconds_count 1`)
	require.Contains(t, body, `service_name="switchboard-test"`)
	require.NotContains(t, body, "otel_scope_name", "no scope labels")
	for _, runtime := range []string{"go_goroutines ", "go_gc_duration_seconds", "process_cpu_seconds_total"} {
		require.Contains(t, body, runtime, "the Go runtime's and the process's metrics")
	}

	// A second provider has its own registry: nothing of the first.
	other, err := NewMetrics("switchboard-other", "v0", true)
	require.NoError(t, err)
	rec = httptest.NewRecorder()
	other.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.NotContains(t, rec.Body.String(), "switchboard_things")

	require.NoError(t, on.Shutdown(t.Context()))
	require.NoError(t, other.Shutdown(t.Context()))
}

// Without an exporter the servers make no spans, but a caller's trace
// context still reaches the handler and goes on with its gRPC calls; a
// request without one gets none invented.
func TestWithoutExporterOnlyTraceContextIsPassedOn(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	shutdown, err := Setup(t.Context(), "test", "v0")
	require.NoError(t, err)
	defer func() { require.NoError(t, shutdown(context.Background())) }()
	require.False(t, Exporting())

	// A gRPC server on loopback that records the trace context each call
	// brings.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	got := make(chan []string, 1)
	srv := grpc.NewServer(append(GRPCServer(), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			got <- metadata.ValueFromIncomingContext(ctx, "traceparent")
			return h(ctx, req)
		}))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), append(GRPCClient(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()

	call := func(r *http.Request) []string {
		h := HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			require.False(t, trace.SpanFromContext(r.Context()).IsRecording())
			_, err := healthpb.NewHealthClient(conn).Check(r.Context(), &healthpb.HealthCheckRequest{})
			require.NoError(t, err)
		}), "test")
		h.ServeHTTP(httptest.NewRecorder(), r)
		return <-got
	}
	in := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	in.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	require.Equal(t, []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, call(in))
	require.Empty(t, call(httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)),
		"no trace context in, none out")
}

// With an exporter every request is a recorded span, and its context goes
// on with the gRPC calls made under it.
func TestWithExporterRequestsAreSpans(t *testing.T) {
	// The exporter connects lazily: nothing listens here and nothing needs to.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	shutdown, err := Setup(t.Context(), "test", "v0")
	require.NoError(t, err)
	require.True(t, Exporting())
	var recording bool
	h := HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		recording = trace.SpanFromContext(r.Context()).IsRecording()
	}), "test")
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	require.True(t, recording)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = shutdown(ctx) // the exporter cannot reach its collector: not this test's concern
	require.False(t, Exporting(), "stopped: back to passing trace context on only")
}
