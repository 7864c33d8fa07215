package telemetry

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
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
