package broker

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// CodeDeadline is the refusal code of a retry whose caller cannot wait for
// the route's pause to end: what is left of its deadline is shorter.
const CodeDeadline = "deadline"

// DefaultRetryBudget is how many retries a logical request may make when
// its class has no contract, or a contract that leaves RetryBudget 0.
const DefaultRetryBudget = 2

// nRetryShards is the number of retry-budget shards. Only retries create
// state, so a few shards are enough to keep their locks uncontended.
const nRetryShards = 16

// retryKey names a logical request: its id, scoped by tenant so one
// tenant's ids can never spend another's budget.
type retryKey struct{ tenant, request string }

// retryState is what the broker remembers of a logical request that
// retried: which attempt numbers were admitted as retries, and until when
// it is remembered.
type retryState struct {
	attempts []int32 // the attempt numbers counted, few
	expires  int64
}

func (s *retryState) counted(a int32) bool {
	for _, x := range s.attempts {
		if x == a {
			return true
		}
	}
	return false
}

// retryShard holds the retry state of some logical requests. Its lock is a
// leaf: nothing else is locked while holding it.
type retryShard struct {
	mu sync.Mutex
	m  map[retryKey]*retryState
	// order lists the keys in the order their state was created, which is
	// their expiry order (every state lives the same TTL), so pruning pops
	// from the front.
	order []retryKey
	_     [40]byte
}

// retries is the state of the logical requests that retried. Their
// budgets are the class contracts' ([Broker.retryBudget]).
type retries struct {
	shards [nRetryShards]retryShard
}

// retryBudget is how many retries a logical request of class c may make:
// its contract's RetryBudget, DefaultRetryBudget when it has none or 0,
// none when negative.
func (b *Broker) retryBudget(c WorkloadClass) int {
	switch n := b.Contract(c).RetryBudget; {
	case n < 0:
		return 0
	case n == 0:
		return DefaultRetryBudget
	default:
		return n
	}
}

func (k retryKey) shard() int {
	h := uint32(2166136261)
	for _, s := range [2]string{k.tenant, k.request} {
		for i := 0; i < len(s); i++ {
			h ^= uint32(s[i])
			h *= 16777619
		}
		h ^= 0xff
		h *= 16777619
	}
	return int(h % nRetryShards)
}

// retryClaim is what claimRetry took, for unclaimRetry to give back.
type retryClaim struct {
	key     retryKey
	attempt int32
	ok      bool
}

// claimRetry checks a retry against the logical request's budget and the
// previous attempt's failure before anything is charged, and counts it:
//
//   - a first attempt (Attempt ≤ 1) has nothing to check and leaves no state;
//   - a retry after a failure of the request itself (PreviousFailure
//     NON_RETRYABLE_REQUEST) is refused with code non_retryable, whichever
//     endpoint it names: every endpoint would refuse it the same way;
//   - a retry whose attempt number was already counted (a replayed Reserve,
//     or the same attempt moving to the next endpoint after a refusal)
//     passes without counting again;
//   - a new attempt number is counted, or refused with code retry_budget
//     once the class's budget is spent.
//
// A provider's policy failure (NON_RETRYABLE_POLICY: a spend limit, a
// disabled key) is not refused here: it paused the route that failed
// (Reconcile), which refuses it with code provider_paused, and another
// endpoint may serve. The claim is given back with unclaimRetry when the
// reservation is not granted after all.
func (b *Broker) claimRetry(req *ReserveRequest, now int64) (retryClaim, *Refusal) {
	if req.Attempt <= 1 {
		return retryClaim{}, nil
	}
	cls := req.Identity.Class
	if req.PreviousFailure == ReasonNonRetryableRequest {
		return retryClaim{}, &Refusal{Reason: ReasonNonRetryableRequest, Code: CodeNonRetryable, Class: cls,
			Message: "the previous attempt failed on the request itself (" + req.PreviousFailure.String() + "): every endpoint would refuse it, so it is not retried"}
	}
	a := int32(min(req.Attempt, math.MaxInt32))
	k := retryKey{tenant: req.Identity.TenantID, request: req.RequestID}
	budget := b.retryBudget(cls)
	sh := &b.retries.shards[k.shard()]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b.pruneRetries(sh, now)
	st := sh.m[k]
	if st == nil {
		if budget == 0 {
			return retryClaim{}, budgetRefusal(cls, budget)
		}
		if sh.m == nil {
			sh.m = map[retryKey]*retryState{}
		}
		st = &retryState{expires: now + int64(b.opts.MaxTTL)}
		sh.m[k] = st
		sh.order = append(sh.order, k)
	}
	if st.counted(a) {
		return retryClaim{}, nil
	}
	if len(st.attempts) >= budget {
		return retryClaim{}, budgetRefusal(cls, budget)
	}
	st.attempts = append(st.attempts, a)
	return retryClaim{key: k, attempt: a, ok: true}, nil
}

// unclaimRetry gives back a retry counted by claimRetry whose reservation
// was refused or replayed: only admitted attempts spend the budget.
func (b *Broker) unclaimRetry(c retryClaim) {
	if !c.ok {
		return
	}
	sh := &b.retries.shards[c.key.shard()]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.m[c.key]
	if st == nil {
		return
	}
	for i, x := range st.attempts {
		if x == c.attempt {
			st.attempts = append(st.attempts[:i], st.attempts[i+1:]...)
			break
		}
	}
}

func budgetRefusal(cls WorkloadClass, budget int) *Refusal {
	return &Refusal{Reason: ReasonNonRetryableRequest, Code: CodeRetryBudget, Class: cls,
		Message: fmt.Sprintf("the request used its retries (%d for its workload class): it is not retried again", budget)}
}

// pruneRetries forgets the logical requests whose state expired; sh.mu is
// held. A request's retries all happen within a reservation's longest life
// (MaxTTL), so its state is kept that long after its first retry.
func (b *Broker) pruneRetries(sh *retryShard, now int64) {
	n := 0
	for n < len(sh.order) {
		k := sh.order[n]
		if st := sh.m[k]; st != nil && st.expires > now {
			break
		}
		delete(sh.m, k)
		n++
	}
	if n == 0 {
		return
	}
	sh.order = sh.order[n:]
	if len(sh.order) == 0 {
		sh.order = nil // give a burst's memory back
	}
}

// expireRetries prunes every retry shard; Expire calls it.
func (b *Broker) expireRetries(now int64) {
	for i := range b.retries.shards {
		sh := &b.retries.shards[i]
		sh.mu.Lock()
		b.pruneRetries(sh, now)
		sh.mu.Unlock()
	}
}

// RetryStates is how many logical requests' retry state the broker holds,
// for metrics and tests.
func (b *Broker) RetryStates() int {
	n := 0
	for i := range b.retries.shards {
		sh := &b.retries.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// withDeadline records the caller's deadline on the request, as the time
// left from now; 0 when the context has none.
func withDeadline(ctx context.Context, req *ReserveRequest) {
	if d, ok := ctx.Deadline(); ok {
		req.left = max(time.Until(d), time.Nanosecond)
	}
}

// deadlineRefusal turns the refusal of a retry by a paused route into a
// DEADLINE refusal when the caller's deadline comes before the pause ends:
// waiting for the route cannot help it, and it had better give up or go
// elsewhere at once. First attempts are left as they are: their call's
// deadline is that of the decision (Decide), not the request's.
func deadlineRefusal(req *ReserveRequest, ref *Refusal) {
	if req.Attempt <= 1 || req.left <= 0 || ref.Code != CodeProviderPaused {
		return
	}
	if req.left >= ref.RetryAfter {
		return
	}
	ref.Reason, ref.Code = ReasonDeadline, CodeDeadline
	ref.Message = fmt.Sprintf("provider capacity: the route is paused for longer than the request's deadline allows (%s left)",
		req.left.Round(time.Millisecond))
}
