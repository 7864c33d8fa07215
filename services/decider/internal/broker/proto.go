package broker

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// The broker's enums share the proto enums' numbers, so the mapping helpers
// below are casts. These declarations fail to compile if the proto ever
// renumbers one of the pairs the casts rely on.
var (
	_ = [1]int{}[switchboardv1.LimitScope_LIMIT_SCOPE_MODEL_ROUTE-switchboardv1.LimitScope(ScopeModelRoute)]
	_ = [1]int{}[switchboardv1.LimitScope_LIMIT_SCOPE_API_KEY-switchboardv1.LimitScope(ScopeAPIKey)]
	_ = [1]int{}[switchboardv1.LimitUnit_LIMIT_UNIT_CONCURRENT_REQUESTS-switchboardv1.LimitUnit(UnitConcurrentRequests)]
	_ = [1]int{}[switchboardv1.LimitUnit_LIMIT_UNIT_USD-switchboardv1.LimitUnit(UnitUSD)]
	_ = [1]int{}[switchboardv1.RefusalReason_REFUSAL_REASON_DEADLINE-switchboardv1.RefusalReason(ReasonDeadline)]
	_ = [1]int{}[switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY-switchboardv1.RefusalReason(ReasonNonRetryablePolicy)]
	_ = [1]int{}[switchboardv1.Outcome_OUTCOME_CLIENT_ERROR-switchboardv1.Outcome(OutcomeClientError)]
	_ = [1]int{}[switchboardv1.Outcome_OUTCOME_RATE_LIMITED-switchboardv1.Outcome(OutcomeRateLimited)]
	_ = [1]int{}[switchboardv1.WorkloadClass_WORKLOAD_CLASS_BATCH-switchboardv1.WorkloadClass(ClassBatch)]
)

// ReserveRequestFromProto maps a Reserve RPC request. The caller resolves
// the identity first (api_key_sha256 → tenant_id and api_key_id); the
// broker reads only the resolved fields.
func ReserveRequestFromProto(in *switchboardv1.ReserveRequest) ReserveRequest {
	id := in.GetIdentity()
	d := in.GetDemand()
	return ReserveRequest{
		RequestID:      in.GetRequestId(),
		IdempotencyKey: in.GetIdempotencyKey(),
		Identity: Identity{
			TenantID: id.GetTenantId(), APIKeyID: id.GetApiKeyId(), App: id.GetApp(),
			Environment: id.GetEnvironment(), Partner: id.GetPartner(), Class: WorkloadClass(id.GetWorkloadClass()),
		},
		Model:           in.GetModel(),
		EndpointID:      in.GetEndpointId(),
		Demand:          Demand{InputTokens: d.GetInputTokens(), OutputTokens: d.GetOutputTokens(), USD: d.GetUsd(), Requests: d.GetRequests()},
		TTL:             in.GetTtl().AsDuration(),
		MaxWait:         max(in.GetMaxWait().AsDuration(), 0),
		Attempt:         int(in.GetAttempt()),
		PreviousFailure: RefusalReason(in.GetPreviousFailure()),
	}
}

// ReconcileRequestFromProto maps a Reconcile RPC request.
func ReconcileRequestFromProto(in *switchboardv1.ReconcileRequest) ReconcileRequest {
	u := in.GetUsage()
	r := ReconcileRequest{
		ReservationID: in.GetReservationId(),
		Usage: Usage{InputTokens: u.GetInputTokens(), CachedInputTokens: u.GetCachedInputTokens(),
			OutputTokens: u.GetOutputTokens(), CostUSD: u.GetCostUsd(), Reported: u.GetReported()},
		Outcome: Outcome(in.GetOutcome()),

		Failure:           RefusalReason(in.GetFailure()),
		ProviderErrorCode: in.GetProviderErrorCode(),
		FailureDeferred:   in.GetFailureDeferred(),
	}
	if hs := in.GetRateLimitHeaders(); len(hs) > 0 {
		r.Headers = make([]Header, len(hs))
		for i, h := range hs {
			r.Headers[i] = Header{Name: h.GetName(), Value: h.GetValue()}
		}
	}
	return r
}

// Proto returns the reservation as the Reserve RPC answers it.
func (r *Reservation) Proto() *switchboardv1.Reservation {
	return &switchboardv1.Reservation{
		ReservationId:  r.ID,
		RequestId:      r.RequestID,
		IdempotencyKey: r.IdempotencyKey,
		Demand: &switchboardv1.Demand{InputTokens: r.Demand.InputTokens, OutputTokens: r.Demand.OutputTokens,
			Usd: r.Demand.USD, Requests: r.Demand.Requests},
		Charges:    ChargesProto(r.Charges),
		CreateTime: timestamppb.New(r.Created),
		ExpireTime: timestamppb.New(r.Expires),
	}
}

// ChargesProto maps charges (a reservation's, or a settlement's releases).
func ChargesProto(cs []Charge) []*switchboardv1.BucketCharge {
	out := make([]*switchboardv1.BucketCharge, len(cs))
	for i, c := range cs {
		out[i] = &switchboardv1.BucketCharge{BucketId: c.BucketID, Scope: switchboardv1.LimitScope(c.Scope),
			Unit: switchboardv1.LimitUnit(c.Unit), Amount: c.Amount}
	}
	return out
}

// Proto returns the refusal as the caller may see it. Refusal is already
// safe (shared buckets carry no figures); BucketID stays on the decider.
func (r *Refusal) Proto() *switchboardv1.Refusal {
	out := &switchboardv1.Refusal{
		Reason:        switchboardv1.RefusalReason(r.Reason),
		Scope:         switchboardv1.LimitScope(r.Scope),
		Unit:          switchboardv1.LimitUnit(r.Unit),
		Limit:         r.Limit,
		Remaining:     r.Remaining,
		WorkloadClass: switchboardv1.WorkloadClass(r.Class),
		Message:       r.Message,
		Code:          r.Code,
		FallbackModel: r.FallbackModel,
	}
	if !r.Reset.IsZero() {
		out.ResetTime = timestamppb.New(r.Reset)
	}
	if r.RetryAfter > 0 {
		out.RetryAfter = durationpb.New((r.RetryAfter + time.Millisecond - 1).Truncate(time.Millisecond)) // rounded up: never sooner than asked
	}
	return out
}

// Proto returns the queue decision as the Reserve RPC answers it. It names
// only the caller's own place: its id, class, its own tenant's entries
// ahead, its wait.
func (q *QueueDecision) Proto() *switchboardv1.QueueDecision {
	if q == nil {
		return nil
	}
	out := &switchboardv1.QueueDecision{
		QueueId:       q.ID,
		WorkloadClass: switchboardv1.WorkloadClass(q.Class),
		Position:      int64(q.Position),
		Waited:        durationpb.New(q.Waited),
	}
	if q.EstimatedWait > 0 {
		out.EstimatedWait = durationpb.New(q.EstimatedWait)
	}
	return out
}

// Proto returns the settlement as the Reconcile RPC answers it.
func (s *Settlement) Proto() *switchboardv1.ReconcileResponse {
	return &switchboardv1.ReconcileResponse{Released: ChargesProto(s.Released)}
}
