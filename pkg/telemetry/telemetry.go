// Package telemetry sets up OpenTelemetry tracing for a Switchboard process.
package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
)

// exporting is set by Setup when spans are exported: only then do the
// servers and clients wrap their calls in spans (HTTPHandler, GRPCServer,
// GRPCClient).
var exporting atomic.Bool

// Exporting reports whether Setup installed an exporter.
func Exporting() bool { return exporting.Load() }

// Setup installs a global tracer provider and W3C trace-context propagation.
// Spans are exported over OTLP/gRPC only when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, so a laptop run needs no
// collector. Without an exporter no span is sampled (recording spans only to
// drop them would cost every request its attributes and events), and the
// servers make none at all: a caller's trace context is still passed on to
// the next hop (HTTPHandler, GRPCClient).
// The returned function flushes and stops the provider.
func Setup(ctx context.Context, service, version string) (func(context.Context) error, error) {
	// Schemaless, so the merge never fails on a semconv version mismatch
	// between this package and the SDK's defaults.
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", service),
		attribute.String("service.version", version),
	))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
		exporting.Store(true)
	} else {
		opts = append(opts, sdktrace.WithSampler(sdktrace.NeverSample()))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return func(ctx context.Context) error {
		exporting.Store(false)
		return tp.Shutdown(ctx)
	}, nil
}

// HTTPHandler instruments an HTTP server's handler with the process's
// global tracing (see [Tracing.HTTPHandler]).
func HTTPHandler(h http.Handler, operation string) http.Handler {
	return (*Tracing)(nil).HTTPHandler(h, operation)
}

// GRPCServer instruments a gRPC server with the process's global tracing
// (see [Tracing.GRPCServer]).
func GRPCServer() []grpc.ServerOption { return (*Tracing)(nil).GRPCServer() }

// GRPCClient instruments a gRPC client with the process's global tracing
// (see [Tracing.GRPCClient]).
func GRPCClient() []grpc.DialOption { return (*Tracing)(nil).GRPCClient() }
