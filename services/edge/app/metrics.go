package app

import (
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/switchboard-ai/switchboard/pkg/telemetry"
)

// headerFallbackModel names the model that answered a request in place of
// the one asked for, when the decider's refusal degraded the request to its
// class's fallback model.
const headerFallbackModel = "x-switchboard-fallback-model"

// edgeMetrics are the metrics of events only the edge sees. The decider
// counts every admission decision, including refusals that name a fallback
// model (switchboard_fallback_refusals_total); whether the edge then served
// the request with that model is known here only.
type edgeMetrics struct {
	fallbacks metric.Int64Counter
}

func newEdgeMetrics(m *telemetry.Metrics) (*edgeMetrics, error) {
	mt := m.MeterProvider().Meter("github.com/switchboard-ai/switchboard/services/edge")
	fb, err := mt.Int64Counter("switchboard_edge_fallback_served", metric.WithUnit("{request}"),
		metric.WithDescription("Requests the edge answered with a fallback model instead of the model asked for, by fallback model."))
	if err != nil {
		return nil, fmt.Errorf("edge metrics: %w", err)
	}
	return &edgeMetrics{fallbacks: fb}, nil
}

// handler counts, once next has answered, the requests answered by a
// fallback model: those whose response names one in headerFallbackModel,
// wherever in the edge that is decided. It reads the response's header map
// only after next returns, so it neither wraps the ResponseWriter (streams
// keep their Flusher) nor adds anything to a request without the header
// but one map lookup.
func (m *edgeMetrics) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if fb := w.Header().Get(headerFallbackModel); fb != "" {
			m.fallbacks.Add(r.Context(), 1, metric.WithAttributes(attribute.String("model", modelLabel(fb))))
		}
	})
}

// modelLabel bounds a model id used as a label: catalog model ids are short
// and plain; anything else is "other".
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
// no metrics code at all.
func startMetrics() (*telemetry.Metrics, *edgeMetrics, error) {
	m, err := telemetry.NewMetrics("switchboard-edge", Version, true)
	if err != nil {
		return nil, nil, err
	}
	em, err := newEdgeMetrics(m)
	if err != nil {
		return nil, nil, err
	}
	return m, em, nil
}
