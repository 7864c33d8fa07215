package broker

import (
	"container/heap"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// queueConfig is the class contracts and tenant shares of one
// configuration, immutable, replaced whole by New and Reconfigure.
type queueConfig struct {
	classes map[WorkloadClass]ClassContract
	tenants map[string]TenantShare
}

func newQueueConfig(cfg Config) (*queueConfig, error) {
	qc := &queueConfig{classes: map[WorkloadClass]ClassContract{}, tenants: map[string]TenantShare{}}
	for i, c := range cfg.Classes {
		switch {
		case c.MaxWait < 0, c.MaxDepth < 0:
			return nil, fmt.Errorf("%w: classes[%d]: max wait and max depth must not be negative", ErrInvalid, i)
		case !finiteNonNeg(c.Weight):
			return nil, fmt.Errorf("%w: classes[%d]: weight must be a non-negative number", ErrInvalid, i)
		case c.Overload == OverloadFallback && c.FallbackModel == "":
			return nil, fmt.Errorf("%w: classes[%d]: overload fallback needs a fallback model", ErrInvalid, i)
		}
		cls := c.Class
		if cls == ClassUnspecified {
			cls = ClassInteractive
		}
		if _, dup := qc.classes[cls]; dup {
			return nil, fmt.Errorf("%w: classes[%d]: class %s given twice", ErrInvalid, i, className(cls))
		}
		c.Class = cls
		qc.classes[cls] = c
	}
	for i, t := range cfg.Tenants {
		switch {
		case !finiteNonNeg(t.Weight), !finiteNonNeg(t.Burst):
			return nil, fmt.Errorf("%w: tenants[%d]: weight and burst must be non-negative numbers", ErrInvalid, i)
		case t.Tenant == "":
			return nil, fmt.Errorf("%w: tenants[%d]: tenant id is empty", ErrInvalid, i)
		}
		qc.tenants[t.Tenant] = t
	}
	return qc, nil
}

// weight is a flow's fair-share weight: its tenant's weight times its
// class's, each 1 when unset.
func (qc *queueConfig) weight(k flowKey) float64 {
	w := 1.0
	if t, ok := qc.tenants[k.tenant]; ok && t.Weight > 0 {
		w = t.Weight
	}
	if c, ok := qc.classes[k.class]; ok && c.Weight > 0 {
		w *= c.Weight
	}
	return w
}

// burst is how many requests' worth of credit an idle tenant may bring
// back: its own Burst, else the broker's default.
func (qc *queueConfig) burst(tenant string, def float64) float64 {
	if t, ok := qc.tenants[tenant]; ok && t.Burst > 0 {
		return t.Burst
	}
	return def
}

// flowKey is one flow of the fair queue: a tenant's requests of one class.
type flowKey struct {
	class  WorkloadClass
	tenant string
}

// qflow is a tenant's waiting requests of one class, in arrival order, and
// its virtual finish time.
type qflow struct {
	key     flowKey
	entries []*qentry
	// vfin is the virtual finish time of the flow's last admitted request
	// (-Inf before the first).
	vfin float64

	// Per dispatch pass: the head's virtual start and finish, and the
	// buckets that refused its entries in this pass.
	start, fin float64
	blocked    []string
}

// qstate is where a queued request is.
type qstate uint8

const (
	qWaiting qstate = iota
	qAdmitted
	qRefused
	qCancelled
)

// qentry is one queued request. Every field but done is guarded by the
// queue's mutex; done is closed once state leaves qWaiting, after which
// res, ref and decision no longer change.
type qentry struct {
	req      ReserveRequest
	flow     *qflow
	idem     idemKey
	seq      uint64
	cost     float64
	enq      int64 // when it was queued, ns
	deadline int64 // when it is refused with queue_deadline, ns
	// retryAt is when a retry may succeed by the clock alone (a refill, a
	// period, a pause ending): the dispatch timer aims at the earliest.
	retryAt int64
	// blockedBy is the bucket that refused its last try, counted in
	// fairQueue.blocked while it waits.
	blockedBy string
	last      *Refusal // the refusal of its last try
	tried     uint64   // the pass that last tried it
	// bks is the buckets the request needs in table tab, cached.
	bks     []*bucket
	tab     *table
	waiters int // callers waiting on it (a re-attach adds one)
	// orphaned is, for a request whose last caller left, until when it
	// keeps its place for a caller re-attaching with its idempotency key
	// (Options.QueueReattach); 0 while someone waits on it.
	orphaned int64
	fallback string // the contract's fallback model, if it degrades
	state    qstate
	done     chan struct{}
	res      *Reservation
	ref      *Refusal
	decision QueueDecision
}

// fairQueue holds every class's waiting requests and shares freed capacity
// between them by weighted fair queueing.
//
// Lock order: pumpMu → mu → (shard → buckets, through reserve and
// expire). Nothing that holds a shard or bucket lock, nor the table mutex,
// ever takes mu or pumpMu: Reconcile, Expire and Reconfigure wake the queue
// only after releasing theirs.
type fairQueue struct {
	// pumpMu makes dispatch passes one at a time; again asks the pass
	// running to make one more (a waker that found pumpMu taken).
	pumpMu sync.Mutex
	again  atomic.Bool
	// n is how many requests wait, read without a lock so the paths with
	// nothing queued cost one atomic load.
	n atomic.Int64
	// next is the earliest retryAt or deadline of a waiting request (Unix
	// ns; MaxInt64 when none), for the dispatch timer.
	next atomic.Int64
	kick chan struct{} // wakes the timer goroutine early

	mu    sync.Mutex
	flows map[flowKey]*qflow
	idem  map[idemKey]*qentry
	// blocked counts the waiting requests whose last refusal came from
	// each bucket (or "pause:<endpoint>"): an arrival that needs one of
	// them joins the queue instead of taking capacity they wait for.
	blocked map[string]int
	depth   map[WorkloadClass]int
	vt      float64 // virtual time: the start tag of the latest admission
	// soonest is no later than the earliest deadline of a waiting request
	// (Unix ns), so a pass with none due skips the scan for them.
	soonest int64
	seq     uint64
	pass    uint64
	running bool // the timer goroutine is running
	stats   QueueStats
	scratch flowHeap
}

func (q *fairQueue) init() {
	q.flows = map[flowKey]*qflow{}
	q.idem = map[idemKey]*qentry{}
	q.blocked = map[string]int{}
	q.depth = map[WorkloadClass]int{}
	q.kick = make(chan struct{}, 1)
	q.next.Store(math.MaxInt64)
	q.soonest = math.MaxInt64
}

// QueueStats counts what the admission queues did since the broker
// started, for metrics.
type QueueStats struct {
	// Queued is how many requests joined a queue (a re-attach is not
	// counted again; one restored from a snapshot is). Every one of them
	// leaves once, counted in one of the counters below but Full.
	Queued uint64
	// Admitted is how many queued requests were admitted.
	Admitted uint64
	// Deadline is how many were refused at their deadline (queue_deadline).
	Deadline uint64
	// Full is how many were refused because their class's queue was full.
	Full uint64
	// Cancelled is how many left because every caller waiting on them went
	// away.
	Cancelled uint64
	// Refused is how many were refused while queued for a reason waiting
	// cannot fix (the demand no longer fits the limits, a quota used up).
	Refused uint64
}

// newQueueID returns a queued entry's id: "q" and 32 random hex digits,
// unguessable like a reservation id.
func newQueueID() string {
	var rnd [16]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails
	return "q" + hex.EncodeToString(rnd[:])
}

// lookup is what an arriving request finds in the queue: the waiting
// entry of its idempotency key, which it joins (one more waiter), or else
// whether it needs a bucket some waiting request was refused by, in which
// case it must queue behind them rather than take what they wait for.
func (q *fairQueue) lookup(t *table, req *ReserveRequest) (*qentry, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if req.IdempotencyKey != "" {
		if e := q.idem[idemKey{tenant: req.Identity.TenantID, key: req.IdempotencyKey}]; e != nil {
			e.attach()
			return e, false
		}
	}
	if len(q.blocked) == 0 {
		return nil, false
	}
	var arr [maxStack]*bucket
	bs, _ := t.resolve(&req.Identity, req.EndpointID, arr[:0])
	for _, bk := range bs {
		if q.blocked[bk.id] > 0 {
			return nil, true
		}
	}
	return nil, req.EndpointID != "" && q.blocked[pauseID(req.EndpointID)] > 0
}

func pauseID(endpoint string) string { return "pause:" + endpoint }

// buckets returns the buckets e's request needs in table t, resolved once
// per table. mu is held.
func (e *qentry) buckets(t *table) []*bucket {
	if e.tab != t {
		e.bks, _ = t.resolve(&e.req.Identity, e.req.EndpointID, e.bks[:0])
		e.tab = t
	}
	return e.bks
}

// touches reports whether e needs one of the buckets (or route pauses)
// named by ids. mu is held.
func (e *qentry) touches(t *table, ids []string) bool {
	bs := e.buckets(t)
	for _, id := range ids {
		if ep, ok := strings.CutPrefix(id, "pause:"); ok {
			if ep == e.req.EndpointID {
				return true
			}
			continue
		}
		for _, bk := range bs {
			if bk.id == id {
				return true
			}
		}
	}
	return false
}

// appendBucketIDs appends the ids of the buckets e needs, and its route's
// pause, to ids. mu is held.
func (e *qentry) appendBucketIDs(ids []string, t *table) []string {
	for _, bk := range e.buckets(t) {
		ids = append(ids, bk.id)
	}
	if e.req.EndpointID != "" {
		ids = append(ids, pauseID(e.req.EndpointID))
	}
	return ids
}

// enqueue adds req to its class's queue, or joins the waiting entry of
// its idempotency key. It returns nil when the class's queue is full. ref
// is the refusal that sent it here, nil for an arrival queued without a
// try. mu is held.
func (q *fairQueue) enqueue(b *Broker, req *ReserveRequest, cc ClassContract, ref *Refusal, wait time.Duration, now int64) *qentry {
	ik := idemKey{tenant: req.Identity.TenantID, key: req.IdempotencyKey}
	if ik.key != "" {
		if e := q.idem[ik]; e != nil {
			e.attach()
			return e
		}
	}
	if q.depth[cc.Class] >= cc.MaxDepth {
		q.stats.Full++
		return nil
	}
	k := flowKey{class: cc.Class, tenant: req.Identity.TenantID}
	f := q.flows[k]
	if f == nil {
		f = &qflow{key: k, vfin: math.Inf(-1)}
		q.flows[k] = f
	}
	q.seq++
	e := &qentry{
		req: *req, flow: f, idem: ik, seq: q.seq, cost: float64(req.Demand.normalized().Requests),
		enq: now, deadline: now + int64(wait), retryAt: now, waiters: 1, done: make(chan struct{}),
	}
	if cc.Overload == OverloadFallback {
		e.fallback = cc.FallbackModel
	}
	e.decision = QueueDecision{ID: newQueueID(), Class: cc.Class, Position: len(f.entries)}
	if ref != nil {
		// The wait is known, and can be kept, only when the clock alone
		// frees the capacity (a refill, a period, a pause), nothing of the
		// same tenant is ahead and no other waiting request needs it.
		if ref.Unit != UnitConcurrentRequests && e.decision.Position == 0 && q.blocked[ref.BucketID] == 0 && ref.RetryAfter <= wait {
			e.decision.EstimatedWait = ref.RetryAfter
		}
		q.note(e, ref, now, b.opts.ConcurrencyRetry)
	}
	f.entries = append(f.entries, e)
	if ik.key != "" {
		q.idem[ik] = e
	}
	q.depth[cc.Class]++
	q.n.Add(1)
	q.stats.Queued++
	q.next.Store(min(q.next.Load(), e.retryAt, e.deadline))
	q.soonest = min(q.soonest, e.deadline)
	return e
}

// attach adds a caller waiting on e. mu is held.
func (e *qentry) attach() {
	e.waiters++
	e.orphaned = 0
}

// end is when e leaves the queue unless admitted first: its deadline, or
// the end of its orphaned spell.
func (e *qentry) end() int64 {
	if e.orphaned != 0 {
		return min(e.deadline, e.orphaned)
	}
	return e.deadline
}

// note records ref as e's latest refusal. mu is held.
func (q *fairQueue) note(e *qentry, ref *Refusal, now int64, concurrencyRetry time.Duration) {
	q.unblock(e)
	e.last = ref
	e.blockedBy = ref.BucketID
	q.blocked[e.blockedBy]++
	if ref.Unit == UnitConcurrentRequests {
		// Frees when some call ends, which wakes the queue; poll as well.
		e.retryAt = now + int64(concurrencyRetry)
	} else {
		e.retryAt = now + int64(ref.RetryAfter)
	}
}

func (q *fairQueue) unblock(e *qentry) {
	if e.blockedBy == "" {
		return
	}
	if q.blocked[e.blockedBy]--; q.blocked[e.blockedBy] <= 0 {
		delete(q.blocked, e.blockedBy)
	}
	e.blockedBy = ""
}

// remove takes e out of the queue and resolves it: its callers are woken
// with res or ref. mu is held.
func (q *fairQueue) remove(e *qentry, st qstate, res *Reservation, ref *Refusal, now int64) {
	f := e.flow
	if i := slices.Index(f.entries, e); i >= 0 {
		f.entries = slices.Delete(f.entries, i, i+1)
	}
	q.unblock(e)
	if e.idem.key != "" && q.idem[e.idem] == e {
		delete(q.idem, e.idem)
	}
	q.depth[f.key.class]--
	q.n.Add(-1)
	e.state, e.res, e.ref = st, res, ref
	e.decision.Waited = time.Duration(max(now-e.enq, 0))
	close(e.done)
	if q.n.Load() == 0 {
		q.next.Store(math.MaxInt64)
		q.signal()
	}
}

// signal wakes the timer goroutine without blocking.
func (q *fairQueue) signal() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// pump runs dispatch passes at now: the caller's own when it gets pumpMu,
// else (wait false) it asks the pass running to make one more and returns.
func (b *Broker) pump(now int64, wait bool) {
	q := &b.q
	if wait {
		q.pumpMu.Lock()
	} else {
		q.again.Store(true)
		if !q.pumpMu.TryLock() {
			return // the holder checks again after unlocking
		}
	}
	for {
		q.again.Store(false)
		q.mu.Lock()
		b.pass(now)
		q.mu.Unlock()
		if q.again.Load() {
			now = max(now, b.nowNS())
			continue
		}
		q.pumpMu.Unlock()
		if !q.again.Load() || !q.pumpMu.TryLock() {
			return
		}
		now = max(now, b.nowNS())
	}
}

// wake runs a dispatch pass now if anything waits: capacity may have freed.
func (b *Broker) wake() {
	if b.q.n.Load() > 0 {
		b.pump(b.nowNS(), false)
	}
}

// lookahead is how many of one flow's waiting requests a pass may try
// after its head was refused: later requests of the same tenant that need
// other buckets are not held up by the head, and a pass stays bounded.
const lookahead = 16

// pass is one dispatch pass at now: it refuses the requests whose
// deadline has passed, then offers capacity to the flows in order of
// virtual finish time, the smallest first, until no flow has a request
// that fits. mu is held (and pumpMu).
//
// A flow's head has virtual start S = max(vfin, vt − burst/w) and finish
// F = S + cost/w, w its weight: a flow that stays busy advances by cost/w
// per admission, so busy flows are admitted in proportion to their
// weights; one that comes back from idle starts at most burst requests'
// worth ahead of the virtual time, so no idle spell, and no time spent
// blocked by its own limits, banks more credit than its burst. When a
// flow's request does not fit, the pass tries the flow's later requests
// that need none of the buckets that refused (at most lookahead), then
// moves on to the next flow: a request that cannot be admitted blocks
// neither other tenants nor its own tenant's requests for other buckets,
// and a later request of the same tenant never takes a bucket an earlier
// one is waiting for. Capacity nobody else waits for goes to whoever fits,
// however far ahead of its share: the queue is work-conserving.
func (b *Broker) pass(now int64) {
	q := &b.q
	q.pass++
	// Past their deadline: refused. At it: one last try first.
	b.refuseLate(now, false)
	if q.n.Load() > 0 {
		if b.expiryDue(now) {
			b.expire(now)
		}
		b.dispatch(now)
	}
	b.refuseLate(now, true)
	next, soonest := int64(math.MaxInt64), int64(math.MaxInt64)
	qc := b.qcfg.Load()
	for k, f := range q.flows {
		if len(f.entries) == 0 {
			// Forget an idle flow once it has no lag left to remember.
			if f.vfin <= q.vt-qc.burst(k.tenant, b.opts.FairBurst)/qc.weight(k) {
				delete(q.flows, k)
			}
			continue
		}
		for _, e := range f.entries {
			// A retry time already past is of a request this pass did not
			// try (one ahead of it waits for the same bucket, with its own
			// retry time) or could not name one: no reason to wake early.
			soonest = min(soonest, e.end())
			next = min(next, e.end())
			if e.retryAt > now {
				next = min(next, e.retryAt)
			}
		}
	}
	q.next.Store(next)
	q.soonest = soonest
}

// refuseLate refuses with queue_deadline the requests whose deadline is
// before now, or (at too) not after it, and drops those orphaned that long
// (cancelled). mu is held.
func (b *Broker) refuseLate(now int64, at bool) {
	q := &b.q
	if q.soonest > now || !at && q.soonest == now {
		return
	}
	for _, f := range q.flows {
		for i := 0; i < len(f.entries); {
			if e := f.entries[i]; e.end() < now || at && e.end() == now {
				if e.waiters == 0 {
					q.stats.Cancelled++
					q.remove(e, qCancelled, nil, nil, now)
				} else {
					q.stats.Deadline++
					q.remove(e, qRefused, nil, b.deadlineRefusal(e, now), now)
				}
				continue
			}
			i++
		}
	}
}

func (b *Broker) dispatch(now int64) {
	q := &b.q
	t := b.tab.Load()
	qc := b.qcfg.Load()
	act := flowHeap(q.scratch[:0])
	for _, f := range q.flows {
		if len(f.entries) > 0 {
			f.blocked = f.blocked[:0]
			b.tag(f, qc)
			act = append(act, f)
		}
	}
	heap.Init(&act)
	for len(act) > 0 {
		// The flow with the smallest virtual finish: served, then back in
		// with its next head's tags if it admitted one and has more.
		f := act[0]
		if b.serve(f, t, qc, now) && len(f.entries) > 0 {
			b.tag(f, qc)
			heap.Fix(&act, 0)
			continue
		}
		heap.Pop(&act)
	}
	q.scratch = act[:0]
}

// flowHeap orders flows by their head's virtual finish, then by arrival.
type flowHeap []*qflow

func (h flowHeap) Len() int { return len(h) }
func (h flowHeap) Less(i, j int) bool {
	a, c := h[i], h[j]
	return a.fin < c.fin || a.fin == c.fin && a.entries[0].seq < c.entries[0].seq
}
func (h flowHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *flowHeap) Push(x any)   { *h = append(*h, x.(*qflow)) }
func (h *flowHeap) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return f
}

// tag computes the virtual start and finish of f's head.
func (b *Broker) tag(f *qflow, qc *queueConfig) {
	w := qc.weight(f.key)
	f.start = math.Max(f.vfin, b.q.vt-qc.burst(f.key.tenant, b.opts.FairBurst)/w)
	f.fin = f.start + f.entries[0].cost/w
}

// serve tries f's waiting requests in order and admits the first that
// fits, skipping those that need a bucket that refused an earlier one in
// this pass; it reports whether it admitted one.
func (b *Broker) serve(f *qflow, t *table, qc *queueConfig, now int64) bool {
	q := &b.q
	for i := 0; i < len(f.entries) && i < lookahead; {
		e := f.entries[i]
		if e.waiters == 0 {
			// Orphaned: nobody would receive its reservation, so it is
			// not tried, but it keeps its place: its tenant's later
			// requests that need one of its buckets wait behind it.
			f.blocked = e.appendBucketIDs(f.blocked, t)
			i++
			continue
		}
		if e.tried == q.pass || len(f.blocked) > 0 && e.touches(t, f.blocked) {
			i++
			continue
		}
		e.tried = q.pass
		res, ref := b.try(t, &e.req, now)
		if res != nil {
			w := qc.weight(f.key)
			f.vfin = f.start + e.cost/w
			q.vt = math.Max(q.vt, f.start)
			q.stats.Admitted++
			q.remove(e, qAdmitted, res, nil, now)
			return true
		}
		if ref.Reason != ReasonRetryableCapacity && ref.Reason != ReasonRetryableOverload {
			// Waiting cannot fix it: a quota used up, a limit lowered
			// below the demand.
			ref.finish()
			q.stats.Refused++
			q.remove(e, qRefused, nil, ref, now)
			continue
		}
		if e.last == nil && !mayComeBack(ref, time.Duration(e.deadline-now)) {
			// Queued without a try, and the capacity cannot come back in
			// time: refused at once, as it would have been unqueued.
			ref.finish()
			q.stats.Refused++
			q.remove(e, qRefused, nil, withFallback(ref, e.fallback), now)
			continue
		}
		q.note(e, ref, now, b.opts.ConcurrencyRetry)
		f.blocked = append(f.blocked, ref.BucketID)
		i++
	}
	return false
}

// try reserves req for a pass. Most tries of a backlog are refused, so a
// request without an idempotency key is first checked without building a
// reservation (its buckets locked, checked, unlocked), and reserved only
// if it fits; one with a key is reserved at once, since its reservation
// may exist already (a snapshot caught it both queued and admitted).
func (b *Broker) try(t *table, req *ReserveRequest, now int64) (*Reservation, *Refusal) {
	if req.IdempotencyKey == "" {
		if ref := b.probe(t, req, now); ref != nil {
			return nil, ref // its message is written if it is ever shown
		}
	}
	return b.reserve(req, now)
}

// probe checks whether req fits every bucket it needs now, without
// charging any: nil, or the refusal of the first that does not. It takes
// the bucket locks in canonical order, as reserve does.
func (b *Broker) probe(t *table, req *ReserveRequest, now int64) *Refusal {
	var arr [maxStack]*bucket
	bs, rt := t.resolve(&req.Identity, req.EndpointID, arr[:0])
	bs = sortBuckets(bs)
	dem := req.Demand.normalized()
	if !b.opts.DisableCorrection {
		dem = b.Correct(req.Model, req.EndpointID, dem)
	}
	for _, bk := range bs {
		bk.mu.Lock()
	}
	ref := b.check(bs, rt, &dem, now, &req.Identity)
	for _, bk := range bs {
		bk.mu.Unlock()
	}
	return ref
}

// mayComeBack reports whether a refused demand may fit within wait: a
// retryable refusal whose retry_after is within it, or a concurrency
// refusal, whose slot frees when some call ends, which nothing predicts.
func mayComeBack(ref *Refusal, wait time.Duration) bool {
	if ref.Reason != ReasonRetryableCapacity && ref.Reason != ReasonRetryableOverload {
		return false
	}
	return ref.Unit == UnitConcurrentRequests || ref.RetryAfter <= wait
}

// Degrades reports whether a refusal of reason by a bucket of scope may
// name its class's fallback model (when the class's overload action is
// fallback), for the caller to serve the request with that model instead:
// one for capacity on the provider's side that waiting could have fixed
// (capacity, an overload, a passed queue deadline). A refusal by the
// caller's own limits (API key, app, tenant, partner) does not, since
// another model counts against the same limits, nor does one that cannot
// be retried (a daily quota, a request too large). It is the one rule for
// a fallback model: the broker's queue and the decider's Decide and
// Reserve answers both follow it.
func Degrades(reason RefusalReason, scope Scope) bool {
	if scope.callers() {
		return false
	}
	switch reason {
	case ReasonRetryableCapacity, ReasonRetryableOverload, ReasonDeadline:
		return true
	}
	return false
}

// withFallback returns ref naming the fallback model, when the class
// degrades instead of refusing and the refusal Degrades.
func withFallback(ref *Refusal, model string) *Refusal {
	if model == "" || !Degrades(ref.Reason, ref.Scope) {
		return ref
	}
	out := *ref
	out.FallbackModel = model
	out.Message += "; try " + model
	return &out
}

// deadlineRefusal is the refusal of a request still waiting at its
// deadline: reason DEADLINE, code queue_deadline, the refusing bucket of
// its last try, and when that bucket said it might have room.
func (b *Broker) deadlineRefusal(e *qentry, now int64) *Refusal {
	var r Refusal
	if e.last != nil {
		e.last.finish()
		r = *e.last
	} else {
		r = Refusal{Class: e.req.Identity.Class}
	}
	r.Reason, r.Code = ReasonDeadline, CodeQueueDeadline
	r.RetryAfter, r.Reset = 0, time.Time{}
	if e.retryAt > now {
		r.RetryAfter = time.Duration(e.retryAt - now)
		r.Reset = time.Unix(0, e.retryAt).UTC()
	} else {
		// The capacity it waited for came but went to others: when it
		// comes again nothing predicts, as for a concurrency refusal.
		r.RetryAfter = b.opts.ConcurrencyRetry
	}
	waited := time.Duration(now - e.enq).Round(time.Millisecond)
	r.Message = fmt.Sprintf("no capacity came within the %s queue's deadline (waited %s)", className(e.flow.key.class), waited)
	if e.last != nil {
		r.Message += ": " + e.last.Message
	}
	return withFallback(&r, e.fallback)
}

// queueFullRefusal is the refusal of a request whose class's queue is
// full: RETRYABLE_OVERLOAD, code queue_full, retry after the later of the
// bucket's own retry_after and the class's deadline, by when every request
// waiting now has left. (The deadline of the oldest one would be sooner,
// but it is another tenant's.)
func queueFullRefusal(ref *Refusal, cc ClassContract, now int64) *Refusal {
	out := *ref
	out.Reason, out.Code = ReasonRetryableOverload, CodeQueueFull
	out.RetryAfter = max(out.RetryAfter, cc.MaxWait)
	cls, fallback := cc.Class, fallbackOf(cc)
	out.Reset = time.Unix(0, now+int64(out.RetryAfter)).UTC()
	out.Message = fmt.Sprintf("the %s queue is full; retry after %s", className(cls), out.RetryAfter.Round(time.Millisecond))
	return withFallback(&out, fallback)
}

// runQueue is the dispatch timer: while requests wait it runs a pass at
// the earliest time one of them may fit by the clock alone (a refill, a
// period, a pause ending) or reaches its deadline, and at least every
// maxTick; it returns once the queue is empty. ReserveWait starts it.
func (b *Broker) runQueue() {
	q := &b.q
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		if q.n.Load() == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		d := time.Duration(q.next.Load() - b.nowNS())
		timer.Reset(min(max(d, minTick), maxTick))
		select {
		case <-timer.C:
		case <-q.kick:
			timer.Stop()
		}
		b.pump(b.nowNS(), true)
	}
}

// minTick and maxTick bound the dispatch timer's sleep: not a busy loop
// when a retry time is already past, and a pass at least once a second
// whatever the clock says.
const (
	minTick = time.Millisecond
	maxTick = time.Second
)
