package broker

import (
	"math"
	mrand "math/rand/v2"
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
	// spend back to the buckets whose limit does not say otherwise
	// (catalog refund_on_expiry, Spec.RefundOnExpiry). (Optional) Defaults to false: an abandoned
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
	// FairBurst is the burst credit of a tenant whose share does not set
	// one, in requests: how far ahead of the busy tenants one that comes
	// back from idle may go. (Optional) Defaults to 1.
	FairBurst float64
	// ManualPump leaves dispatching of queued requests to whoever calls
	// [Broker.Pump] (and to Reconcile, Expire and Reconfigure). (Optional)
	// Defaults to false: while requests wait, a goroutine runs a pass when
	// the earliest of them may fit, at least once a second, and ends when
	// the queue is empty. Tests on a fake clock set it.
	ManualPump bool
	// QueueReattach is how long a queued request with an idempotency key
	// keeps its place after its last caller went away (a broken call, or
	// a failover: Restore brings such requests back this way), for the
	// caller's retry to re-attach to it. It is not admitted meanwhile, and
	// its tenant's later requests that need one of its buckets wait behind
	// it. (Optional) Defaults to 0: the request leaves the queue with its
	// last caller, and Restore brings back none.
	QueueReattach time.Duration
	// MaxStateBytes bounds the broker's snapshot, in bytes: a reservation
	// that would take the open reservations past what the limit leaves
	// (less the buckets, routes and corrections of the last snapshot, and
	// 64 KiB for queued requests) is refused, code broker_full, retryable
	// once others end. (Optional) Defaults to DefaultMaxStateBytes (1 MiB).
	MaxStateBytes int
	// LeaseTerm is how long a quota lease lasts unless renewed (lease.go).
	// (Optional) Defaults to DefaultLeaseTerm, capped at MaxLeaseTerm.
	LeaseTerm time.Duration
	// MaxLeaseTerm bounds every lease term any owner may grant: a new
	// owner's learning mode lasts at least that long, for the leases the
	// old owner granted after its last snapshot. Keep it the same on every
	// replica. (Optional) Defaults to DefaultMaxLeaseTerm.
	MaxLeaseTerm time.Duration
	// LeaseFraction is the part of a bucket's limit that may be leased out
	// at once. (Optional) Defaults to 0.5; never more than
	// ConservativeFraction, so that learning mode's held-back part covers
	// the leases a new owner does not know of.
	LeaseFraction float64
	// LeaseMinCapacity is the smallest capacity per window, in the bucket's
	// unit, of a bucket that is leased. (Optional) Defaults to
	// DefaultLeaseMinCapacity.
	LeaseMinCapacity float64
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
	if !(o.FairBurst > 0) || math.IsInf(o.FairBurst, 1) {
		o.FairBurst = 1
	}
	if o.MaxStateBytes <= 0 {
		o.MaxStateBytes = DefaultMaxStateBytes
	}
	if o.MaxLeaseTerm <= 0 {
		o.MaxLeaseTerm = DefaultMaxLeaseTerm
	}
	if o.LeaseTerm <= 0 {
		o.LeaseTerm = DefaultLeaseTerm
	}
	o.LeaseTerm = min(o.LeaseTerm, o.MaxLeaseTerm)
	if !(o.LeaseFraction > 0) || o.LeaseFraction > o.ConservativeFraction {
		o.LeaseFraction = o.ConservativeFraction
	}
	if !(o.LeaseMinCapacity > 0) {
		o.LeaseMinCapacity = DefaultLeaseMinCapacity
	}
	if o.Rand == nil {
		o.Rand = mrand.Float64
	}
	o.Correction.defaults()
}
