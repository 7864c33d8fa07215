package app

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/dispatch"
)

// headerFallbackModel names the model that answered a request in place of
// the one asked for, when the decider's refusal degraded the request to its
// class's fallback model.
const headerFallbackModel = "x-switchboard-fallback-model"

// Attribute keys of the OpenTelemetry GenAI semantic conventions.
const (
	attrOperation     = "gen_ai.operation.name"
	attrProvider      = "gen_ai.provider.name"
	attrRequestModel  = "gen_ai.request.model"
	attrResponseModel = "gen_ai.response.model"
	attrTokenType     = "gen_ai.token.type" //nolint:gosec // G101: an attribute name, not a credential.
	attrErrorType     = "error.type"
)

// The buckets the GenAI conventions advise for their histograms.
var (
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	attemptBuckets  = []float64{1, 2, 3, 4, 5, 8}
)

// edgeMetrics are the metrics of the edge's API requests, recorded once
// each request has ended, from its activity record (dispatch.WithObserver)
// and its HTTP status: the GenAI conventions' client metrics (the edge is
// the client of the providers), and switchboard_edge_* for what they do not
// cover. The decider counts every admission decision, including refusals
// that name a fallback model (switchboard_fallback_refusals_total); whether
// the edge then served the request with that model is known here only.
type edgeMetrics struct {
	fallbacks  metric.Int64Counter
	inFlight   metric.Int64UpDownCounter
	requests   metric.Int64Counter
	tokens     metric.Int64Histogram
	cacheToks  metric.Int64Counter
	duration   metric.Float64Histogram
	firstChunk metric.Float64Histogram
	attempts   metric.Int64Histogram
	hedges     metric.Int64Counter
	upstream   metric.Int64Counter
	cost       metric.Float64Counter
	// more are the metrics of attempts and of the Report stream
	// (metrics_attempts.go).
	more attemptMetrics
}

func newEdgeMetrics(m *telemetry.Metrics, reports reportBacklog) (*edgeMetrics, error) {
	mt := m.MeterProvider().Meter("github.com/switchboard-ai/switchboard/services/edge")
	var em edgeMetrics
	var errs [11]error
	em.fallbacks, errs[0] = mt.Int64Counter("switchboard_edge_fallback_served", metric.WithUnit("{request}"),
		metric.WithDescription("Requests the edge answered with a fallback model instead of the model asked for, by fallback model."))
	em.inFlight, errs[1] = mt.Int64UpDownCounter("switchboard_edge_requests_in_flight", metric.WithUnit("{request}"),
		metric.WithDescription("Chat, Messages and Responses requests the edge is serving now, open streams included."))
	em.requests, errs[2] = mt.Int64Counter("switchboard_edge_requests", metric.WithUnit("{request}"),
		metric.WithDescription("Chat, Messages and Responses requests answered, by client API, HTTP status class and why the decider chose the endpoint."))
	em.tokens, errs[3] = mt.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Input and output tokens of each served request, as billed."),
		metric.WithExplicitBucketBoundaries(tokenBuckets...))
	em.cacheToks, errs[4] = mt.Int64Counter("switchboard_edge_cache_tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Input tokens read from or written to the provider's prompt cache (a part of gen_ai.client.token.usage's input)."))
	em.duration, errs[5] = mt.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("How long each request took, from its arrival to its last byte."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	em.firstChunk, errs[6] = mt.Float64Histogram("gen_ai.client.operation.time_to_first_chunk", metric.WithUnit("s"),
		metric.WithDescription("Time from a streamed request's arrival to the first chunk sent to the client."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	em.attempts, errs[7] = mt.Int64Histogram("switchboard_edge_request_attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Endpoints tried per dispatched request, hedges not counted: 1 is no retry."),
		metric.WithExplicitBucketBoundaries(attemptBuckets...))
	em.hedges, errs[8] = mt.Int64Counter("switchboard_edge_hedges", metric.WithUnit("{hedge}"),
		metric.WithDescription("Hedged requests: hedges started, won by the hedge, and losing legs cancelled."))
	em.upstream, errs[9] = mt.Int64Counter("switchboard_edge_upstream_errors", metric.WithUnit("{response}"),
		metric.WithDescription("Provider answers 429 and 5xx, by endpoint."))
	em.cost, errs[10] = mt.Float64Counter("switchboard_edge_cost_usd",
		metric.WithDescription("USD the requests served cost, by model, tenant and payer: billed to the tenant, or paid by the operator (failed and cancelled attempts, hedge losers)."))
	for _, err := range append(errs[:], em.more.init(mt, reports)) {
		if err != nil {
			return nil, fmt.Errorf("edge metrics: %w", err)
		}
	}
	return &em, nil
}

// handler records each request once next has answered. Every request is
// checked for a fallback model (headerFallbackModel), wherever in the edge
// that is decided, from the response's header map after next returns. The
// generation APIs (Chat Completions, Messages, Responses) are also counted
// in flight while they run, and on their end by status and from their
// activity record; their ResponseWriter is wrapped to learn the status,
// keeping Flush and Unwrap so streams and http.ResponseController work.
func (m *edgeMetrics) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if api := clientAPILabel(r.URL.Path); api != "" && r.Method == http.MethodPost {
			m.serveAPI(w, r, next, api)
		} else {
			next.ServeHTTP(w, r)
		}
		if fb := w.Header().Get(headerFallbackModel); fb != "" {
			m.fallbacks.Add(r.Context(), 1, metric.WithAttributes(attribute.String("model", modelLabel(fb))))
		}
	})
}

func (m *edgeMetrics) serveAPI(w http.ResponseWriter, r *http.Request, next http.Handler, api string) {
	// The measurements outlive a client that went away.
	ctx := context.WithoutCancel(r.Context())
	m.inFlight.Add(ctx, 1)
	defer m.inFlight.Add(ctx, -1)
	var done *dispatch.Finished
	sw := &statusWriter{ResponseWriter: w}
	inner := r.WithContext(dispatch.WithObserver(r.Context(), func(f dispatch.Finished) { done = &f }))
	next.ServeHTTP(sw, inner)
	// The route the mux matched, for the request's span around this
	// handler (otelhttp names it by the request's pattern).
	r.Pattern = inner.Pattern

	status, reason := sw.status, "none"
	if status == 0 {
		status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	if done != nil {
		status, reason = int(done.Record.GetHttpStatus()), routeReasonLabel(done.RouteReason)
		m.record(ctx, done.Record)
		m.more.record(ctx, done.Record, done.PromptTokens)
	}
	m.requests.Add(ctx, 1, metric.WithAttributes(attribute.String("api", api),
		attribute.String("status_class", strconv.Itoa(status/100)+"xx"), attribute.String("route_reason", reason)))
}

// record measures one dispatched request from its activity record.
func (m *edgeMetrics) record(ctx context.Context, r *switchboardv1.ActivityRecord) {
	model := modelLabel(r.GetModel())
	provider := r.GetProvider()
	if provider == "" {
		// No endpoint answered: the provider of the last one tried.
		if n := len(r.GetAttempts()); n > 0 {
			provider = r.GetAttempts()[n-1].GetProvider()
		}
	}
	provider = modelLabel(provider)
	if provider == "" {
		provider = "none"
	}
	attrs := []attribute.KeyValue{
		attribute.String(attrOperation, "chat"),
		attribute.String(attrProvider, provider),
		attribute.String(attrRequestModel, model),
	}
	if r.GetStatus() == switchboardv1.CallStatus_CALL_STATUS_OK {
		attrs = append(attrs, attribute.String(attrResponseModel, model))
	} else {
		attrs = append(attrs, attribute.String(attrErrorType, errorType(r)))
	}
	set := attribute.NewSet(attrs...)
	m.duration.Record(ctx, r.GetDuration().AsDuration().Seconds(), metric.WithAttributeSet(set))
	if r.GetStream() && r.GetTtft() != nil {
		m.firstChunk.Record(ctx, r.GetTtft().AsDuration().Seconds(), metric.WithAttributeSet(set))
	}
	if u := r.GetUsage(); r.GetEndpointId() != "" && u != nil {
		m.tokens.Record(ctx, u.GetInputTokens(), metric.WithAttributes(append(attrs, attribute.String(attrTokenType, "input"))...))
		m.tokens.Record(ctx, u.GetOutputTokens(), metric.WithAttributes(append(attrs, attribute.String(attrTokenType, "output"))...))
		cacheAttrs := []attribute.KeyValue{attribute.String(attrProvider, provider), attribute.String(attrRequestModel, model)}
		if n := u.GetCachedInputTokens(); n > 0 {
			m.cacheToks.Add(ctx, n, metric.WithAttributes(append(cacheAttrs, attribute.String("type", "cache_read"))...))
		}
		if n := u.GetCacheWriteTokens() + u.GetCacheWrite_1HTokens(); n > 0 {
			m.cacheToks.Add(ctx, n, metric.WithAttributes(append(cacheAttrs, attribute.String("type", "cache_write"))...))
		}
	}
	if c := r.GetCostUsd(); c > 0 {
		m.cost.Add(ctx, c, metric.WithAttributes(attribute.String("model", model), attribute.String("tenant", modelLabel(r.GetTenantId())),
			attribute.String("payer", payerTenant)))
	}
	m.more.operatorCost(ctx, m.cost, r, model)

	var tried int64
	for _, a := range r.GetAttempts() {
		if !a.GetHedge() {
			tried++
		}
		if s := a.GetHttpStatus(); s == http.StatusTooManyRequests || s >= 500 {
			class := "429"
			if s >= 500 {
				class = "5xx"
			}
			m.upstream.Add(ctx, 1, metric.WithAttributes(attribute.String("endpoint", modelLabel(a.GetEndpointId())), attribute.String("status", class)))
		}
	}
	if tried > 0 {
		m.attempts.Record(ctx, tried)
	}
	if h := r.GetHedge(); h.GetUsed() {
		m.hedges.Add(ctx, 1, metric.WithAttributes(attribute.String("event", "started")))
		for _, a := range r.GetAttempts() {
			if a.GetHedge() && a.GetOutcome() == switchboardv1.Outcome_OUTCOME_OK && a.GetEndpointId() == h.GetWinnerEndpointId() {
				m.hedges.Add(ctx, 1, metric.WithAttributes(attribute.String("event", "won")))
				break
			}
		}
		if h.GetLoserEndpointId() != "" {
			m.hedges.Add(ctx, 1, metric.WithAttributes(attribute.String("event", "cancelled")))
		}
	}
}

// errorType is a failed request's error.type: the HTTP status it was
// answered with, or how it ended when it got one it did not choose.
func errorType(r *switchboardv1.ActivityRecord) string {
	switch r.GetStatus() {
	case switchboardv1.CallStatus_CALL_STATUS_CLIENT_CANCELLED:
		return "client_cancelled"
	case switchboardv1.CallStatus_CALL_STATUS_INTERRUPTED:
		return "interrupted"
	}
	if s := r.GetHttpStatus(); s >= 100 && s < 600 {
		return strconv.Itoa(int(s))
	}
	return "_OTHER"
}

// clientAPILabel is the generation API a path serves, "" for the others.
func clientAPILabel(path string) string {
	switch path {
	case "/v1/chat/completions":
		return "chat"
	case "/v1/messages":
		return "messages"
	case "/v1/responses":
		return "responses"
	}
	return ""
}

// routeReasonLabel is the decider's route reason by its one name
// (switchboardv1.EnumName: cheapest_qualifying, exploration, ...), "other"
// for a number this edge does not know.
func routeReasonLabel(r switchboardv1.RouteReason) string {
	if n := switchboardv1.EnumName(r); n != "" {
		return n
	}
	return "other"
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements [http.Flusher].
func (w *statusWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap is the writer underneath, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// modelLabel bounds a catalog id used as a label (model, endpoint, tenant,
// provider): catalog ids are short and plain; anything else is "other".
func modelLabel(s string) string {
	if len(s) > 128 || strings.ContainsFunc(s, func(r rune) bool {
		return r <= ' ' || r > '~' || r == '"' || r == '\\'
	}) {
		return "other"
	}
	return s
}

// startMetrics sets up the edge's metrics, served at the debug listener's
// /metrics: only with a debug listener, so without one the request path has
// no metrics code at all. The Report stream's backlog is read from reports.
func startMetrics(reports reportBacklog) (*telemetry.Metrics, *edgeMetrics, error) {
	m, err := telemetry.NewMetrics("switchboard-edge", Version, true)
	if err != nil {
		return nil, nil, err
	}
	em, err := newEdgeMetrics(m, reports)
	if err != nil {
		return nil, nil, err
	}
	return m, em, nil
}
