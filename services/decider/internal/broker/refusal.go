package broker

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/numfmt"
)

// Refusal says why a reservation was refused, in terms safe to show the
// caller: the limit and remaining of its own buckets (api key, app, tenant)
// only; a partner or provider bucket is described as shared capacity with no
// figures, because its level is other tenants' consumption.
type Refusal struct {
	// Reason classifies the refusal.
	Reason RefusalReason
	// BucketID is the refusing bucket, for logs and metrics on the decider's
	// side. It may name a provider project: not for the caller.
	BucketID string
	// Scope is the refusing bucket's scope.
	Scope Scope
	// Unit is the refusing bucket's unit.
	Unit Unit
	// Limit is the bucket's limit; 0 for a shared bucket.
	Limit float64
	// Remaining is what the bucket can still admit; 0 for a shared bucket.
	Remaining float64
	// Reset is when the bucket will have room for this demand; zero when
	// unknown (concurrency) or never (NON_RETRYABLE_REQUEST).
	Reset time.Time
	// RetryAfter is how long to wait before retrying; 0 when retrying cannot help.
	RetryAfter time.Duration
	// Class is the request's workload class.
	Class WorkloadClass
	// Message is a human-readable explanation.
	Message string
	// Code is a stable machine-readable reason (Code* constants).
	Code string
	// FallbackModel is set when the class's overload action degrades the
	// request to another model instead of refusing it.
	FallbackModel string

	need     float64 // the refused amount, for the message
	finished bool    // the message is written
}

// refusal describes why bk refused amount; bk.mu is held. The message is
// formatted later, outside the locks, by finish.
func (b *Broker) refusal(bk *bucket, amount, hold float64, now int64, cls WorkloadClass) *Refusal {
	lim := bk.limit()
	keep := bk.keep(hold)
	r := &Refusal{BucketID: bk.id, Scope: bk.scope, Unit: bk.unit, Class: cls}
	if bk.scope.own() {
		r.Limit = lim
		r.Remaining = whole(bk.unit, bk.available()-keep)
	}
	switch {
	case bk.never(amount):
		r.Reason = ReasonNonRetryableRequest
	case bk.rule == RuleDailyReset:
		r.Reason = ReasonNonRetryablePolicy
	default:
		r.Reason = ReasonRetryableCapacity
	}
	r.Code = CodeOf(r)
	if r.Reason == ReasonNonRetryableRequest {
		r.need = amount
		return r
	}
	k := keep
	if bk.rule != RuleRamp && amount+k > bk.p.max() {
		// Only learning mode can keep this much back: the demand fits once
		// it ends.
		k = math.Max(0, bk.p.max()-amount)
	}
	w, known := bk.wait(amount, k, now)
	if k < keep {
		w = max(w, b.consUntil.Load()-now)
	}
	if !known {
		r.RetryAfter = b.opts.ConcurrencyRetry
		return r
	}
	r.RetryAfter = time.Duration(max(w, 0))
	r.Reset = time.Unix(0, now+max(w, 0)).UTC()
	return r
}

// finish writes the refusal's message, once.
func (r *Refusal) finish() {
	if r.finished {
		return
	}
	r.finished = true
	what := r.Scope.String() + " " + r.Unit.String()
	switch {
	case r.Scope.own() && r.Reason == ReasonNonRetryableRequest:
		r.Message = fmt.Sprintf("the request needs %s %s, more than the %s limit of %s can ever admit", numfmt.Number(r.need), r.Unit, what, numfmt.Number(r.Limit))
		return
	case r.Reason == ReasonNonRetryableRequest:
		r.Message = fmt.Sprintf("the request needs more %s than the %s capacity can ever admit", r.Unit, sharedName(r.Scope))
		return
	case r.Scope.own():
		r.Message = fmt.Sprintf("%s limit reached (%s remaining of %s)", what, numfmt.Number(r.Remaining), numfmt.Number(r.Limit))
	case r.Message != "":
		// A pause: pauseRefusal wrote it.
	default:
		r.Message = fmt.Sprintf("%s capacity for %s is exhausted", sharedName(r.Scope), r.Unit)
	}
	if r.RetryAfter > 0 {
		r.Message += fmt.Sprintf("; retry after %s", r.RetryAfter.Round(time.Millisecond))
	}
}

// whole is what a level means to a caller: never negative, and whole
// units for everything but dollars (half a request cannot be sent).
func whole(u Unit, v float64) float64 {
	if v <= 0 {
		return 0
	}
	if u == UnitUSD {
		return v
	}
	return math.Floor(v + 1e-9)
}

func sharedName(s Scope) string {
	if s == ScopePartner {
		return "partner"
	}
	return "provider"
}

// pauseRefusal is the refusal of rt's pause, or of id's tenant's own pause
// of rt, whichever ends later; nil when neither is in force.
func (b *Broker) pauseRefusal(rt *route, now int64, id *Identity) *Refusal {
	pz := rt.pause
	until := pz.until.Load()
	if tp := b.tenantPause(rt.EndpointID, id.TenantID, false); tp != nil && tp.until.Load() > until {
		pz, until = tp, tp.until.Load()
	}
	if now >= until {
		return nil
	}
	return &Refusal{
		Reason: RefusalReason(pz.reason.Load()), BucketID: "pause:" + rt.EndpointID,
		Scope: ScopeModelRoute, Unit: UnitRequests, Class: id.Class,
		Reset: time.Unix(0, until).UTC(), RetryAfter: time.Duration(until - now),
		Message: "provider capacity: the provider asked to pause this route",
		Code:    CodeProviderPaused,
	}
}

// CodeOf is a refusal's stable, machine-readable reason (the Code*
// constants): its Code, or for a refusal that names none the code its
// reason, bucket and unit imply, in this order: the reason (too_large for a
// request that can never fit; for a policy, spend_limit in USD, else
// daily_quota; queue_deadline; provider_paused for an overloaded
// provider), then provider_paused for a paused route, spend_limit for any
// USD bucket (a ramp on spend too), ramp for a ramp bucket (configured or
// learned: isRampID), concurrency by the unit, else rate_limit. It is the
// one derivation of a refusal's code: the broker names a bucket's refusal
// with it, and the decider's answers and its metrics use it.
func CodeOf(ref *Refusal) string {
	if ref.Code != "" {
		return ref.Code
	}
	switch ref.Reason {
	case ReasonNonRetryableRequest:
		return CodeTooLarge
	case ReasonNonRetryablePolicy:
		if ref.Unit == UnitUSD {
			return CodeSpendLimit
		}
		return CodeDailyQuota
	case ReasonDeadline:
		return CodeQueueDeadline
	case ReasonRetryableOverload:
		return CodeProviderPaused
	}
	switch {
	case strings.HasPrefix(ref.BucketID, "pause:"):
		return CodeProviderPaused
	case ref.Unit == UnitUSD:
		return CodeSpendLimit
	case isRampID(ref.BucketID):
		return CodeRamp
	case ref.Unit == UnitConcurrentRequests:
		return CodeConcurrency
	}
	return CodeRateLimit
}
