package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options tune a Broker.
type Options struct {
	// Now is the clock. (Optional) Defaults to time.Now. Tests inject a fake
	// one so windows, daily resets and expiry need no sleeping.
	Now func() time.Time
	// DefaultTTL is how long a reservation lives when the request gives no
	// TTL. (Optional) Defaults to 2m: longer than nearly every call, short
	// enough that an edge that died releases its concurrency soon.
	DefaultTTL time.Duration
	// MaxTTL caps a requested TTL. (Optional) Defaults to 15m. It bounds how
	// long learning mode must last after a failover (see SetConservative).
	MaxTTL time.Duration
	// ConservativeFraction is the share of each bucket's limit that may be
	// in use while in learning mode. (Optional) Defaults to 0.5.
	ConservativeFraction float64
	// RefundOnExpiry gives an expired reservation's tokens, requests and
	// spend back to their buckets. (Optional) Defaults to false: an abandoned
	// reservation may well have been dispatched (the edge died after sending),
	// so its estimate is kept as consumed; only concurrency is released.
	RefundOnExpiry bool
	// MaxPause caps how long a provider's Retry-After or reset can pause a
	// route, so one bogus header cannot bench an endpoint for days.
	// (Optional) Defaults to 10m.
	MaxPause time.Duration
	// MaxJitter caps the random delay added to a pause. (Optional) Defaults to 1s.
	MaxJitter time.Duration
	// JitterFraction is the largest jitter as a share of the pause. (Optional)
	// Defaults to 0.1.
	JitterFraction float64
	// BackoffBase is the first pause after a 429 without Retry-After, doubled
	// for each further 429 in a row. (Optional) Defaults to 1s.
	BackoffBase time.Duration
	// BackoffMax caps that back-off. (Optional) Defaults to 30s.
	BackoffMax time.Duration
	// ConcurrencyRetry is the retry_after of a concurrency refusal, whose
	// bucket frees when some call ends, which nothing predicts. (Optional)
	// Defaults to 1s.
	ConcurrencyRetry time.Duration
	// Tombstone is how long a closed reservation is remembered: a
	// reconciled one, so a reconciliation delivered twice is recognised,
	// and an expired one with its charges, so its late reconciliation
	// (a stream that outlived it) still charges the real usage. (Optional)
	// Defaults to MaxTTL.
	Tombstone time.Duration
	// Correction tunes estimate correction.
	Correction CorrectionOptions
	// DisableCorrection makes Reserve reserve the estimate as given.
	// (Optional) Defaults to false: Reserve applies [Broker.Correct].
	DisableCorrection bool
	// Rand returns a uniform number in [0, 1) for jitter. (Optional)
	// Defaults to math/rand/v2's Float64.
	Rand func() float64
}

func (o *Options) defaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.DefaultTTL <= 0 {
		o.DefaultTTL = 2 * time.Minute
	}
	if o.MaxTTL <= 0 {
		o.MaxTTL = 15 * time.Minute
	}
	if o.DefaultTTL > o.MaxTTL {
		o.DefaultTTL = o.MaxTTL
	}
	if o.Tombstone <= 0 {
		o.Tombstone = o.MaxTTL
	}
	if !(o.ConservativeFraction > 0 && o.ConservativeFraction <= 1) {
		o.ConservativeFraction = 0.5
	}
	if o.MaxPause <= 0 {
		o.MaxPause = 10 * time.Minute
	}
	if o.MaxJitter <= 0 {
		o.MaxJitter = time.Second
	}
	if !(o.JitterFraction > 0 && o.JitterFraction <= 1) {
		o.JitterFraction = 0.1
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = time.Second
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 30 * time.Second
	}
	if o.ConcurrencyRetry <= 0 {
		o.ConcurrencyRetry = time.Second
	}
	if o.Rand == nil {
		o.Rand = mrand.Float64
	}
	o.Correction.defaults()
}

// Broker is the in-memory rate-limit broker. It is safe for concurrent use.
type Broker struct {
	opts Options

	// tab is the bucket set, replaced whole (copy on write) by Reconfigure,
	// Restore and the rare learned bucket or new route, so the hot path reads
	// it without a lock.
	tab   atomic.Pointer[table]
	cfgMu sync.Mutex // serialises table replacement and Snapshot/Restore
	idx   atomic.Uint32

	seq atomic.Uint64 // spreads reservations over the shards

	consUntil atomic.Int64 // learning mode ends, Unix ns

	// granted is the longest TTL reserved since New or the last Restore, ns.
	granted atomic.Int64
	// prevGranted and prevLearn are what the restored snapshot said of its
	// owner: the longest TTL it granted (-1 when its format did not say) and
	// when its own learning mode ended (Unix ns).
	prevGranted, prevLearn atomic.Int64
	corr                   sync.Map // corrKey → *correction

	shards [nShards]shard
}

// New returns a broker with every bucket full.
func New(cfg Config, o Options) (*Broker, error) {
	o.defaults()
	ds, err := defs(cfg.Buckets)
	if err != nil {
		return nil, fmt.Errorf("broker config: %w", err)
	}
	b := &Broker{opts: o}
	b.prevGranted.Store(-1)
	for i := range b.shards {
		b.shards[i].init()
	}
	now := b.nowNS()
	bs := make([]*bucket, 0, len(ds))
	for _, d := range ds {
		bs = append(bs, newBucket(d, b.idx.Add(1), now))
	}
	b.tab.Store(buildTable(bs, sortRoutes(cfg.Routes), nil))
	return b, nil
}

func (b *Broker) nowNS() int64 { return b.opts.Now().UnixNano() }

// MaxTTL is the longest any reservation of this broker may live.
func (b *Broker) MaxTTL() time.Duration { return b.opts.MaxTTL }

// noteTTL records ttl as granted if it is the longest yet.
func (b *Broker) noteTTL(ttl time.Duration) {
	for {
		cur := b.granted.Load()
		if int64(ttl) <= cur || b.granted.CompareAndSwap(cur, int64(ttl)) {
			return
		}
	}
}

// LearningUntil is when learning mode may end for a new owner that restored
// a snapshot at now after an unclean stop: once every reservation the old
// owner could have granted after its last snapshot has expired. Those were
// granted before now and live at most the longest TTL the old owner granted
// (recorded in the snapshot; at least DefaultTTL, and MaxTTL for a snapshot
// that does not record it); and learning mode never ends before the old
// owner's own did, for what its predecessor may have granted.
func (b *Broker) LearningUntil(now time.Time) time.Time {
	ttl := time.Duration(b.prevGranted.Load())
	if ttl < 0 {
		ttl = b.opts.MaxTTL
	}
	until := now.Add(min(max(ttl, b.opts.DefaultTTL), b.opts.MaxTTL)).UnixNano()
	return time.Unix(0, max(until, b.prevLearn.Load())).UTC()
}

// SetConservative turns learning mode on until until (a zero time turns it
// off). In learning mode a bucket admits only while, after the charge, at
// least (1-ConservativeFraction) of its limit stays free — though never so
// much that a bucket counted in units cannot admit one unit: a new owner
// that restored a snapshot does not know what the old owner granted after
// it, and the held-back part absorbs that. The owner calls it after Restore
// with LearningUntil.
func (b *Broker) SetConservative(until time.Time) {
	if until.IsZero() {
		b.consUntil.Store(0)
		return
	}
	b.consUntil.Store(until.UnixNano())
}

// hold is the share of each limit held back now: 0, or 1-fraction in
// learning mode.
func (b *Broker) hold(now int64) float64 {
	if now < b.consUntil.Load() {
		return 1 - b.opts.ConservativeFraction
	}
	return 0
}

// ReserveRequest asks for capacity for one dispatch.
type ReserveRequest struct {
	// RequestID is the request's id, recorded on the reservation.
	RequestID string
	// IdempotencyKey makes a retried Reserve return the same reservation
	// while it lives. Keys are scoped by tenant. (Optional)
	IdempotencyKey string
	// Identity is who the request is for.
	Identity Identity
	// Model is the canonical model id (keys estimate correction).
	Model string
	// EndpointID is the endpoint the dispatch will use.
	EndpointID string
	// Demand is the estimated consumption.
	Demand Demand
	// TTL is how long the reservation lives if never reconciled. (Optional)
	// Defaults to Options.DefaultTTL, capped at Options.MaxTTL.
	TTL time.Duration
}

// Reservation is capacity held for one dispatch. The broker never changes a
// Reservation it returned; callers must not change it either.
type Reservation struct {
	// ID identifies the reservation: unique across owners and unguessable
	// (128 random bits), so only whoever was given it can name it.
	ID string
	// RequestID is the request it is for.
	RequestID string
	// IdempotencyKey is the key it was created with.
	IdempotencyKey string
	// Identity is who it is for.
	Identity Identity
	// Model is the canonical model id.
	Model string
	// EndpointID is the endpoint.
	EndpointID string
	// Estimate is the demand as the caller estimated it.
	Estimate Demand
	// Demand is what was reserved: Estimate with estimate correction applied.
	Demand Demand
	// Charges lists every bucket charged, in the order they were checked.
	Charges []Charge
	// Created is when it was granted.
	Created time.Time
	// Expires is when it is released if not reconciled.
	Expires time.Time
}

// Charge is an amount taken from, or given back to, one bucket.
type Charge struct {
	// BucketID identifies the bucket.
	BucketID string
	// Scope is the bucket's scope.
	Scope Scope
	// Unit is the bucket's unit.
	Unit Unit
	// Amount is what was charged (in a Reservation) or given back (in a
	// Settlement; negative for an overrun charged).
	Amount float64
}

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

	need float64 // the refused amount, for the message
}

// Reserve reserves the request's demand in every bucket that applies to it,
// or in none: see the package documentation. A refusal is an answer, not an
// error; the error is for a cancelled context or an invalid demand. Exactly
// one of the reservation and the refusal is non-nil when err is nil.
func (b *Broker) Reserve(ctx context.Context, req ReserveRequest) (*Reservation, *Refusal, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if err := req.Demand.validate(); err != nil {
		return nil, nil, fmt.Errorf("reserve %s: %w", req.RequestID, err)
	}
	now := b.nowNS()
	res, ref := b.reserve(&req, now)
	if ref != nil && b.expiryDue(now) {
		// Lazy expiry: a refusal may be caused by abandoned reservations the
		// ticker has not swept yet.
		b.expire(now)
		res, ref = b.reserve(&req, now)
	}
	return res, ref, nil
}

// maxStack is how many buckets resolve on the stack; more spill to the heap.
const maxStack = 16

func (b *Broker) reserve(req *ReserveRequest, now int64) (*Reservation, *Refusal) {
	t := b.tab.Load()
	var arr [maxStack]*bucket
	bs, rt := t.resolve(&req.Identity, req.EndpointID, arr[:0])
	bs = sortBuckets(bs)
	est := req.Demand.normalized()
	dem := est
	if !b.opts.DisableCorrection {
		dem = b.Correct(req.Model, req.EndpointID, est)
	}
	seq := b.seq.Add(1)
	var ik idemKey
	si := int(seq % nShards)
	if req.IdempotencyKey != "" {
		ik = idemKey{tenant: req.Identity.TenantID, key: req.IdempotencyKey}
		si = ik.shard()
	}
	ttl := req.TTL
	if ttl <= 0 {
		ttl = b.opts.DefaultTTL
	}
	ttl = min(ttl, b.opts.MaxTTL)
	e := b.newEntry(req, est, dem, len(bs), now, ttl, si)
	e.idem = ik

	// Lock order: shard, then buckets in canonical order. Holding the shard
	// across the charge makes the charge and the record appear together, for
	// idempotency and for Snapshot's consistent cut.
	sh := &b.shards[si]
	sh.mu.Lock()
	if ik.key != "" {
		if old := sh.idem[ik]; old != nil {
			if old.expires > now {
				sh.mu.Unlock()
				return &old.res, nil
			}
			sh.remove(old)
			b.releaseExpired(sh, old, now)
		}
	}
	for _, bk := range bs {
		bk.mu.Lock()
	}
	hold := b.hold(now)
	var ref *Refusal
	pauseChecked := rt == nil // the pause sits just before the model_route buckets
	for _, bk := range bs {
		if !pauseChecked && bk.scope >= ScopeModelRoute {
			pauseChecked = true
			if ref = b.pauseRefusal(rt, now, req.Identity.Class); ref != nil {
				break
			}
		}
		bk.advance(now)
		if a := dem.amount(bk.unit); !bk.fits(a, hold) {
			ref = b.refusal(bk, a, hold, now, req.Identity.Class)
			break
		}
	}
	if ref == nil && !pauseChecked {
		ref = b.pauseRefusal(rt, now, req.Identity.Class)
	}
	if ref != nil {
		for _, bk := range bs {
			bk.mu.Unlock()
		}
		sh.mu.Unlock()
		ref.finish()
		return nil, ref
	}
	for i, bk := range bs {
		a := dem.amount(bk.unit)
		bk.take(a)
		e.recs[i] = charge{b: bk, amount: a, epoch: bk.epoch}
		e.res.Charges[i] = Charge{BucketID: bk.id, Scope: bk.scope, Unit: bk.unit, Amount: a}
		bk.mu.Unlock()
	}
	b.noteTTL(ttl) // before the insert, so a snapshot holding e knows its TTL
	sh.insert(e)
	sh.mu.Unlock()
	return &e.res, nil
}

// inline is how many charges an entry holds without a second allocation:
// one bucket per scope plus a few extra units.
const inline = 10

type charge struct {
	b      *bucket
	amount float64
	epoch  int64
}

// entry is a live reservation with its bookkeeping.
type entry struct {
	res     Reservation
	recs    []charge
	expires int64
	ttl     int64 // what Extend extends it by, ns
	heapIdx int
	idem    idemKey
	chArr   [inline]Charge
	recArr  [inline]charge
}

func (b *Broker) newEntry(req *ReserveRequest, est, dem Demand, n int, now int64, ttl time.Duration, si int) *entry {
	e := &entry{expires: now + int64(ttl), ttl: int64(ttl)}
	e.res = Reservation{
		ID: newID(si), RequestID: req.RequestID, IdempotencyKey: req.IdempotencyKey,
		Identity: req.Identity, Model: req.Model, EndpointID: req.EndpointID,
		Estimate: est, Demand: dem,
		Created: time.Unix(0, now).UTC(), Expires: time.Unix(0, e.expires).UTC(),
	}
	if n <= inline {
		e.res.Charges = e.chArr[:n]
		e.recs = e.recArr[:n]
	} else {
		e.res.Charges = make([]Charge, n)
		e.recs = make([]charge, n)
	}
	return e
}

// Reservation ids. An id names its shard, so Reconcile finds the record
// without a global index, and is otherwise 128 bits from crypto/rand: holding
// one's own reservation ids tells nothing about anyone else's, so an id
// cannot be guessed, only learned from the broker.
//
// The current format is "s", the shard in 2 hex digits and 32 random hex
// digits. The previous one was "r", a 12-hex per-broker prefix, the shard in
// 2 hex digits and a 16-hex sequence number (31 characters); such ids may
// still come from a snapshot its owner wrote, and are still found.
const (
	idLen    = 1 + 2 + 32
	oldIDLen = 1 + 12 + 2 + 16
)

// newID returns a new reservation id in shard si.
func newID(si int) string {
	const digits = "0123456789abcdef"
	var rnd [16]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails
	var buf [idLen]byte
	buf[0] = 's'
	buf[1], buf[2] = digits[si>>4], digits[si&15]
	hex.Encode(buf[3:], rnd[:])
	return string(buf[:])
}

// shardOf parses the shard out of a reservation id, of either format.
func shardOf(id string) (int, bool) {
	var at int
	switch {
	case len(id) == idLen && id[0] == 's':
		at = 1
	case len(id) == oldIDLen && id[0] == 'r':
		at = 13
	default:
		return 0, false
	}
	hi, ok1 := unhex(id[at])
	lo, ok2 := unhex(id[at+1])
	si := hi<<4 | lo
	return si, ok1 && ok2 && si < nShards
}

func unhex(c byte) (int, bool) {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0'), true
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10, true
	}
	return 0, false
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
		r.need = amount
		return r
	case bk.rule == RuleDailyReset:
		r.Reason = ReasonNonRetryablePolicy
	default:
		r.Reason = ReasonRetryableCapacity
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

// finish writes the refusal's message.
func (r *Refusal) finish() {
	what := r.Scope.String() + " " + r.Unit.String()
	switch {
	case r.Scope.own() && r.Reason == ReasonNonRetryableRequest:
		r.Message = fmt.Sprintf("the request needs %g %s, more than the %s limit of %g can ever admit", r.need, r.Unit, what, r.Limit)
		return
	case r.Reason == ReasonNonRetryableRequest:
		r.Message = fmt.Sprintf("the request needs more %s than the %s capacity can ever admit", r.Unit, sharedName(r.Scope))
		return
	case r.Scope.own():
		r.Message = fmt.Sprintf("%s limit reached (%g remaining of %g)", what, r.Remaining, r.Limit)
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

func (b *Broker) pauseRefusal(rt *route, now int64, cls WorkloadClass) *Refusal {
	until := rt.pause.until.Load()
	if now >= until {
		return nil
	}
	return &Refusal{
		Reason: RefusalReason(rt.pause.reason.Load()), BucketID: "pause:" + rt.EndpointID,
		Scope: ScopeModelRoute, Unit: UnitRequests, Class: cls,
		Reset: time.Unix(0, until).UTC(), RetryAfter: time.Duration(until - now),
		Message: "provider capacity: the provider asked to pause this route",
	}
}

// ReconcileRequest closes a reservation with what really happened.
type ReconcileRequest struct {
	// ReservationID is the reservation to close.
	ReservationID string
	// Usage is the actual consumption.
	Usage Usage
	// Outcome is how the call ended.
	Outcome Outcome
	// Headers are the provider's rate-limit and Retry-After headers.
	Headers []Header
	// Allow is the caller's authorisation, checked against the
	// reservation's tenant before anything changes. (Optional) Nil allows
	// every tenant.
	Allow Allow
}

// Settlement is what Reconcile did.
type Settlement struct {
	// Reservation is the reservation closed.
	Reservation *Reservation
	// Released lists, per bucket charged, what was given back: reserved
	// minus actual, negative for an overrun charged, 0 where a fixed period
	// rolled over since the charge.
	Released []Charge
	// Headers are the provider headers as parsed.
	Headers ProviderHeaders
	// HeaderErr reports malformed headers, which were skipped.
	HeaderErr error
	// PausedUntil is the route's pause after this reconcile; zero if none.
	PausedUntil time.Time
	// Late is set when the reservation had expired: its concurrency was
	// released then, and the other buckets were settled to the actual
	// usage now.
	Late bool
}

// Reconcile replaces a reservation's estimates with the actual usage: every
// bucket gets back what was reserved and not used, or is charged the
// overrun; concurrency is released. The provider's headers then correct the
// route's buckets and may pause it.
//
// A reservation is reconciled once. One that expired recently is still
// reconciled (Settlement.Late): expiry released its concurrency, and its
// other buckets are settled to the actual usage now, so a call that outlived
// its reservation is charged what it used. A second reconcile of the same id
// returns an error matching ErrAlreadyReconciled (and ErrNotFound) and an
// unknown id one matching ErrNotFound; neither changes any bucket. A
// reservation (open or recently closed) of a tenant req.Allow refuses gets
// an error matching ErrForbidden and is left as it was.
func (b *Broker) Reconcile(ctx context.Context, req ReconcileRequest) (*Settlement, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := req.Usage.validate(); err != nil {
		return nil, fmt.Errorf("reconcile %s: %w", req.ReservationID, err)
	}
	si, ok := shardOf(req.ReservationID)
	if !ok {
		return nil, fmt.Errorf("reconcile %q: %w", req.ReservationID, ErrNotFound)
	}
	now := b.nowNS()
	sh := &b.shards[si]
	sh.mu.Lock()
	e := sh.byID[req.ReservationID]
	if e != nil && !req.Allow.allows(e.res.Identity.TenantID) {
		sh.mu.Unlock()
		return nil, fmt.Errorf("reconcile %s: %w", req.ReservationID, ErrForbidden)
	}
	if e != nil && e.expires <= now {
		// Expired but not swept yet: expire it as the sweep would have.
		sh.remove(e)
		b.releaseExpired(sh, e, now)
		e = nil
	}
	if e == nil {
		st, err := b.reconcileClosed(sh, &req, now)
		sh.mu.Unlock()
		if err != nil {
			return nil, err
		}
		st.Headers, st.PausedUntil, st.HeaderErr = b.applyHeaders(st.Reservation.EndpointID, req.Headers, req.Outcome, now)
		return st, nil
	}
	sh.remove(e)
	b.remember(sh, e, now, false)
	st := &Settlement{Reservation: &e.res, Released: make([]Charge, len(e.recs))}
	for i, c := range e.recs {
		delta := c.amount - req.Usage.actual(c.b.unit, c.amount)
		c.b.mu.Lock()
		c.b.advance(now)
		applied := c.b.settle(delta, c.epoch)
		c.b.mu.Unlock()
		st.Released[i] = Charge{BucketID: c.b.id, Scope: c.b.scope, Unit: c.b.unit, Amount: applied}
	}
	sh.mu.Unlock()
	if req.Outcome == OutcomeOK && req.Usage.Reported {
		b.observe(e.res.Model, e.res.EndpointID, e.res.Estimate, req.Usage)
	}
	st.Headers, st.PausedUntil, st.HeaderErr = b.applyHeaders(e.res.EndpointID, req.Headers, req.Outcome, now)
	return st, nil
}

// releaseExpired releases an expired entry: its concurrency always, the rest
// only with RefundOnExpiry; its charges are kept as a tombstone for a late
// reconciliation. The entry's shard lock is held.
func (b *Broker) releaseExpired(sh *shard, e *entry, now int64) {
	b.remember(sh, e, now, true)
	for _, c := range e.recs {
		if c.b.rule != RuleConcurrency && !b.opts.RefundOnExpiry {
			continue
		}
		c.b.mu.Lock()
		c.b.advance(now)
		c.b.settle(c.amount, c.epoch)
		c.b.mu.Unlock()
	}
}

// Expire releases every reservation whose TTL has passed at now and returns
// how many. The decider calls it from a ticker; Reserve and Reconcile also
// expire lazily. It costs O(shards + expired), not O(open reservations):
// each shard keeps its reservations in a min-heap by expiry.
func (b *Broker) Expire(now time.Time) int { return b.expire(now.UnixNano()) }

func (b *Broker) expire(now int64) int {
	n := 0
	for i := range b.shards {
		sh := &b.shards[i]
		if sh.next.Load() > now && now-sh.firstClosed.Load() < int64(b.opts.Tombstone) {
			continue
		}
		sh.mu.Lock()
		for len(sh.heap) > 0 && sh.heap[0].expires <= now {
			e := sh.heap[0]
			sh.remove(e)
			b.releaseExpired(sh, e, now)
			n++
		}
		b.pruneClosed(sh, now)
		sh.mu.Unlock()
	}
	return n
}

func (b *Broker) expiryDue(now int64) bool {
	for i := range b.shards {
		if b.shards[i].next.Load() <= now {
			return true
		}
	}
	return false
}

// Open returns how many reservations are open (not reconciled, not swept).
func (b *Broker) Open() int {
	n := 0
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		n += len(sh.byID)
		sh.mu.Unlock()
	}
	return n
}

// BucketStatus is one bucket as its owner may see it.
type BucketStatus struct {
	// Scope is the bucket's scope: api_key, app or tenant.
	Scope Scope
	// Unit is what it counts.
	Unit Unit
	// Window is its window (none for concurrency and ramp).
	Window Window
	// Rule is how it refills.
	Rule Rule
	// Source is where its limit comes from.
	Source Source
	// Limit is its limit now: capacity + burst, or a ramp's current limit.
	Limit float64
	// Burst is the part of Limit above the steady capacity.
	Burst float64
	// Remaining is what it can admit now.
	Remaining float64
	// Reset is when it is next full (token bucket) or resets (daily, ramp);
	// zero when full or unknown.
	Reset time.Time
}

// Limits returns the caller's own buckets (its API key, its app, its
// tenant) and nothing else: partner and provider buckets are shared, and
// their levels are other tenants' consumption.
func (b *Broker) Limits(id Identity) []BucketStatus {
	t := b.tab.Load()
	var arr [maxStack]*bucket
	bs, _ := t.resolve(&Identity{TenantID: id.TenantID, APIKeyID: id.APIKeyID, App: id.App, Environment: id.Environment}, "", arr[:0])
	bs = sortBuckets(bs)
	now := b.nowNS()
	out := make([]BucketStatus, 0, len(bs))
	for _, bk := range bs {
		if !bk.scope.own() {
			continue
		}
		bk.mu.Lock()
		bk.advance(now)
		s := BucketStatus{Scope: bk.scope, Unit: bk.unit, Window: bk.window, Rule: bk.rule, Source: bk.source,
			Limit: bk.limit(), Burst: bk.p.burst, Remaining: whole(bk.unit, bk.available())}
		if f := bk.full(now); f != 0 {
			s.Reset = time.Unix(0, f).UTC()
		}
		bk.mu.Unlock()
		out = append(out, s)
	}
	return out
}

// Reconfigure replaces the configured buckets and routes, for a catalog
// change. A bucket whose id is unchanged keeps its level (clamped to its new
// limit); a new bucket starts full; a removed one stops being charged, and
// open reservations still release into it harmlessly. Learned buckets and
// route pauses are kept.
func (b *Broker) Reconfigure(cfg Config) error {
	ds, err := defs(cfg.Buckets)
	if err != nil {
		return fmt.Errorf("broker config: %w", err)
	}
	b.cfgMu.Lock()
	defer b.cfgMu.Unlock()
	old := b.tab.Load()
	now := b.nowNS()
	bs := make([]*bucket, 0, len(ds))
	for _, d := range ds {
		if ob := old.byID[d.id]; ob != nil && ob.rule == d.rule && ob.source == d.source {
			ob.mu.Lock()
			ob.setParams(d, now)
			ob.mu.Unlock()
			bs = append(bs, ob)
			continue
		}
		bs = append(bs, newBucket(d, b.idx.Add(1), now))
	}
	for _, ob := range old.buckets {
		if ob.source == SourceLearned {
			bs = append(bs, ob)
		}
	}
	routes := slices.Clone(cfg.Routes)
	for _, r := range old.routeDefs {
		if r.dynamic {
			routes = append(routes, r.Route)
		}
	}
	b.tab.Store(buildTable(bs, sortRoutes(routes), old))
	return nil
}

// ikey finds the buckets of one scope instance without building a string.
type ikey struct {
	scope   Scope
	a, b, c string
}

func keyOf(scope Scope, key string) ikey {
	if scope == ScopeApp {
		parts := strings.SplitN(key, "/", 3)
		k := ikey{scope: scope, a: parts[0]}
		if len(parts) > 1 {
			k.b = parts[1]
		}
		if len(parts) > 2 {
			k.c = parts[2]
		}
		return k
	}
	return ikey{scope: scope, a: key}
}

// table is an immutable bucket set; see Broker.tab.
type table struct {
	buckets   []*bucket
	byID      map[string]*bucket
	index     map[ikey][]*bucket
	routes    map[string]*route
	routeDefs []routeDef
}

type routeDef struct {
	Route
	dynamic bool // created for an endpoint the configuration did not name
}

// route is an endpoint with its provider buckets, in lock order, and its
// pause.
type route struct {
	Route
	buckets []*bucket
	pause   *pause
}

// pause is a route's "paused until", set from Retry-After and friends.
type pause struct {
	until  atomic.Int64 // Unix ns
	reason atomic.Int32 // RefusalReason
	streak atomic.Int32 // 429s in a row without Retry-After, for back-off
}

func buildTable(bs []*bucket, routes []Route, old *table) *table {
	t := &table{buckets: bs, byID: make(map[string]*bucket, len(bs)), index: map[ikey][]*bucket{}, routes: map[string]*route{}}
	for _, bk := range bs {
		t.byID[bk.id] = bk
		k := keyOf(bk.scope, bk.key)
		t.index[k] = append(t.index[k], bk)
	}
	dynamic := map[string]bool{}
	if old != nil {
		for _, r := range old.routeDefs {
			dynamic[r.EndpointID] = r.dynamic
		}
	}
	for _, r := range routes {
		rt := &route{Route: r}
		rt.buckets = append(rt.buckets, t.index[ikey{scope: ScopeModelRoute, a: r.EndpointID}]...)
		rt.buckets = append(rt.buckets, t.index[ikey{scope: ScopeProviderWorkspace, a: r.Workspace}]...)
		rt.buckets = append(rt.buckets, t.index[ikey{scope: ScopeProviderProject, a: r.Project}]...)
		rt.buckets = sortBuckets(rt.buckets)
		if old != nil {
			if o := old.routes[r.EndpointID]; o != nil {
				rt.pause = o.pause
			}
		}
		if rt.pause == nil {
			rt.pause = &pause{}
		}
		t.routes[r.EndpointID] = rt
		t.routeDefs = append(t.routeDefs, routeDef{Route: r, dynamic: dynamic[r.EndpointID]})
	}
	return t
}

// resolve appends the buckets that apply to (id, endpoint) to dst and
// returns the endpoint's route, nil if the configuration does not name it.
// Six map lookups at most and no allocation while dst has room.
func (t *table) resolve(id *Identity, endpoint string, dst []*bucket) ([]*bucket, *route) {
	if id.APIKeyID != "" {
		dst = append(dst, t.index[ikey{scope: ScopeAPIKey, a: id.APIKeyID}]...)
	}
	if id.TenantID != "" {
		if id.App != "" {
			dst = append(dst, t.index[ikey{scope: ScopeApp, a: id.TenantID, b: id.App}]...)
			if id.Environment != "" {
				dst = append(dst, t.index[ikey{scope: ScopeApp, a: id.TenantID, b: id.App, c: id.Environment}]...)
			}
		}
		dst = append(dst, t.index[ikey{scope: ScopeTenant, a: id.TenantID}]...)
	}
	if id.Partner != "" {
		dst = append(dst, t.index[ikey{scope: ScopePartner, a: id.Partner}]...)
	}
	if endpoint == "" {
		return dst, nil
	}
	if rt := t.routes[endpoint]; rt != nil {
		return append(dst, rt.buckets...), rt
	}
	provider, _, _ := strings.Cut(endpoint, "/")
	dst = append(dst, t.index[ikey{scope: ScopeModelRoute, a: endpoint}]...)
	dst = append(dst, t.index[ikey{scope: ScopeProviderWorkspace, a: provider}]...)
	dst = append(dst, t.index[ikey{scope: ScopeProviderProject, a: provider}]...)
	return dst, nil
}

// ensureRoute returns the endpoint's route, adding a default one (so it can
// hold a pause) when the configuration did not name it.
func (b *Broker) ensureRoute(endpoint string) *route {
	if rt := b.tab.Load().routes[endpoint]; rt != nil {
		return rt
	}
	b.cfgMu.Lock()
	defer b.cfgMu.Unlock()
	old := b.tab.Load()
	if rt := old.routes[endpoint]; rt != nil {
		return rt
	}
	routes := make([]Route, 0, len(old.routeDefs)+1)
	for _, r := range old.routeDefs {
		routes = append(routes, r.Route)
	}
	nr := Route{EndpointID: endpoint}.withDefaults()
	routes = append(routes, nr)
	t := buildTable(old.buckets, sortRoutes(routes), old)
	for i := range t.routeDefs {
		if t.routeDefs[i].EndpointID == endpoint {
			t.routeDefs[i].dynamic = true
		}
	}
	b.tab.Store(t)
	return t.routes[endpoint]
}
