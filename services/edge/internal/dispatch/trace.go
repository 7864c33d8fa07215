package dispatch

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// ScopeName is the instrumentation scope of the provider calls' spans.
const ScopeName = "github.com/switchboard-ai/switchboard/services/edge/dispatch"

// Span attributes of a provider call: the OpenTelemetry GenAI client
// span's (gen_ai.*), the general ones it takes (server.*, error.type,
// http.response.status_code), and Switchboard's own.
const (
	spanOperation     = "gen_ai.operation.name"
	spanProvider      = "gen_ai.provider.name"
	spanRequestModel  = "gen_ai.request.model"
	spanResponseModel = "gen_ai.response.model"
	spanInputTokens   = "gen_ai.usage.input_tokens"  //nolint:gosec // G101: an attribute name, not a credential.
	spanOutputTokens  = "gen_ai.usage.output_tokens" //nolint:gosec // G101: an attribute name, not a credential.
	spanServerAddress = "server.address"
	spanServerPort    = "server.port"
	spanErrorType     = "error.type"
	spanHTTPStatus    = "http.response.status_code"

	spanRequestID = "switchboard.request.id"
	spanModel     = "switchboard.model"
	spanEndpoint  = "switchboard.endpoint.id"
	spanBucket    = "switchboard.prompt.size_bucket"
	spanHedge     = "switchboard.attempt.hedge"
	spanProbe     = "switchboard.probe.id"
	spanOutcome   = "switchboard.attempt.outcome"
	spanTTFT      = "switchboard.attempt.time_to_first_token"
	spanCost      = "switchboard.attempt.cost_usd"

	// eventFirstToken marks the first token's arrival on a call's span.
	eventFirstToken = "first_token"
	// outcomeHedgeLost is the outcome of a hedge leg cancelled because the
	// other leg produced the first token.
	outcomeHedgeLost = "hedge_lost"
)

// startSpan starts the span of one call to ep, a child of ctx's span (the
// request's), named as the GenAI conventions name an inference span
// ("chat {model}", the model asked of the provider). The leg's HTTP request
// is made under the returned context. Nil span when the edge makes no
// spans.
func (d *Dispatcher) startSpan(ctx context.Context, call Call, ep *switchboardv1.Endpoint, hedge bool) (context.Context, trace.Span) {
	if d.opts.Tracer == nil {
		return ctx, nil
	}
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs,
		attribute.String(spanOperation, "chat"),
		attribute.String(spanProvider, ep.GetProvider()),
		attribute.String(spanRequestModel, ep.GetUpstreamModel()),
		attribute.String(spanModel, call.Model),
		attribute.String(spanEndpoint, ep.GetId()),
		attribute.String(spanBucket, tokens.BucketOf(call.PromptTokens).String()),
		attribute.Bool(spanHedge, hedge),
	)
	if call.RequestID != "" {
		attrs = append(attrs, attribute.String(spanRequestID, call.RequestID))
	}
	if call.ProbeID != "" {
		attrs = append(attrs, attribute.String(spanProbe, call.ProbeID))
	}
	if u, err := url.Parse(ep.GetBaseUrl()); err == nil && u.Hostname() != "" {
		attrs = append(attrs, attribute.String(spanServerAddress, u.Hostname()))
		port, err := strconv.Atoi(u.Port())
		switch {
		case err == nil:
		case u.Scheme == "https":
			port = 443
		default:
			port = 80
		}
		attrs = append(attrs, attribute.Int(spanServerPort, port))
	}
	return d.opts.Tracer.Start(ctx, "chat "+ep.GetUpstreamModel(),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endSpan ends a leg's span with how its call went: outcome, status, first
// token, the provider's usage and its cost (u, as reported). It runs once,
// when the leg is reported; the span ends when the call did.
func endSpan(l *leg, u *switchboardv1.Usage) {
	span := l.span
	if span == nil {
		return
	}
	res := &l.Result
	outcome := switchboardv1.EnumName(res.Outcome)
	if res.Outcome == switchboardv1.Outcome_OUTCOME_CANCELLED && l.Lost() {
		outcome = outcomeHedgeLost
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, attribute.String(spanOutcome, outcome))
	if res.Status > 0 {
		attrs = append(attrs, attribute.Int(spanHTTPStatus, res.Status))
	}
	if res.HasTTFT {
		attrs = append(attrs, attribute.Float64(spanTTFT, res.TTFT.Seconds()))
		span.AddEvent(eventFirstToken, trace.WithTimestamp(res.Start.Add(res.TTFT)))
	}
	if u != nil {
		attrs = append(attrs,
			attribute.Int64(spanInputTokens, u.GetInputTokens()),
			attribute.Int64(spanOutputTokens, u.GetOutputTokens()),
			attribute.Float64(spanCost, u.GetCostUsd()))
	}
	switch res.Outcome {
	case switchboardv1.Outcome_OUTCOME_OK:
		attrs = append(attrs, attribute.String(spanResponseModel, l.Endpoint.GetUpstreamModel()))
	case switchboardv1.Outcome_OUTCOME_CANCELLED:
		// Not an error: the other leg won, or the client left.
	default:
		errType := outcome
		if res.Status >= 400 {
			errType = strconv.Itoa(res.Status)
		}
		attrs = append(attrs, attribute.String(spanErrorType, errType))
		span.SetStatus(codes.Error, res.Summary)
	}
	span.SetAttributes(attrs...)
	end := time.Now()
	if !res.Start.IsZero() && res.Duration > 0 {
		end = res.Start.Add(res.Duration)
	}
	span.End(trace.WithTimestamp(end))
}

// traceparent is the leg's span as the call report carries it, "" without
// one.
func (l *leg) traceparent() string {
	if l.span == nil {
		return ""
	}
	return telemetry.Traceparent(l.span.SpanContext())
}
