// Package telemetry sets up OpenTelemetry tracing for a Switchboard process.
package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
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

// HTTPHandler instruments an HTTP server's handler. With an exporter, every
// request gets a span (otelhttp). Without one, a span nobody records would
// still cost each request its wrapping, attributes and ids, so the handler
// only takes in the caller's trace context, when there is one, for the calls
// the request makes on.
func HTTPHandler(h http.Handler, operation string) http.Handler {
	if Exporting() {
		return otelhttp.NewHandler(h, operation)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") != "" || r.Header.Get("baggage") != "" {
			r = r.WithContext(otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		h.ServeHTTP(w, r)
	})
}

// GRPCServer instruments a gRPC server: a span per call with an exporter,
// nothing without (see HTTPHandler).
func GRPCServer() []grpc.ServerOption {
	if Exporting() {
		return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler())}
	}
	return nil
}

// GRPCClient instruments a gRPC client: a span per call with an exporter;
// without one, calls carry the trace context of their context, when it has
// one, and nothing else.
func GRPCClient() []grpc.DialOption {
	if Exporting() {
		return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler())}
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(withTraceContext(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(withTraceContext(ctx), desc, cc, method, opts...)
		}),
	}
}

// withTraceContext adds ctx's trace context to its outgoing metadata, when it
// has one.
func withTraceContext(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	kv := make([]string, 0, 2*len(carrier))
	for k, v := range carrier {
		kv = append(kv, k, v)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}
