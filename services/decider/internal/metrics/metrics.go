// Package metrics records the decider's admission metrics with
// OpenTelemetry: every reservation decision of the rate-limit broker, its
// admission queues, and every reconciliation (provider 429s and 503s,
// Retry-After, estimate accuracy), plus gauges read from the broker's state
// when scraped (queue depth, concurrency saturation, capacity used, daily
// quota and spend headroom). The decider exports them for Prometheus on its
// debug listener; docs/operations.md's "Metrics" section lists them.
//
// Metrics are recorded where the broker decides: on the replica that owns
// it. The gRPC layer calls [Admission.Reserved] and [Admission.Reconciled]
// only for calls its own broker answered, so a call forwarded from another
// replica is counted once, by the owner; and the gauges report only while
// this replica owns the broker.
//
// Labels are bounded by the catalog: tenant ids, endpoint ids (route),
// workload classes, bucket scope and unit, refusal reason and code, and
// fallback model names. An endpoint id the catalog does not name (a caller
// may send any) is counted as route "other". API keys, request ids and free
// text are never labels.
package metrics

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

// ScopeName is the instrumentation scope of the decider's admission metrics.
const ScopeName = "github.com/switchboard-ai/switchboard/services/decider"

// Buckets reads bucket levels (the broker's BucketLevels).
type Buckets interface {
	BucketLevels(scopes ...broker.Scope) []broker.BucketLevel
}

// Queues reads the admission queues' depths (the broker's QueueDepths).
type Queues interface {
	QueueDepths() []broker.QueueDepth
}

// Reservations looks up what a reservation reserved (the broker's
// ReservationInfo), so a reconciliation can be attributed to its tenant and
// route and compared with its estimate.
type Reservations interface {
	ReservationInfo(id string) (broker.ReservationInfo, bool)
}

// Options configure an [Admission].
type Options struct {
	// Provider creates the instruments. (Required)
	Provider metric.MeterProvider
	// Buckets feeds the saturation and headroom gauges. (Optional) Nil: no
	// such gauges.
	Buckets Buckets
	// Queues feeds the queue depth gauge. (Optional) Nil: no such gauge.
	Queues Queues
	// Reservations attributes reconciliations to their reservations.
	// (Optional) Nil: reconciliations are not counted.
	Reservations Reservations
	// KnownRoute says whether an endpoint id is one the catalog names.
	// (Optional) Nil: every route is known.
	KnownRoute func(endpointID string) bool
	// Owner says whether this replica owns the broker. The gauges report
	// only while it does: another replica's broker is not the one that
	// admits, and its levels mean nothing. (Optional) Nil: always.
	Owner func() bool
	// Snapshots reads the owner's snapshot figures (admission's
	// Snapshots), for the snapshot failure counter and the age of the last
	// durable snapshot. (Optional) Nil: no such metrics.
	Snapshots func() Snapshots
	// State reads what the open reservations take of the broker's saved
	// state and the most they may take (the broker's StateBytes).
	// (Optional) Nil: no such gauge.
	State func() (used, room int64)
}

// Snapshots is what the owner reports of its snapshots.
type Snapshots struct {
	Owner    bool          // whether this replica owns the state
	Failures int64         // failed snapshot writes since the start
	Age      time.Duration // age of the last durable snapshot, 0 while every change is saved
}

// Admission holds the admission instruments. A nil *Admission records
// nothing, so callers need no check of their own.
type Admission struct {
	o Options

	reservations  metric.Int64Counter
	attempts      metric.Int64Histogram
	fallbacks     metric.Int64Counter
	ramp          metric.Int64Counter
	queueWait     metric.Float64Histogram
	queueDeadline metric.Int64Counter
	queueCancel   metric.Int64Counter
	calls         metric.Int64Counter
	throttled     metric.Int64Counter
	retryAfter    metric.Int64Counter
	ratio         metric.Float64Histogram
	overReserved  metric.Float64Counter

	queueDepth metric.Int64ObservableGauge
	saturation metric.Float64ObservableGauge
	used       metric.Float64ObservableGauge
	headroom   metric.Float64ObservableGauge
	snapFails  metric.Int64ObservableCounter
	snapAge    metric.Float64ObservableGauge
	stateUsed  metric.Float64ObservableGauge
	reg        metric.Registration

	// The attribute sets of every series recorded per request, cached so
	// a series seen before costs a map read instead of building and
	// sorting a set (and allocating it).
	resvOpts        optCache[reservationKey]
	classOpts       optCache[string]
	tenantClassOpts optCache[[2]string]
	classResultOpts optCache[[2]string]
	routeOpts       optCache[routeKey]
	unitOpts        optCache[unitKey]
}

// maxCached bounds each cache; past it, sets are built for each call.
// Labels are bounded by the catalog, so only a catalog of thousands of
// tenants times routes gets there.
const maxCached = 10_000

// opts is one cached attribute set as the options of an Add and a Record:
// slices built once, so passing them allocates nothing either.
type opts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// optCache maps a series' label values to its options. A plain map under
// a read lock rather than a sync.Map: a struct key stored in an interface
// would allocate on every lookup.
type optCache[K comparable] struct {
	mu sync.RWMutex
	m  map[K]opts
}

func (c *optCache[K]) get(k K, attrs func(K) []attribute.KeyValue) opts {
	c.mu.RLock()
	o, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return o
	}
	opt := metric.WithAttributeSet(attribute.NewSet(attrs(k)...))
	o = opts{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[K]opts{}
	}
	if len(c.m) < maxCached {
		c.m[k] = o
	}
	c.mu.Unlock()
	return o
}

func classAttrs(class string) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("class", class)}
}

// tenantClassAttrs labels a series by tenant and class.
func tenantClassAttrs(k [2]string) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("tenant", k[0]), attribute.String("class", k[1])}
}

// classResultAttrs labels a series by class and result.
func classResultAttrs(k [2]string) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("class", k[0]), attribute.String("result", k[1])}
}

// routeKey is a series labelled by route and one more label.
type routeKey struct{ route, name, value string }

func routeAttrs(k routeKey) []attribute.KeyValue {
	if k.name == "" {
		return []attribute.KeyValue{attribute.String("route", k.route)}
	}
	return []attribute.KeyValue{attribute.String("route", k.route), attribute.String(k.name, k.value)}
}

// unitKey is a series labelled by tenant (possibly empty), route and unit.
type unitKey struct{ tenant, route, unit string }

func unitAttrs(k unitKey) []attribute.KeyValue {
	if k.tenant == "" {
		return []attribute.KeyValue{attribute.String("route", k.route), attribute.String("unit", k.unit)}
	}
	return []attribute.KeyValue{attribute.String("tenant", k.tenant), attribute.String("route", k.route), attribute.String("unit", k.unit)}
}

// New creates the instruments on o.Provider.
func New(o Options) (*Admission, error) {
	m := &Admission{o: o}
	mt := o.Provider.Meter(ScopeName)
	var errs []error
	c := func(name, unit, desc string) metric.Int64Counter {
		x, err := mt.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return x
	}
	m.reservations = c("switchboard_reservations", "{reservation}",
		"Reservation decisions of the rate-limit broker, by tenant, route, class and result; a refusal also by reason, code and the refusing bucket's scope and unit.")
	m.fallbacks = c("switchboard_fallback_refusals", "{refusal}",
		"Refusals that name a fallback model for the caller to degrade to, by tenant, class and fallback model.")
	m.ramp = c("switchboard_ramp_rejections", "{refusal}",
		"Refusals by a ramp limit (code ramp), by route and the ramp bucket's scope.")
	m.queueDeadline = c("switchboard_queue_deadline_expiries", "{request}",
		"Requests refused because no capacity came within their class's queue deadline (code queue_deadline), by tenant and class.")
	m.queueCancel = c("switchboard_queue_cancellations", "{request}",
		"Reserve calls that ended because the caller cancelled or its deadline passed while the broker held it, by tenant and class.")
	m.calls = c("switchboard_provider_calls", "{call}",
		"Reconciled provider calls, by route and outcome: the denominator of the provider error rates.")
	m.throttled = c("switchboard_provider_throttled", "{call}",
		"Provider calls answered 429 (rate limited) or 503/529 (overloaded), by route and status.")
	m.retryAfter = c("switchboard_provider_retry_after", "{call}",
		"Reconciled provider calls whose response carried Retry-After (or retry-after-ms), by route.")
	var err error
	m.overReserved, err = mt.Float64Counter("switchboard_tokens_over_reserved", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens reserved but not used by successful calls (reserved minus actual, per unit): capacity held back by over-estimation, by tenant, route and unit."))
	errs = append(errs, err)
	m.attempts, err = mt.Int64Histogram("switchboard_reservation_attempt", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempt number of each admitted dispatch within its logical request (1 is the first, 2 the first retry), by class."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 5, 8))
	errs = append(errs, err)
	m.queueWait, err = mt.Float64Histogram("switchboard_queue_wait", metric.WithUnit("s"),
		metric.WithDescription("Time requests waited in their class's admission queue, by class and result."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
	errs = append(errs, err)
	m.ratio, err = mt.Float64Histogram("switchboard_token_estimate_ratio", metric.WithUnit("1"),
		metric.WithDescription("Actual over estimated tokens of successful calls with provider-reported usage, by route and unit (input_tokens, output_tokens)."),
		metric.WithExplicitBucketBoundaries(0.1, 0.25, 0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2, 4))
	errs = append(errs, err)

	var obs []metric.Observable
	if o.Queues != nil {
		m.queueDepth, err = mt.Int64ObservableGauge("switchboard_queue_depth", metric.WithUnit("{request}"),
			metric.WithDescription("Requests waiting in each workload class's admission queue now."))
		errs = append(errs, err)
		obs = append(obs, m.queueDepth)
	}
	if o.Buckets != nil {
		m.saturation, err = mt.Float64ObservableGauge("switchboard_concurrency_saturation", metric.WithUnit("1"),
			metric.WithDescription("Requests in flight over the limit of each concurrency bucket of tenants (scope tenant) and routes (scope model_route)."))
		errs = append(errs, err)
		m.used, err = mt.Float64ObservableGauge("switchboard_tenant_capacity_used", metric.WithUnit("1"),
			metric.WithDescription("Share of each tenant bucket's limit in use now (1 - remaining/limit; above 1 after an overrun), by tenant, unit and window."))
		errs = append(errs, err)
		m.headroom, err = mt.Float64ObservableGauge("switchboard_quota_headroom", metric.WithUnit("1"),
			metric.WithDescription("Remaining over limit of daily quotas and spend (usd) limits of tenants and routes, by scope, tenant or route, unit and window."))
		errs = append(errs, err)
		obs = append(obs, m.saturation, m.used, m.headroom)
	}
	if o.Snapshots != nil {
		m.snapFails, err = mt.Int64ObservableCounter("switchboard_broker_snapshot_failures", metric.WithUnit("{write}"),
			metric.WithDescription("Broker snapshot writes that failed (etcd refused or did not answer, or the transaction exceeded the write limit) on this replica since it started."))
		errs = append(errs, err)
		m.snapAge, err = mt.Float64ObservableGauge("switchboard_broker_snapshot_age", metric.WithUnit("s"),
			metric.WithDescription("Age of the broker owner's last durable snapshot while its writes fail; 0 while every change is saved. Reported by the owner only."))
		errs = append(errs, err)
		obs = append(obs, m.snapFails, m.snapAge)
	}
	if o.State != nil {
		m.stateUsed, err = mt.Float64ObservableGauge("switchboard_broker_state_used", metric.WithUnit("1"),
			metric.WithDescription("Share of the broker's saved-state limit its open reservations take; at 1 new reservations are refused (code broker_full). Reported by the owner only."))
		errs = append(errs, err)
		obs = append(obs, m.stateUsed)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(obs) > 0 {
		if m.reg, err = mt.RegisterCallback(m.observe, obs...); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Close unregisters the gauges' callback.
func (m *Admission) Close() error {
	if m == nil || m.reg == nil {
		return nil
	}
	return m.reg.Unregister()
}

// Label values.
const (
	resultAdmitted = "admitted"
	resultRefused  = "refused"
	routeOther     = "other"
)

func (m *Admission) route(id string) string {
	if id == "" {
		return ""
	}
	if m.o.KnownRoute != nil && !m.o.KnownRoute(id) {
		return routeOther
	}
	return id
}

// className is a workload class's label (switchboardv1.EnumName):
// unspecified counts as interactive, as the broker treats it.
func className(c switchboardv1.WorkloadClass) string {
	if c == switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED {
		c = switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE
	}
	return labelOf(c)
}

// labelOf is an enum value's label, switchboardv1.EnumName, or "other"
// for a number the API does not define.
func labelOf(e protoreflect.Enum) string {
	if n := switchboardv1.EnumName(e); n != "" {
		return n
	}
	return "other"
}

func scopeName(s switchboardv1.LimitScope) string { return broker.Scope(s).String() }
func unitName(u switchboardv1.LimitUnit) string   { return broker.Unit(u).String() }
func reasonName(r switchboardv1.RefusalReason) string {
	return broker.RefusalReason(r).String()
}

// refusalCode is the refusal's code (a code that is not one is "other"),
// or, from a broker that does not name one, the code its reason and unit
// imply (broker.CodeOf, the one derivation).
func refusalCode(ref *switchboardv1.Refusal) string {
	if c := ref.GetCode(); c != "" {
		if len(c) > 32 || strings.ContainsFunc(c, func(r rune) bool { return (r < 'a' || r > 'z') && r != '_' }) {
			return "other"
		}
		return c
	}
	return broker.CodeOf(&broker.Refusal{Reason: broker.RefusalReason(ref.GetReason()), Unit: broker.Unit(ref.GetUnit())})
}

// reservationKey is one series of switchboard_reservations.
type reservationKey struct {
	tenant, route, class, result, reason, code, scope, unit string
}

func reservationAttrs(k reservationKey) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("tenant", k.tenant), attribute.String("route", k.route), attribute.String("class", k.class),
		attribute.String("result", k.result), attribute.String("reason", k.reason), attribute.String("code", k.code),
		attribute.String("scope", k.scope), attribute.String("unit", k.unit),
	}
}

// Reserved records one decision of the broker: req as the broker received
// it (identity resolved), and its answer or error.
func (m *Admission) Reserved(ctx context.Context, req *switchboardv1.ReserveRequest, resp *switchboardv1.ReserveResponse, err error) {
	if m == nil {
		return
	}
	tenant := req.GetIdentity().GetTenantId()
	class := className(req.GetIdentity().GetWorkloadClass())
	if err != nil {
		switch status.Code(err) {
		case codes.Canceled, codes.DeadlineExceeded:
			m.queueCancel.Add(ctx, 1, m.tenantClassOpts.get([2]string{tenant, class}, tenantClassAttrs).add...)
		}
		return
	}
	route := m.route(req.GetEndpointId())
	if q := resp.GetQueue(); q != nil {
		result := resultAdmitted
		if !resp.GetAdmitted() {
			result = resultRefused
		}
		qc := class
		if q.GetWorkloadClass() != switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED {
			qc = className(q.GetWorkloadClass())
		}
		m.queueWait.Record(ctx, q.GetWaited().AsDuration().Seconds(), m.classResultOpts.get([2]string{qc, result}, classResultAttrs).rec...)
	}
	if resp.GetAdmitted() {
		m.reservations.Add(ctx, 1, m.resvOpts.get(reservationKey{tenant: tenant, route: route, class: class, result: resultAdmitted}, reservationAttrs).add...)
		m.attempts.Record(ctx, int64(max(req.GetAttempt(), 1)), m.classOpts.get(class, classAttrs).rec...)
		return
	}
	ref := resp.GetRefusal()
	code := refusalCode(ref)
	scope := scopeName(ref.GetScope())
	m.reservations.Add(ctx, 1, m.resvOpts.get(reservationKey{
		tenant: tenant, route: route, class: class, result: resultRefused,
		reason: reasonName(ref.GetReason()), code: code, scope: scope, unit: unitName(ref.GetUnit()),
	}, reservationAttrs).add...)
	switch code {
	case broker.CodeRamp:
		m.ramp.Add(ctx, 1, metric.WithAttributes(attribute.String("route", route), attribute.String("scope", scope)))
	case broker.CodeQueueDeadline:
		m.queueDeadline.Add(ctx, 1, m.tenantClassOpts.get([2]string{tenant, class}, tenantClassAttrs).add...)
	}
	if fb := ref.GetFallbackModel(); fb != "" {
		m.fallbacks.Add(ctx, 1, metric.WithAttributes(attribute.String("tenant", tenant), attribute.String("class", class),
			attribute.String("fallback_model", fb)))
	}
}

// Degraded counts a refusal the decider itself named the class's fallback
// model on (the broker's refusal named none): one the broker names is
// counted by Reserved.
func (m *Admission) Degraded(ctx context.Context, id *switchboardv1.Identity, fallbackModel string) {
	if m == nil {
		return
	}
	m.fallbacks.Add(ctx, 1, metric.WithAttributes(attribute.String("tenant", id.GetTenantId()),
		attribute.String("class", className(id.GetWorkloadClass())), attribute.String("fallback_model", fallbackModel)))
}

// Lookup returns what a reservation reserved, for [Admission.Reconciled]:
// call it before the reconciliation closes the reservation.
func (m *Admission) Lookup(id string) (broker.ReservationInfo, bool) {
	if m == nil || m.o.Reservations == nil || id == "" {
		return broker.ReservationInfo{}, false
	}
	return m.o.Reservations.ReservationInfo(id)
}

func outcomeName(o switchboardv1.Outcome) string { return labelOf(o) }

// Reconciled records one reconciliation the broker applied: req, the
// reservation as [Admission.Lookup] found it just before (ok false when it
// found none), and the broker's error. A reconciliation that does not apply
// is not counted: an error, or no reservation to apply it to (an unknown
// id, or one delivered twice: the Report stream delivers at least once, and
// the second delivery finds the reservation closed, which its caller may
// not report as an error).
func (m *Admission) Reconciled(ctx context.Context, req *switchboardv1.ReconcileRequest, info broker.ReservationInfo, ok bool, err error) {
	if m == nil || err != nil || !ok {
		return
	}
	route := m.route(info.EndpointID)
	m.calls.Add(ctx, 1, m.routeOpts.get(routeKey{route: route, name: "outcome", value: outcomeName(req.GetOutcome())}, routeAttrs).add...)
	switch {
	case req.GetOutcome() == switchboardv1.Outcome_OUTCOME_RATE_LIMITED:
		m.throttled.Add(ctx, 1, m.routeOpts.get(routeKey{route: route, name: "status", value: "429"}, routeAttrs).add...)
	case req.GetFailure() == switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD:
		m.throttled.Add(ctx, 1, m.routeOpts.get(routeKey{route: route, name: "status", value: "503"}, routeAttrs).add...)
	}
	for _, h := range req.GetRateLimitHeaders() {
		if n := h.GetName(); strings.EqualFold(n, "retry-after") || strings.EqualFold(n, "retry-after-ms") {
			m.retryAfter.Add(ctx, 1, m.routeOpts.get(routeKey{route: route}, routeAttrs).add...)
			break
		}
	}
	if req.GetOutcome() != switchboardv1.Outcome_OUTCOME_OK {
		return
	}
	u := req.GetUsage()
	m.tokens(ctx, info.Tenant, route, "input_tokens", info.Estimate.InputTokens, info.Demand.InputTokens, u.GetInputTokens(), u.GetReported())
	m.tokens(ctx, info.Tenant, route, "output_tokens", info.Estimate.OutputTokens, info.Demand.OutputTokens, u.GetOutputTokens(), u.GetReported())
}

// tokens records one unit of a successful call: actual over estimate when
// the provider reported the usage, and what was reserved beyond the actual.
func (m *Admission) tokens(ctx context.Context, tenant, route, unit string, estimate, reserved, actual int64, reported bool) {
	if reported && estimate > 0 {
		m.ratio.Record(ctx, float64(actual)/float64(estimate), m.unitOpts.get(unitKey{route: route, unit: unit}, unitAttrs).rec...)
	}
	if over := reserved - actual; over > 0 {
		m.overReserved.Add(ctx, float64(over), m.unitOpts.get(unitKey{tenant: tenant, route: route, unit: unit}, unitAttrs).add...)
	}
}

// observe reads the broker's state for the gauges, once per scrape.
func (m *Admission) observe(_ context.Context, o metric.Observer) error {
	if m.o.Snapshots != nil {
		// The failure count is this replica's whether it owns the state
		// now or not: a counter never goes back.
		s := m.o.Snapshots()
		o.ObserveInt64(m.snapFails, s.Failures)
		if s.Owner {
			o.ObserveFloat64(m.snapAge, s.Age.Seconds())
		}
	}
	if m.o.Owner != nil && !m.o.Owner() {
		return nil
	}
	if m.o.State != nil {
		if used, room := m.o.State(); room > 0 {
			o.ObserveFloat64(m.stateUsed, float64(used)/float64(room))
		} else {
			o.ObserveFloat64(m.stateUsed, 1)
		}
	}
	if m.queueDepth != nil {
		depth := map[string]int64{"interactive": 0, "background": 0, "partner": 0, "batch": 0}
		for _, q := range m.o.Queues.QueueDepths() {
			depth[className(switchboardv1.WorkloadClass(q.Class))] += int64(q.Depth)
		}
		for c, n := range depth {
			o.ObserveInt64(m.queueDepth, n, metric.WithAttributes(attribute.String("class", c)))
		}
	}
	if m.o.Buckets == nil {
		return nil
	}
	for _, l := range m.o.Buckets.BucketLevels(broker.ScopeTenant, broker.ScopeModelRoute) {
		if l.Limit <= 0 {
			continue
		}
		who := attribute.String("tenant", l.Key)
		if l.Scope == broker.ScopeModelRoute {
			who = attribute.String("route", m.route(l.Key))
		}
		scope, unit := attribute.String("scope", l.Scope.String()), attribute.String("unit", l.Unit.String())
		window := attribute.String("window", l.Window.String())
		switch l.Rule {
		case broker.RuleConcurrency:
			o.ObserveFloat64(m.saturation, (l.Limit-l.Available)/l.Limit, metric.WithAttributes(scope, who))
			continue
		case broker.RuleRamp:
			continue
		}
		if l.Scope == broker.ScopeTenant {
			o.ObserveFloat64(m.used, (l.Limit-l.Available)/l.Limit, metric.WithAttributes(who, unit, window))
		}
		if l.Rule == broker.RuleDailyReset || l.Unit == broker.UnitUSD {
			o.ObserveFloat64(m.headroom, max(l.Available, 0)/l.Limit, metric.WithAttributes(scope, who, unit, window))
		}
	}
	return nil
}
