package telemetry

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
	"google.golang.org/grpc"
)

// Metrics is a process's OpenTelemetry meter provider and, when metrics are
// on, the handler that serves them in Prometheus's text format. Metrics are
// on only where a service has a listener to serve them from (its opt-in
// debug listener): off, the provider is OpenTelemetry's no-op one, the
// handler is nil, and callers skip building attributes altogether
// ([Metrics.Enabled]), so the request path pays nothing for them.
//
// Each Metrics has its own Prometheus registry rather than the global
// default one, so two services in one process (the tests start several
// deciders) never mix their series.
type Metrics struct {
	provider metric.MeterProvider
	handler  http.Handler
	shutdown func(context.Context) error
}

// CardinalityLimit is the most series one instrument keeps.
const CardinalityLimit = 10_000

// NewMetrics returns the meter provider of service (version): exported for
// Prometheus when on, the no-op provider when not.
func NewMetrics(service, version string, on bool) (*Metrics, error) {
	if !on {
		return &Metrics{provider: noop.NewMeterProvider()}, nil
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", service),
		attribute.String("service.version", version),
	))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	reg := prometheus.NewRegistry()
	// The Go runtime's metrics (go_*: goroutines, heap, GC pauses,
	// scheduler latency) and the process's (process_*: CPU seconds,
	// resident memory, open file descriptors), beside the service's own.
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("process collector: %w", err)
	}
	// Names follow the Prometheus conventions (unit and _total suffixes);
	// the instrumentation scope is left out of the labels: every series of
	// a Switchboard process comes from its own code.
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res),
		// The text format served has no exemplars: sampling them would
		// cost every measurement a look at its context for nothing.
		sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter),
		// A backstop for labels that should be bounded: past this many
		// series an instrument folds new ones into one series labelled
		// otel_metric_overflow="true" rather than growing without end.
		sdkmetric.WithCardinalityLimit(CardinalityLimit))
	return &Metrics{
		provider: mp,
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}),
		shutdown: mp.Shutdown,
	}, nil
}

// Enabled reports whether metrics are recorded and served.
func (m *Metrics) Enabled() bool { return m != nil && m.handler != nil }

// MeterProvider is the provider instruments are created from.
func (m *Metrics) MeterProvider() metric.MeterProvider {
	if m == nil {
		return noop.NewMeterProvider()
	}
	return m.provider
}

// Handler serves the metrics in Prometheus's exposition format; nil when
// metrics are off.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return nil
	}
	return m.handler
}

// GRPCServer measures a gRPC server's calls when metrics are on: the
// OpenTelemetry RPC conventions' rpc.server.call.duration (seconds, by
// method and status code), served as rpc_server_call_duration_seconds.
// It makes no spans: a server that also traces takes [ServerHandler], one
// handler for both. Nil when metrics are off.
func (m *Metrics) GRPCServer() []grpc.ServerOption { return serverHandler(nil, false, m) }

// Shutdown stops the provider: later recordings are dropped. It is safe on a
// nil or disabled Metrics.
func (m *Metrics) Shutdown(ctx context.Context) error {
	if m == nil || m.shutdown == nil {
		return nil
	}
	return m.shutdown(ctx)
}
