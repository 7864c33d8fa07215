package broker

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
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

// DefaultContract is the contract of a class the configuration does not
// name: no queue, so a request that does not fit is refused at once.
func DefaultContract(c WorkloadClass) ClassContract { return ClassContract{Class: c} }

var classNames = [...]string{"unspecified", "interactive", "background", "partner", "batch"}

// className is the class's name for messages, e.g. "interactive".
func className(c WorkloadClass) string {
	if c >= 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", int32(c))
}

// Contract returns the queue contract of class c: the configured one, or
// DefaultContract. The unspecified class is interactive.
func (b *Broker) Contract(c WorkloadClass) ClassContract {
	if c == ClassUnspecified {
		c = ClassInteractive
	}
	if cc, ok := b.qcfg.Load().classes[c]; ok {
		return cc
	}
	return DefaultContract(c)
}

// ReserveWait is Reserve with the request's class contract applied: when a
// bucket refuses for lack of capacity that may come back within the
// class's deadline (RETRYABLE_CAPACITY or RETRYABLE_OVERLOAD), the request
// waits in its class's queue, and capacity that frees goes to queued
// requests in fair-share order. The QueueDecision is non-nil when the
// request was queued. The error is for a cancelled context or invalid
// demand.
//
// How long it may wait is the class's MaxWait, shortened by req.MaxWait
// and by the context's deadline (less a tenth of what is left, at most
// 100 ms, so the refusal reaches a caller still listening). A refusal that
// waiting cannot fix (NON_RETRYABLE_*), or whose retry_after is beyond
// that, is returned at once, as is every refusal of a class that does not
// queue (MaxWait or MaxDepth 0, the default). A request that would queue
// in a full queue is refused with code queue_full; one still waiting at
// its deadline with code queue_deadline (reason DEADLINE). A class whose
// overload action is OverloadFallback names its fallback model on those
// refusals. A cancelled context takes the request out of the queue, unless
// another caller re-attached to it with the same idempotency key: a
// ReserveWait with the key of a waiting request joins it, keeping its
// place and its id. With Options.QueueReattach, a request with a key whose
// last caller left keeps its place that long (not admitted meanwhile), so
// a caller whose call broke can come back to it.
//
// While requests wait, an arrival that needs a bucket one of them was
// refused by queues behind them instead of taking what they wait for; one
// that needs none of those buckets is admitted at once.
func (b *Broker) ReserveWait(ctx context.Context, req ReserveRequest) (*Reservation, *Refusal, *QueueDecision, error) {
	cc := b.Contract(req.Identity.Class)
	if cc.MaxWait <= 0 || cc.MaxDepth <= 0 {
		res, ref, err := b.Reserve(ctx, req)
		return res, ref, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	if err := req.checkFields(); err != nil {
		return nil, nil, nil, fmt.Errorf("reserve: %w", err)
	}
	if err := req.Demand.validate(); err != nil {
		return nil, nil, nil, fmt.Errorf("reserve %s: %w", req.RequestID, err)
	}
	contended := false
	if b.q.n.Load() > 0 {
		e, c := b.q.lookup(b.tab.Load(), &req)
		if e != nil {
			b.wake() // it may have been orphaned, skipped by passes
			return b.await(ctx, e)
		}
		contended = c
	}
	var ref *Refusal
	wait := waitBudget(ctx, &req, cc)
	if !contended {
		res, r, done, err := b.tryOnce(ctx, req, cc, wait)
		if done {
			return res, r, nil, err
		}
		ref = r
	}
	if wait <= 0 {
		return b.refuseNow(ctx, req, ref, cc)
	}
	now := b.nowNS()
	b.q.mu.Lock()
	e := b.q.enqueue(b, &req, cc, ref, wait, now)
	if e != nil && !b.q.running && !b.opts.ManualPump {
		b.q.running = true
		go b.runQueue()
	}
	b.q.mu.Unlock()
	if e == nil {
		if ref == nil {
			// Queued without a try: try once before refusing, the queue
			// being full is no reason to refuse what fits.
			res, r, done, err := b.tryOnce(ctx, req, cc, wait)
			if done {
				return res, r, nil, err
			}
			ref = r
		}
		return nil, queueFullRefusal(ref, cc, now), nil, nil
	}
	b.q.signal()
	// Capacity may have freed between the try and the enqueue, and an
	// arrival queued without a try is tried in fair order now.
	b.pump(now, false)
	return b.await(ctx, e)
}

// refuseNow answers a request that has no time left to wait: its own
// refusal, tried first when it has none.
func (b *Broker) refuseNow(ctx context.Context, req ReserveRequest, ref *Refusal, cc ClassContract) (*Reservation, *Refusal, *QueueDecision, error) {
	if ref == nil {
		res, r, err := b.Reserve(ctx, req)
		if err != nil || res != nil {
			return res, r, nil, err
		}
		ref = r
	}
	return nil, unqueued(ref, cc), nil, nil
}

// tryOnce reserves once for a request that may wait: done when that
// settles it (admitted, an error, or a refusal capacity cannot relieve
// within wait, as unqueued words it); else the refusal to wait on.
func (b *Broker) tryOnce(ctx context.Context, req ReserveRequest, cc ClassContract, wait time.Duration) (*Reservation, *Refusal, bool, error) {
	res, ref, err := b.Reserve(ctx, req)
	if err != nil || res != nil {
		return res, ref, true, err
	}
	if !mayComeBack(ref, wait) {
		return nil, unqueued(ref, cc), true, nil
	}
	return nil, ref, false, nil
}

// unqueued is the answer to a request refused without queueing: its
// refusal, naming the class's fallback model when waiting could have
// fixed it but not in time (an overload, for the class's contract).
func unqueued(ref *Refusal, cc ClassContract) *Refusal {
	if ref.Reason == ReasonRetryableCapacity || ref.Reason == ReasonRetryableOverload {
		return withFallback(ref, fallbackOf(cc))
	}
	return ref
}

func fallbackOf(cc ClassContract) string {
	if cc.Overload == OverloadFallback {
		return cc.FallbackModel
	}
	return ""
}

// ctxMargin caps what ReserveWait keeps of a context's time left, so a
// queue_deadline refusal reaches a caller still listening.
const ctxMargin = 100 * time.Millisecond

// waitBudget is how long req may wait in its class's queue.
func waitBudget(ctx context.Context, req *ReserveRequest, cc ClassContract) time.Duration {
	w := cc.MaxWait
	if req.MaxWait > 0 {
		w = min(w, req.MaxWait)
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		w = min(w, left-min(left/10, ctxMargin))
	}
	return w
}

// await waits for e's outcome or ctx's end. A caller whose context ends
// leaves; the entry leaves the queue with its last caller (counted as
// cancelled), or, with Options.QueueReattach and an idempotency key, once
// nobody re-attached within it. An outcome already decided is returned even so: the
// reservation is the caller's, as a Reserve answered just before the
// context ended would be.
func (b *Broker) await(ctx context.Context, e *qentry) (*Reservation, *Refusal, *QueueDecision, error) {
	select {
	case <-e.done:
	case <-ctx.Done():
		q := &b.q
		q.mu.Lock()
		if e.state == qWaiting {
			e.waiters--
			switch now := b.nowNS(); {
			case e.waiters > 0:
			case b.opts.QueueReattach > 0 && e.idem.key != "":
				e.orphaned = now + int64(b.opts.QueueReattach)
				q.soonest = min(q.soonest, e.orphaned)
				q.next.Store(min(q.next.Load(), e.orphaned))
			default:
				q.stats.Cancelled++
				q.remove(e, qCancelled, nil, nil, now)
			}
			q.mu.Unlock()
			return nil, nil, nil, ctx.Err()
		}
		q.mu.Unlock()
	}
	if e.state == qCancelled {
		return nil, nil, nil, context.Canceled
	}
	d := e.decision
	return e.res, e.ref, &d, nil
}

// Pump runs a dispatch pass at now: requests whose deadline has passed are
// refused, and capacity that has freed (a refill, a period, a pause that
// ended) goes to waiting requests in fair order. Reconcile, Expire and
// Reconfigure run one themselves, and a timer runs one when the earliest
// waiting request may fit (see Options.ManualPump); a test on a fake
// clock calls it after moving the clock.
func (b *Broker) Pump(now time.Time) { b.pump(now.UnixNano(), true) }

// NextPump is when the next dispatch pass is due: the earliest time a
// waiting request may fit by the clock alone, or reaches its deadline.
// Zero when nothing waits.
func (b *Broker) NextPump() time.Time {
	n := b.q.next.Load()
	if b.q.n.Load() == 0 || n == math.MaxInt64 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// QueueDepth is how many requests wait in one class's queue, per tenant.
type QueueDepth struct {
	Class  WorkloadClass
	Tenant string
	Depth  int
}

// QueueDepths reports the requests waiting now, per class and tenant
// (those with none left out), ordered by class then tenant, for metrics.
func (b *Broker) QueueDepths() []QueueDepth {
	if b.q.n.Load() == 0 {
		return nil
	}
	b.q.mu.Lock()
	out := make([]QueueDepth, 0, len(b.q.flows))
	for k, f := range b.q.flows {
		if len(f.entries) > 0 {
			out = append(out, QueueDepth{Class: k.class, Tenant: k.tenant, Depth: len(f.entries)})
		}
	}
	b.q.mu.Unlock()
	slices.SortFunc(out, func(a, c QueueDepth) int {
		return cmp.Or(cmp.Compare(a.Class, c.Class), cmp.Compare(a.Tenant, c.Tenant))
	})
	return out
}

// QueueStats returns what the admission queues did since the broker
// started.
func (b *Broker) QueueStats() QueueStats {
	b.q.mu.Lock()
	defer b.q.mu.Unlock()
	return b.q.stats
}
