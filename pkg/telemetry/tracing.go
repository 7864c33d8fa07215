package telemetry

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Tracing is where a service's spans go and how trace context crosses its
// hops. A nil *Tracing is the process's global one, which [Setup] installs:
// spans only while an exporter is set. [NewTracing] gives a service a
// provider of its own — a test's in-memory recorder — so that services
// started side by side in one process (the end-to-end tests) each record
// into the provider they were given, and nothing is left in globals for the
// next test.
type Tracing struct {
	provider   trace.TracerProvider
	propagator propagation.TextMapPropagator
}

// NewTracing returns tracing into tp, with W3C trace context and baggage
// propagation. Its spans are always made: tp decides what is sampled.
func NewTracing(tp trace.TracerProvider) *Tracing {
	return &Tracing{provider: tp, propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
}

// Exporting reports whether spans are made: always for [NewTracing]'s,
// for the global one while Setup's exporter is installed.
func (t *Tracing) Exporting() bool { return t != nil || Exporting() }

func (t *Tracing) tracerProvider() trace.TracerProvider {
	if t == nil {
		return otel.GetTracerProvider()
	}
	return t.provider
}

func (t *Tracing) textPropagator() propagation.TextMapPropagator {
	if t == nil {
		return otel.GetTextMapPropagator()
	}
	return t.propagator
}

// Tracer is the tracer of the named instrumentation scope while spans are
// made, nil while they are not: a caller holding nil starts no span at all,
// so its hot path builds no attributes and allocates nothing for tracing.
func (t *Tracing) Tracer(scope string) trace.Tracer {
	if !t.Exporting() {
		return nil
	}
	return t.tracerProvider().Tracer(scope)
}

// HTTPHandler instruments an HTTP server's handler. While spans are made,
// every request gets a server span (otelhttp), a child of the caller's
// traceparent when it sent one. Otherwise a span nobody records would
// still cost each request its wrapping, attributes and ids, so the handler
// only takes in the caller's trace context, when there is one, for the
// calls the request makes on.
func (t *Tracing) HTTPHandler(h http.Handler, operation string) http.Handler {
	if t.Exporting() {
		return otelhttp.NewHandler(h, operation,
			otelhttp.WithTracerProvider(t.tracerProvider()), otelhttp.WithPropagators(t.textPropagator()))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") != "" || r.Header.Get("baggage") != "" {
			r = r.WithContext(otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		h.ServeHTTP(w, r)
	})
}

// GRPCServer instruments a gRPC server: a span per call while spans are
// made, nothing otherwise (see HTTPHandler).
func (t *Tracing) GRPCServer() []grpc.ServerOption { return ServerHandler(t, nil) }

// ServerHandler instruments a gRPC server with one stats handler for both
// t's spans (while it makes them) and m's call metrics (when on); nil when
// neither is on. One handler, not one of each: a second otelgrpc handler
// would put its own span in the call's context over the first's, which
// then never ends.
func ServerHandler(t *Tracing, m *Metrics) []grpc.ServerOption {
	return serverHandler(t, t.Exporting(), m)
}

// serverHandler is ServerHandler, with t's spans only when spans is set.
func serverHandler(t *Tracing, spans bool, m *Metrics) []grpc.ServerOption {
	if !spans && !m.Enabled() {
		return nil
	}
	opts := []otelgrpc.Option{otelgrpc.WithTracerProvider(tracenoop.NewTracerProvider()), otelgrpc.WithMeterProvider(noop.NewMeterProvider())}
	if spans {
		opts = append(opts, otelgrpc.WithTracerProvider(t.tracerProvider()), otelgrpc.WithPropagators(t.textPropagator()))
	}
	if m.Enabled() {
		opts = append(opts, otelgrpc.WithMeterProvider(m.provider))
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(opts...))}
}

// GRPCClient instruments a gRPC client: a span per call while spans are
// made; otherwise calls carry the trace context of their context, when it
// has one, and nothing else.
func (t *Tracing) GRPCClient() []grpc.DialOption {
	if t.Exporting() {
		return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(t.tracerProvider()), otelgrpc.WithPropagators(t.textPropagator())))}
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

// Traceparent is sc as a W3C traceparent header value, "" when sc is not
// valid: how a span's context travels in a message (a call report) rather
// than in a call's metadata.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return carrier.Get("traceparent")
}

// ParseTraceparent is the span context a W3C traceparent value names,
// remote; false when s is not a valid one.
func ParseTraceparent(s string) (trace.SpanContext, bool) {
	if s == "" {
		return trace.SpanContext{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
	sc := trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid()
}
