package metrics

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ServiceOptions configure a [Service].
type ServiceOptions struct {
	// Provider creates the instruments. (Required)
	Provider metric.MeterProvider
	// Owner says whether this replica owns the rate-limit broker and the
	// hedge budget. (Required)
	Owner func() bool
	// OwnerChanges counts the times this replica became the owner or
	// stopped being it (admission's OwnerChanges). (Required)
	OwnerChanges func() int64
	// Hedges reads the hedge budget: today's spend, the daily amount, and
	// the hedges granted and refused since the start (hedge.Budget's
	// Status). (Required)
	Hedges func() (spent, daily float64, granted, refused int64)
	// Settled reads the hedges settled since the start and those among
	// them that paid for a cancelled leg (hedge.Budget's Settled).
	// (Required)
	Settled func() (settled, cancelled int64)
	// Transfers reads the state transfers at start: taken from a live
	// replica, and failed (the replica started empty). (Optional)
	Transfers func() (taken, failed int64)
	// Admissions reads the reservations admitted since the start by where
	// they were decided: on this replica as the broker's owner, on its
	// quota leases, or forwarded to the owner (admission's Admissions).
	// (Optional) Without it the metric is not reported.
	Admissions func() (owner, lease, forwarded int64)
}

// Service holds the decider's metrics beside the admission ones: the hedge
// budget's decisions and what is left of it, the broker's ownership, and
// the Report stream's lag. A nil *Service records nothing.
type Service struct {
	o   ServiceOptions
	lag metric.Float64Histogram

	owner, changes    metric.Int64Observable
	decisions, settle metric.Int64Observable
	transfers         metric.Int64Observable
	left, spent       metric.Float64Observable
	admissions        metric.Int64Observable
}

// lagBuckets bound the Report stream's lag: a report waits for its batch
// (the edge's flush interval, 100 ms by default) and the network; seconds
// mean a stream that is backed up or reconnecting.
var lagBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Label values of the hedge metrics.
var (
	hedgeGranted      = metric.WithAttributes(attribute.String("result", "granted"))
	hedgeRefused      = metric.WithAttributes(attribute.String("result", "refused"))
	settledCancelled  = metric.WithAttributes(attribute.String("loser", "cancelled"))
	settledNoneBilled = metric.WithAttributes(attribute.String("loser", "none"))
	transferTaken     = metric.WithAttributes(attribute.String("result", "taken"))
	transferFailed    = metric.WithAttributes(attribute.String("result", "failed"))
	pathOwner         = metric.WithAttributes(attribute.String("path", "owner"))
	pathLease         = metric.WithAttributes(attribute.String("path", "lease"))
	pathForwarded     = metric.WithAttributes(attribute.String("path", "forwarded"))
)

// NewService creates the instruments of o.
func NewService(o ServiceOptions) (*Service, error) {
	mt := o.Provider.Meter(ScopeName)
	s := &Service{o: o}
	var errs [9]error
	s.lag, errs[0] = mt.Float64Histogram("switchboard_report_lag", metric.WithUnit("s"),
		metric.WithDescription("Time from a call report's making on the edge to its handling on this replica (clocks of both machines)."),
		metric.WithExplicitBucketBoundaries(lagBuckets...))
	s.owner, errs[1] = mt.Int64ObservableGauge("switchboard_broker_owner",
		metric.WithDescription("1 while this replica owns the rate-limit broker and the hedge budget, else 0."))
	s.changes, errs[2] = mt.Int64ObservableCounter("switchboard_broker_ownership_changes", metric.WithUnit("{change}"),
		metric.WithDescription("Times this replica became the broker's owner or stopped being it since it started."))
	s.decisions, errs[3] = mt.Int64ObservableCounter("switchboard_hedge_decisions", metric.WithUnit("{hedge}"),
		metric.WithDescription("Hedges the budget granted (a hedge leg may start) and refused, on the budget's owner, since it started."))
	s.settle, errs[4] = mt.Int64ObservableCounter("switchboard_hedge_settlements", metric.WithUnit("{hedge}"),
		metric.WithDescription("Granted hedges settled from their activity record: loser cancelled (a leg lost the race and was paid from the budget) or none."))
	s.left, errs[5] = mt.Float64ObservableGauge("switchboard_hedge_budget_remaining_usd",
		metric.WithDescription("USD left of today's hedge budget. Reported by the owner only."))
	s.spent, errs[6] = mt.Float64ObservableGauge("switchboard_hedge_budget_spent_usd",
		metric.WithDescription("USD of today's hedge budget spent (granted estimates, settled to the losers' cost). Reported by the owner only."))
	s.transfers, errs[7] = mt.Int64ObservableCounter("switchboard_decider_state_transfers", metric.WithUnit("{transfer}"),
		metric.WithDescription("State transfers at start from a live replica (affinity, conversations, outcomes, cool-downs): taken, or failed and started empty."))
	s.admissions, errs[8] = mt.Int64ObservableCounter("switchboard_decider_admissions", metric.WithUnit("{reservation}"),
		metric.WithDescription("Reservations admitted since this replica started, by where: owner (by this replica as the broker's owner, for its own callers and those other replicas forwarded), lease (on its quota leases, no forwarding hop), forwarded (for its callers, by the owner)."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	var err error
	_, err = mt.RegisterCallback(s.observe, s.owner, s.changes, s.decisions, s.settle, s.left, s.spent, s.transfers, s.admissions)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Service) observe(_ context.Context, o metric.Observer) error {
	owner := s.o.Owner()
	var v int64
	if owner {
		v = 1
	}
	o.ObserveInt64(s.owner, v)
	o.ObserveInt64(s.changes, s.o.OwnerChanges())
	spent, daily, granted, refused := s.o.Hedges()
	o.ObserveInt64(s.decisions, granted, hedgeGranted)
	o.ObserveInt64(s.decisions, refused, hedgeRefused)
	settled, cancelled := s.o.Settled()
	o.ObserveInt64(s.settle, cancelled, settledCancelled)
	o.ObserveInt64(s.settle, settled-cancelled, settledNoneBilled)
	if s.o.Transfers != nil {
		taken, failed := s.o.Transfers()
		o.ObserveInt64(s.transfers, taken, transferTaken)
		o.ObserveInt64(s.transfers, failed, transferFailed)
	}
	if s.o.Admissions != nil {
		own, lease, fwd := s.o.Admissions()
		o.ObserveInt64(s.admissions, own, pathOwner)
		o.ObserveInt64(s.admissions, lease, pathLease)
		o.ObserveInt64(s.admissions, fwd, pathForwarded)
	}
	if owner {
		o.ObserveFloat64(s.left, max(daily-spent, 0))
		o.ObserveFloat64(s.spent, spent)
	}
	return nil
}

// ReportLag records how long one call report took to arrive.
func (s *Service) ReportLag(d time.Duration) {
	if s == nil {
		return
	}
	s.lag.Record(context.Background(), d.Seconds())
}
