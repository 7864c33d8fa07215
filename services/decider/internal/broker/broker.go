package broker

import (
	"sync"
	"sync/atomic"
	"time"
)

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
	// owner: the longest TTL it granted (-1 before any Restore) and
	// when its own learning mode ended (Unix ns).
	prevGranted, prevLearn atomic.Int64
	corr                   sync.Map // corrKey → *correction
	// paused holds the pauses that apply to one tenant only (scope.go).
	paused sync.Map // tenantPauseKey → *pause
	scoped atomic.Int64

	leases leases // quota leases granted to other replicas (lease.go)

	retries retries // retry budgets of logical requests (retry.go)

	shards [nShards]shard

	// stateBytes bounds what the open reservations take in a snapshot
	// (entrySize each), and baseBytes is what the rest of the last
	// snapshot took: together they keep the snapshot within
	// Options.MaxStateBytes (state.go).
	stateBytes, baseBytes atomic.Int64
	// undurable is set while the owner cannot save the state (SetDurable).
	undurable atomic.Bool
	// saved is closed when the state is saved again, nil while it is
	// (AwaitDurable); dmu orders its changes. durableWaits counts the
	// callers waiting on it, notDurable the refusals it caused.
	dmu                      sync.Mutex
	saved                    chan struct{}
	durableWaits, notDurable atomic.Int64

	// qcfg is the class contracts and tenant shares, replaced whole by
	// Reconfigure; q holds the requests waiting for capacity.
	qcfg atomic.Pointer[queueConfig]
	q    fairQueue
}

// New returns a broker with every bucket full.
func New(cfg Config, o Options) (*Broker, error) {
	o.defaults()
	p, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	b := &Broker{opts: o}
	b.qcfg.Store(p.qc)
	b.q.init()
	b.prevGranted.Store(-1)
	for i := range b.shards {
		b.shards[i].init(&b.stateBytes)
	}
	now := b.nowNS()
	bs := make([]*bucket, 0, len(p.ds))
	for _, d := range p.ds {
		bs = append(bs, newBucket(d, b.idx.Add(1), now))
	}
	b.tab.Store(buildTable(bs, sortRoutes(cfg.Routes), nil))
	b.Snapshot() // measures baseBytes
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
// (recorded in the snapshot; at least DefaultTTL, and MaxTTL when no
// snapshot was restored), and at least MaxLeaseTerm, for the quota leases
// it granted (lease.go); and learning mode never ends before the old
// owner's own did, for what its predecessor may have granted.
func (b *Broker) LearningUntil(now time.Time) time.Time {
	ttl := time.Duration(b.prevGranted.Load())
	if ttl < 0 {
		ttl = b.opts.MaxTTL
	}
	until := now.Add(max(min(max(ttl, b.opts.DefaultTTL), b.opts.MaxTTL), b.opts.MaxLeaseTerm)).UnixNano()
	return time.Unix(0, max(until, b.prevLearn.Load())).UTC()
}

// OldLearning is when the learning mode of the owner whose snapshot was
// restored ends (zero when it was not in learning mode): a new owner that
// took over cleanly from an owner still learning keeps learning until
// then, since what that owner's predecessor granted is no better known.
func (b *Broker) OldLearning(now time.Time) time.Time {
	if u := b.prevLearn.Load(); u > now.UnixNano() {
		return time.Unix(0, u).UTC()
	}
	return time.Time{}
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
