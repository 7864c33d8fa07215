package httpapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/dispatch"
)

// countingProcessor counts the spans started.
type countingProcessor struct {
	sdktrace.SpanProcessor
	started atomic.Int64
}

func (p *countingProcessor) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	p.started.Add(1)
	p.SpanProcessor.OnStart(ctx, s)
}

// BenchmarkChatCompletionTracing is BenchmarkChatCompletion's request as the
// edge serves it with tracing off — no exporter: the handler only takes in
// a traceparent, no span is made — and on, every request a server span and
// its provider call a client span with its attributes, exported in
// batches (to an exporter that drops them). "none" is the handler bare, the
// baseline "off" must match. spans/op counts the spans started.
func BenchmarkChatCompletionTracing(b *testing.B) {
	provider := httptest.NewServer(streamingProvider())
	defer provider.Close()
	ep := &switchboardv1.Endpoint{Id: "alpha/m", Provider: "alpha", BaseUrl: provider.URL + "/v1", UpstreamModel: "up-m",
		Price: &switchboardv1.Price{Input: 1, Output: 2}}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	body := []byte(`{"model":"org/model","stream":true,"temperature":0.2,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello."}]}`)

	for _, mode := range []string{"none", "off", "on"} {
		b.Run(mode, func(b *testing.B) {
			var tr *telemetry.Tracing // nil: the global tracing, exporting nothing
			counter := &countingProcessor{SpanProcessor: sdktrace.NewBatchSpanProcessor(tracetest.NewNoopExporter())}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(counter))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			switch mode {
			case "on":
				tr = telemetry.NewTracing(tp)
			case "off":
				// The counting provider as the global one, as Setup installs
				// a provider without an exporter: a span started anywhere on
				// the path would be counted.
				prev := otel.GetTracerProvider()
				otel.SetTracerProvider(tp)
				defer otel.SetTracerProvider(prev)
			}
			if tr.Exporting() != (mode == "on") {
				b.Fatal("the global tracing exports: this benchmark measures it off")
			}
			s := New(Options{
				Decider:    benchDecider{endpoint: ep},
				Dispatcher: dispatch.New(dispatch.Options{Client: provider.Client(), Logger: log, Tracer: tr.Tracer(dispatch.ScopeName)}),
				Logger:     log,
			})
			h := s.Handler()
			if mode != "none" {
				h = tr.HTTPHandler(h, "edge")
			}
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
				r.Header.Set("Authorization", "Bearer sk-bench")
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
				w := deadlineRecorder{httptest.NewRecorder()}
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK || !bytes.HasSuffix(w.Body.Bytes(), []byte("data: [DONE]\n\n")) {
					b.Fatalf("status %d: %s", w.Code, w.Body.String())
				}
			}
			b.ReportMetric(float64(counter.started.Load())/float64(b.N), "spans/op")
		})
	}
}
