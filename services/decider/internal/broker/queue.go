package broker

import (
	"context"
	"time"
)

// Refusal codes: stable, machine-readable reasons a caller can switch on.
const (
	CodeRateLimit      = "rate_limit"      // a token bucket is empty for now
	CodeDailyQuota     = "daily_quota"     // a daily quota is used up until its reset
	CodeSpendLimit     = "spend_limit"     // a spend limit (USD bucket) is used up
	CodeConcurrency    = "concurrency"     // too many requests in flight
	CodeRamp           = "ramp"            // the route's ramp does not allow more yet
	CodeProviderPaused = "provider_paused" // the provider said 429/503; paused until Retry-After
	CodeTooLarge       = "too_large"       // the demand can never fit
	CodeQueueFull      = "queue_full"      // the class's queue is at its maximum depth
	CodeQueueDeadline  = "queue_deadline"  // no capacity came within the class's deadline
	CodeRetryBudget    = "retry_budget"    // the logical request used its retries
	CodeNonRetryable   = "non_retryable"   // the previous failure cannot be retried
)

// OverloadAction is what a class does with a request it cannot admit in
// time: refuse it, or degrade it to a fallback model.
type OverloadAction uint8

// The overload actions.
const (
	OverloadReject   OverloadAction = iota // refuse, with a reason code and Retry-After
	OverloadFallback                       // refuse naming ClassContract.FallbackModel, which the caller tries instead
)

// ClassContract is one workload class's queue contract: how long a request
// may wait for capacity, how many may wait, what happens beyond, and its
// weight in fair sharing.
type ClassContract struct {
	// Class is the workload class.
	Class WorkloadClass
	// MaxWait is the queue deadline: a request not admitted within it is
	// refused (queue_deadline). 0 never queues: refused at once.
	MaxWait time.Duration
	// MaxDepth is how many requests of the class may wait at once, across
	// tenants; one more is refused (queue_full). 0 never queues.
	MaxDepth int
	// Overload is what a full queue or a passed deadline does.
	Overload OverloadAction
	// FallbackModel is the model OverloadFallback degrades to.
	FallbackModel string
	// Weight is the class's fair-share weight (production above
	// background); a tenant's share is its weight × its class's weight.
	// 0 means 1.
	Weight float64
	// RetryBudget is how many retries one logical request of the class may
	// make (attempts beyond the first). Negative: none.
	RetryBudget int
}

// TenantShare is a tenant's fair-share weight and burst credit.
type TenantShare struct {
	// Tenant is the tenant id.
	Tenant string
	// Weight is its share of contended capacity relative to other tenants;
	// 0 means 1.
	Weight float64
	// Burst bounds how far ahead of its fair share an active tenant may run
	// while others wait, in requests. 0 uses the broker's default.
	Burst float64
}

// QueueDecision says how a reservation went through its class's queue.
type QueueDecision struct {
	// ID identifies the queued entry.
	ID string
	// Class is the class whose queue it waited in.
	Class WorkloadClass
	// Position is the number of the same tenant's entries ahead of it when
	// it was queued.
	Position int
	// Waited is how long it waited.
	Waited time.Duration
	// EstimatedWait is set only when the wait can be enforced.
	EstimatedWait time.Duration
}

// ReserveWait is Reserve with the request's class contract applied: when a
// bucket refuses for lack of capacity that may come back within the
// class's deadline (RETRYABLE_CAPACITY or RETRYABLE_OVERLOAD), the request
// waits in its class's queue, and capacity that frees goes to queued
// requests in fair-share order. The QueueDecision is non-nil when the
// request waited. The error is for a cancelled context or invalid demand.
//
// TODO(queue): this skeleton does not queue yet.
func (b *Broker) ReserveWait(ctx context.Context, req ReserveRequest) (*Reservation, *Refusal, *QueueDecision, error) {
	res, ref, err := b.Reserve(ctx, req)
	return res, ref, nil, err
}

// QueueDepth is how many requests wait in one class's queue, per tenant.
type QueueDepth struct {
	Class  WorkloadClass
	Tenant string
	Depth  int
}

// QueueDepths reports the requests waiting now, per class and tenant, for
// metrics. TODO(queue): the skeleton reports none.
func (b *Broker) QueueDepths() []QueueDepth { return nil }
