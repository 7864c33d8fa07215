package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
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

	// A second provider has its own registry: nothing of the first.
	other, err := NewMetrics("switchboard-other", "v0", true)
	require.NoError(t, err)
	rec = httptest.NewRecorder()
	other.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.NotContains(t, rec.Body.String(), "switchboard_things")

	require.NoError(t, on.Shutdown(t.Context()))
	require.NoError(t, other.Shutdown(t.Context()))
}
