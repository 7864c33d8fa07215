package app

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Who pays a cost (switchboard_edge_cost_usd's payer): the tenant, for
// the attempt that served it; the hedge budget, for a hedge race's loser;
// the operator, for every other attempt the provider charged (a failed
// call, one cancelled before its first token).
const (
	payerTenant   = "tenant"
	payerHedge    = "hedge_budget"
	payerOperator = "operator"
)

// ttftBuckets bound a provider's time to first token: tens of milliseconds
// for a warm small prompt, a minute for the edge's first-token timeout.
var ttftBuckets = []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60}

// attemptMetrics are the edge's metrics of each provider call and of its
// Report stream.
type attemptMetrics struct {
	firstToken metric.Float64Histogram
	unacked    metric.Int64ObservableGauge
}

// reportBacklog reads the Report stream's unacknowledged work.
type reportBacklog struct {
	activityBatches func() int
	reconciles      func() int
}

var (
	backlogActivity  = metric.WithAttributes(attribute.String("kind", "activity_batches"))
	backlogReconcile = metric.WithAttributes(attribute.String("kind", "reconciliations"))
)

// init creates the metrics on mt; the Report stream's backlog is read
// from reports.
func (m *attemptMetrics) init(mt metric.Meter, reports reportBacklog) error {
	var err error
	m.firstToken, err = mt.Float64Histogram("switchboard_edge_provider_time_to_first_token", metric.WithUnit("s"),
		metric.WithDescription("Time from sending a provider call to its first token, per call that got one, by endpoint and prompt-size bucket."),
		metric.WithExplicitBucketBoundaries(ttftBuckets...))
	if err != nil {
		return err
	}
	m.unacked, err = mt.Int64ObservableGauge("switchboard_edge_report_unacked", metric.WithUnit("{item}"),
		metric.WithDescription("What the edge sent on its Report stream and the decider has not acknowledged yet: activity batches, and reconciliations (queued ones included)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(reports.activityBatches()), backlogActivity)
			o.Observe(int64(reports.reconciles()), backlogReconcile)
			return nil
		}))
	return err
}

// record measures each provider call of a dispatched request: its time to
// first token, by endpoint and the size bucket of the request's prompt.
func (m *attemptMetrics) record(ctx context.Context, r *switchboardv1.ActivityRecord, promptTokens int64) {
	bucket := tokens.BucketOf(promptTokens).String()
	for _, a := range r.GetAttempts() {
		if a.GetTtft() == nil {
			continue
		}
		m.firstToken.Record(ctx, a.GetTtft().AsDuration().Seconds(), metric.WithAttributes(
			attribute.String("endpoint", modelLabel(a.GetEndpointId())), attribute.String("bucket", bucket)))
	}
}

// operatorCost adds to cost what a request's attempts cost that its tenant
// is not billed for: the hedge race's loser (the hedge budget's), and any
// other attempt but the served one (the operator's).
func (m *attemptMetrics) operatorCost(ctx context.Context, cost metric.Float64Counter, r *switchboardv1.ActivityRecord, model string) {
	served := -1
	if r.GetEndpointId() != "" {
		// The served attempt is the last one on the serving endpoint.
		for i, a := range r.GetAttempts() {
			if a.GetEndpointId() == r.GetEndpointId() {
				served = i
			}
		}
	}
	loser := r.GetHedge().GetLoserEndpointId()
	for i, a := range r.GetAttempts() {
		c := a.GetCostUsd()
		if i == served || c <= 0 {
			continue
		}
		payer := payerOperator
		if a.GetOutcome() == switchboardv1.Outcome_OUTCOME_CANCELLED && a.GetEndpointId() == loser {
			payer = payerHedge
		}
		cost.Add(ctx, c, metric.WithAttributes(attribute.String("model", model),
			attribute.String("tenant", modelLabel(r.GetTenantId())), attribute.String("payer", payer)))
	}
}
