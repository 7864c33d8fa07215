package report

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// ScopeName is the instrumentation scope of the hub's spans.
const ScopeName = "github.com/switchboard-ai/switchboard/services/decider/report"

// startSpans starts a span for each report of a batch that carries its
// call's trace context: the handling of the report (statistics, outcomes,
// cool-downs), a child of the call's span on the edge. Nil when the hub
// makes no spans or no report carries a trace.
func (h *Hub) startSpans(ctx context.Context, edge *switchboardv1.EdgeHello, reports []*switchboardv1.CallReport) []trace.Span {
	if h.tracer == nil {
		return nil
	}
	var spans []trace.Span
	for _, r := range reports {
		sc, ok := telemetry.ParseTraceparent(r.GetTraceparent()) //nolint:contextcheck // parses a header value, makes no call
		if !ok {
			continue
		}
		_, span := h.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sc), "switchboard.report call",
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				attribute.String("switchboard.edge.id", edge.GetEdgeId()),
				attribute.String("switchboard.endpoint.id", r.GetEndpointId()),
				attribute.String("switchboard.attempt.outcome", switchboardv1.EnumName(r.GetOutcome())),
				attribute.String("switchboard.request.id", r.GetRequestId()),
			))
		spans = append(spans, span)
	}
	return spans
}

func endSpans(spans []trace.Span) {
	for _, s := range spans {
		s.End()
	}
}

// measureLag records, for each report that says when it was made, how long
// it took to reach the hub. A clock behind the edge's counts as no lag.
func (h *Hub) measureLag(reports []*switchboardv1.CallReport) {
	if h.lag == nil {
		return
	}
	now := time.Now()
	for _, r := range reports {
		if t := r.GetReportTime(); t != nil {
			h.lag(max(now.Sub(t.AsTime()), 0))
		}
	}
}
