package telemetry

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
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
