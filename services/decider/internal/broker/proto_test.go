package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestProtoRoundTrip(t *testing.T) {
	b, _ := newBroker(t, hierarchy())
	in := &switchboardv1.ReserveRequest{
		RequestId: "req-1", IdempotencyKey: "idem-1", Model: model, EndpointId: endpoint,
		Identity: &switchboardv1.Identity{TenantId: tenant, ApiKeyId: keyID, App: "chat", Environment: "prod", Partner: "resell",
			WorkloadClass: switchboardv1.WorkloadClass_WORKLOAD_CLASS_BATCH},
		Demand: &switchboardv1.Demand{InputTokens: 100, OutputTokens: 50, Usd: 0.01, Requests: 1},
		Ttl:    durationpb.New(30 * time.Second),
	}
	rq := ReserveRequestFromProto(in)
	require.Equal(t, ReserveRequest{RequestID: "req-1", IdempotencyKey: "idem-1", Model: model, EndpointID: endpoint,
		Identity: Identity{TenantID: tenant, APIKeyID: keyID, App: "chat", Environment: "prod", Partner: "resell", Class: ClassBatch},
		Demand:   Demand{InputTokens: 100, OutputTokens: 50, USD: 0.01, Requests: 1}, TTL: 30 * time.Second}, rq)
	require.Equal(t, ReserveRequest{}, ReserveRequestFromProto(&switchboardv1.ReserveRequest{}), "nil messages are zero values")

	r, _, err := b.Reserve(t.Context(), rq)
	require.NoError(t, err)
	p := r.Proto()
	require.Equal(t, r.ID, p.GetReservationId())
	require.Equal(t, "idem-1", p.GetIdempotencyKey())
	require.Equal(t, int64(100), p.GetDemand().GetInputTokens())
	require.Len(t, p.GetCharges(), 7)
	require.Equal(t, switchboardv1.LimitScope_LIMIT_SCOPE_API_KEY, p.GetCharges()[0].GetScope())
	require.Equal(t, switchboardv1.LimitUnit_LIMIT_UNIT_CONCURRENT_REQUESTS, p.GetCharges()[3].GetUnit())
	require.Equal(t, t0.Add(30*time.Second), p.GetExpireTime().AsTime())

	rc := ReconcileRequestFromProto(&switchboardv1.ReconcileRequest{
		ReservationId: r.ID, Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED,
		Usage:            &switchboardv1.Usage{InputTokens: 80, CachedInputTokens: 20, OutputTokens: 10, CostUsd: 0.002, Reported: true},
		RateLimitHeaders: []*switchboardv1.Header{{Name: "retry-after", Value: "3"}},
	})
	require.Equal(t, ReconcileRequest{ReservationID: r.ID, Outcome: OutcomeRateLimited,
		Usage:   Usage{InputTokens: 80, CachedInputTokens: 20, OutputTokens: 10, CostUSD: 0.002, Reported: true},
		Headers: []Header{{Name: "retry-after", Value: "3"}}}, rc)
	st, err := b.Reconcile(t.Context(), rc)
	require.NoError(t, err)
	sp := st.Proto()
	require.Len(t, sp.GetReleased(), 7)
	require.Equal(t, 20.0, sp.GetReleased()[2].GetAmount(), "100 input tokens reserved, 80 used")

	ref := &Refusal{Reason: ReasonRetryableCapacity, RetryAfter: 1500 * time.Microsecond}
	require.Equal(t, 2*time.Millisecond, ref.Proto().GetRetryAfter().AsDuration(), "rounded up, never sooner than asked")

	ref = &Refusal{Reason: ReasonDeadline, Code: CodeQueueDeadline, FallbackModel: "m-small"}
	require.Equal(t, switchboardv1.RefusalReason_REFUSAL_REASON_DEADLINE, ref.Proto().GetReason())
	require.Equal(t, "queue_deadline", ref.Proto().GetCode())
	require.Equal(t, "m-small", ref.Proto().GetFallbackModel())
}

func TestProtoQueueFields(t *testing.T) {
	rq := ReserveRequestFromProto(&switchboardv1.ReserveRequest{MaxWait: durationpb.New(3 * time.Second), Attempt: 2,
		PreviousFailure: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD})
	require.Equal(t, 3*time.Second, rq.MaxWait)
	require.Equal(t, 2, rq.Attempt)
	require.Equal(t, ReasonRetryableOverload, rq.PreviousFailure)
	require.Zero(t, ReserveRequestFromProto(&switchboardv1.ReserveRequest{MaxWait: durationpb.New(-time.Second)}).MaxWait, "a negative wait is none")

	var none *QueueDecision
	require.Nil(t, none.Proto())
	d := &QueueDecision{ID: "q1", Class: ClassBackground, Position: 2, Waited: 1500 * time.Millisecond}
	p := d.Proto()
	require.Equal(t, "q1", p.GetQueueId())
	require.Equal(t, switchboardv1.WorkloadClass_WORKLOAD_CLASS_BACKGROUND, p.GetWorkloadClass())
	require.Equal(t, int64(2), p.GetPosition())
	require.Equal(t, 1500*time.Millisecond, p.GetWaited().AsDuration())
	require.Nil(t, p.GetEstimatedWait(), "no estimate unless enforceable")
	d.EstimatedWait = time.Second
	require.Equal(t, time.Second, d.Proto().GetEstimatedWait().AsDuration())
}
