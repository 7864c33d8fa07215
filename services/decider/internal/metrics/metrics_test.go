package metrics

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

// fakeQueues stands in for the broker's queues, whose depths the test sets.
type fakeQueues struct {
	mu sync.Mutex
	qs []broker.QueueDepth
}

func (f *fakeQueues) QueueDepths() []broker.QueueDepth {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.qs
}

func (f *fakeQueues) set(qs ...broker.QueueDepth) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.qs = qs
}

func newAdmission(t *testing.T, o Options) (*Admission, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(t.Context()) })
	o.Provider = mp
	m, err := New(o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m, r
}

// point is one data point: its attributes and its value (a sum's or a
// gauge's value, a histogram's count and sum).
type point struct {
	attrs      map[string]string
	value, sum float64
}

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(t.Context(), &rm))
	out := map[string][]point{}
	attrs := func(s attribute.Set) map[string]string {
		m := map[string]string{}
		for _, kv := range s.ToSlice() {
			m[string(kv.Key)] = kv.Value.String()
		}
		return m
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrs(p.Attributes), value: float64(p.Value)})
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrs(p.Attributes), value: p.Value})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrs(p.Attributes), value: float64(p.Value)})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrs(p.Attributes), value: p.Value})
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrs(p.Attributes), value: float64(p.Count), sum: float64(p.Sum)})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrs(p.Attributes), value: float64(p.Count), sum: p.Sum})
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// byLabel maps each point of ps by the value of label k.
func byLabel(ps []point, k string) map[string]float64 {
	out := map[string]float64{}
	for _, p := range ps {
		out[p.attrs[k]] = p.value
	}
	return out
}

// The queue depth gauge reads its source at each collection, sums the
// tenants of a class (an unspecified class is interactive), and reports 0
// for a class with nobody waiting rather than dropping its series.
func TestQueueDepthFromItsSource(t *testing.T) {
	q := &fakeQueues{}
	_, r := newAdmission(t, Options{Queues: q})
	require.Equal(t, map[string]float64{"interactive": 0, "background": 0, "partner": 0, "batch": 0},
		byLabel(collect(t, r)["switchboard_queue_depth"], "class"), "the skeleton's nil: every queue empty")

	q.set(
		broker.QueueDepth{Class: broker.ClassInteractive, Tenant: "acme", Depth: 3},
		broker.QueueDepth{Class: broker.ClassInteractive, Tenant: "globex", Depth: 2},
		broker.QueueDepth{Class: broker.ClassUnspecified, Tenant: "initech", Depth: 1},
		broker.QueueDepth{Class: broker.ClassBatch, Tenant: "acme", Depth: 40},
	)
	require.Equal(t, map[string]float64{"interactive": 6, "background": 0, "partner": 0, "batch": 40},
		byLabel(collect(t, r)["switchboard_queue_depth"], "class"))

	q.set(broker.QueueDepth{Class: broker.ClassBackground, Tenant: "acme", Depth: 1})
	require.Equal(t, map[string]float64{"interactive": 0, "background": 1, "partner": 0, "batch": 0},
		byLabel(collect(t, r)["switchboard_queue_depth"], "class"), "drained queues go back to 0")
}

func TestQueueWaitDeadlineCancellationFallbackRamp(t *testing.T) {
	m, r := newAdmission(t, Options{KnownRoute: func(id string) bool { return id == "alpha/m" }})
	ctx := t.Context()
	who := &switchboardv1.Identity{TenantId: "acme", WorkloadClass: switchboardv1.WorkloadClass_WORKLOAD_CLASS_BACKGROUND}
	req := &switchboardv1.ReserveRequest{Identity: who, EndpointId: "alpha/m", Attempt: 3}

	m.Reserved(ctx, req, &switchboardv1.ReserveResponse{Admitted: true, Reservation: &switchboardv1.Reservation{},
		Queue: &switchboardv1.QueueDecision{WorkloadClass: switchboardv1.WorkloadClass_WORKLOAD_CLASS_BACKGROUND, Waited: durationpb.New(1500 * time.Millisecond)}}, nil)
	m.Reserved(ctx, req, &switchboardv1.ReserveResponse{
		Refusal: &switchboardv1.Refusal{Reason: switchboardv1.RefusalReason_REFUSAL_REASON_DEADLINE, Code: broker.CodeQueueDeadline,
			Scope: switchboardv1.LimitScope_LIMIT_SCOPE_MODEL_ROUTE, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_INPUT_TOKENS, FallbackModel: "small/model"},
		Queue: &switchboardv1.QueueDecision{Waited: durationpb.New(30 * time.Second)}}, nil)
	m.Reserved(ctx, req, nil, status.Error(codes.Canceled, "context canceled"))
	m.Reserved(ctx, req, nil, status.Error(codes.InvalidArgument, "bad demand"))
	other := &switchboardv1.ReserveRequest{Identity: who, EndpointId: "made-up/endpoint"}
	m.Reserved(ctx, other, &switchboardv1.ReserveResponse{Refusal: &switchboardv1.Refusal{
		Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Code: broker.CodeRamp,
		Scope: switchboardv1.LimitScope_LIMIT_SCOPE_PROVIDER_PROJECT, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS}}, nil)
	// A fallback the decider names itself, on a refusal the broker named none on.
	m.Degraded(ctx, &switchboardv1.Identity{TenantId: "acme", WorkloadClass: switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE}, "small/model")

	got := collect(t, r)
	wait := got["switchboard_queue_wait"]
	require.Len(t, wait, 2)
	for _, p := range wait {
		require.Equal(t, "background", p.attrs["class"], "the request's class when the decision names none")
		switch p.attrs["result"] {
		case "admitted":
			require.Equal(t, point{attrs: p.attrs, value: 1, sum: 1.5}, p)
		case "refused":
			require.Equal(t, 30.0, p.sum)
		default:
			t.Fatalf("result %q", p.attrs["result"])
		}
	}
	require.Equal(t, []point{{attrs: map[string]string{"tenant": "acme", "class": "background"}, value: 1}}, got["switchboard_queue_deadline_expiries"])
	require.Equal(t, []point{{attrs: map[string]string{"tenant": "acme", "class": "background"}, value: 1}}, got["switchboard_queue_cancellations"],
		"a cancelled call, not an invalid one")
	require.ElementsMatch(t, []point{
		{attrs: map[string]string{"tenant": "acme", "class": "background", "fallback_model": "small/model"}, value: 1},
		{attrs: map[string]string{"tenant": "acme", "class": "interactive", "fallback_model": "small/model"}, value: 1},
	}, got["switchboard_fallback_refusals"])
	require.Equal(t, []point{{attrs: map[string]string{"route": "other", "scope": "provider_project"}, value: 1}}, got["switchboard_ramp_rejections"],
		"an endpoint the catalog does not name is route other")
	require.Equal(t, []point{{attrs: map[string]string{"class": "background"}, value: 1, sum: 3}}, got["switchboard_reservation_attempt"])
	require.Len(t, got["switchboard_reservations"], 3, "admitted, deadline, ramp: errors are no decision")
}

func TestRefusalCodeWithoutOne(t *testing.T) {
	// The decider's answers and its metrics derive a code in one order
	// (broker.CodeOf): a policy refusal is daily_quota whatever its unit
	// but USD, also when that unit is concurrency.
	policyConcurrency := &switchboardv1.Refusal{Reason: switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_CONCURRENT_REQUESTS}
	require.Equal(t, "daily_quota", refusalCode(policyConcurrency))
	for want, ref := range map[string]*switchboardv1.Refusal{
		"ramp":            {Code: "ramp", Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY},
		"other":           {Code: "Free text, not a code"},
		"queue_deadline":  {Reason: switchboardv1.RefusalReason_REFUSAL_REASON_DEADLINE},
		"too_large":       {Reason: switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_USD},
		"provider_paused": {Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD},
		"concurrency":     {Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_CONCURRENT_REQUESTS},
		"spend_limit":     {Reason: switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_USD},
		"daily_quota":     {Reason: switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS},
		"rate_limit":      {Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_INPUT_TOKENS},
	} {
		require.Equal(t, want, refusalCode(ref), "%v", ref)
	}
}

// A reconciliation with no reservation found before it (an unknown id, a
// second delivery) is not counted, even when its caller reports no error.
func TestReconciledOnlyWhenApplied(t *testing.T) {
	m, r := newAdmission(t, Options{})
	req := &switchboardv1.ReconcileRequest{ReservationId: "x", Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED}
	m.Reconciled(t.Context(), req, broker.ReservationInfo{}, false, nil)
	m.Reconciled(t.Context(), req, broker.ReservationInfo{EndpointID: "alpha/m"}, true, status.Error(codes.NotFound, "gone"))
	require.Empty(t, collect(t, r))
	m.Reconciled(t.Context(), req, broker.ReservationInfo{EndpointID: "alpha/m"}, true, nil)
	got := collect(t, r)
	require.Equal(t, []point{{attrs: map[string]string{"route": "alpha/m", "status": "429"}, value: 1}}, got["switchboard_provider_throttled"])
	require.Empty(t, got["switchboard_provider_retry_after"])
}

func TestNilAdmissionRecordsNothing(t *testing.T) {
	var m *Admission
	m.Reserved(t.Context(), &switchboardv1.ReserveRequest{}, &switchboardv1.ReserveResponse{Admitted: true}, nil)
	_, ok := m.Lookup("id")
	require.False(t, ok)
	m.Reconciled(t.Context(), &switchboardv1.ReconcileRequest{}, broker.ReservationInfo{}, true, nil)
	require.NoError(t, m.Close())
}

// A replica that does not own the broker reports no gauges: its broker's
// levels are not the ones that admit.
func TestGaugesOnlyOnTheOwner(t *testing.T) {
	var owner atomicBool
	q := &fakeQueues{}
	q.set(broker.QueueDepth{Class: broker.ClassBatch, Depth: 2})
	_, r := newAdmission(t, Options{Queues: q, Owner: owner.get})
	require.Empty(t, collect(t, r)["switchboard_queue_depth"])
	owner.set(true)
	require.Equal(t, 2.0, byLabel(collect(t, r)["switchboard_queue_depth"], "class")["batch"])
}

type atomicBool struct {
	mu sync.Mutex
	v  bool
}

func (b *atomicBool) get() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.v
}

func (b *atomicBool) set(v bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.v = v
}

// TestSnapshotFailuresAndAge: the failure counter reads its source on any
// replica; the age of the last durable snapshot and the state's use only on
// the owner.
func TestSnapshotFailuresAndAge(t *testing.T) {
	var owner atomicBool
	snaps := func() Snapshots { return Snapshots{Owner: owner.get(), Failures: 3, Age: 1500 * time.Millisecond} }
	_, r := newAdmission(t, Options{Owner: owner.get, Snapshots: snaps, State: func() (int64, int64) { return 250, 1000 }})
	got := collect(t, r)
	require.Equal(t, []point{{attrs: map[string]string{}, value: 3}}, got["switchboard_broker_snapshot_failures"])
	require.Empty(t, got["switchboard_broker_snapshot_age"])
	require.Empty(t, got["switchboard_broker_state_used"])
	owner.set(true)
	got = collect(t, r)
	require.Equal(t, 1.5, got["switchboard_broker_snapshot_age"][0].value)
	require.Equal(t, 0.25, got["switchboard_broker_state_used"][0].value)
}
