package broker

import (
	"math"
	"sync"
)

// bucket is one quota bucket. Its identity (id, scope, key, unit, window,
// rule, source, idx) never changes; its parameters change only under mu
// (Reconfigure, learned limits), and its state only under mu. Every method
// below but the constructor expects mu held.
type bucket struct {
	id     string
	key    string
	idx    uint32 // creation order, the tie-break of the canonical lock order
	scope  Scope
	unit   Unit
	window Window
	rule   Rule
	source Source

	mu sync.Mutex
	p  def // parameters

	// level is, for token bucket, daily and concurrency rules, what is
	// available now (it may be negative after an overrun); for a ramp, what
	// the current period has admitted.
	level float64
	last  int64   // token bucket: time of the last refill, Unix ns
	epoch int64   // daily and ramp: index of the current period
	prev  float64 // ramp: what the previous period admitted

	_ [64]byte // keeps two hot buckets' locks off one cache line
}

func newBucket(d def, idx uint32, now int64) *bucket {
	b := &bucket{id: d.id, key: d.key, idx: idx, scope: d.scope, unit: d.unit, window: d.window, rule: d.rule, source: d.source, p: d}
	b.reset(now)
	return b
}

// reset makes the bucket full as of now.
func (b *bucket) reset(now int64) {
	b.last = now
	b.prev = 0
	b.epoch = b.periodOf(now)
	if b.rule == RuleRamp {
		b.level = 0
	} else {
		b.level = b.p.max()
	}
}

// periodOf is the index of the fixed period holding now: days start at the
// reset time of day (UTC), ramp periods on the Unix epoch. Unix time has no
// leap seconds, so every day is exactly 86400 s.
func (b *bucket) periodOf(now int64) int64 {
	if b.p.period == 0 {
		return 0
	}
	return floorDiv(now-b.p.offset, b.p.period)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// nextPeriod is when the current fixed period ends, Unix ns.
func (b *bucket) nextPeriod() int64 { return (b.epoch+1)*b.p.period + b.p.offset }

// advance brings the state to now. Time going backwards (an injected clock,
// a restored snapshot from a replica whose clock was ahead) refills nothing.
func (b *bucket) advance(now int64) {
	switch b.rule {
	case RuleTokenBucket:
		if now > b.last {
			if m := b.p.max(); b.level < m {
				b.level = math.Min(m, b.level+float64(now-b.last)*b.rate())
			}
			b.last = now
		}
	case RuleDailyReset:
		if e := b.periodOf(now); e > b.epoch {
			b.epoch = e
			b.level = b.p.max()
		}
	case RuleRamp:
		if e := b.periodOf(now); e > b.epoch {
			if e == b.epoch+1 {
				b.prev = math.Max(0, b.level)
			} else {
				b.prev = 0
			}
			b.level = 0
			b.epoch = e
		}
	}
}

// rate is the token bucket's refill in units per ns: capacity per window.
func (b *bucket) rate() float64 { return b.p.capacity / float64(b.p.period) }

// limit is the most the bucket holds now: capacity + burst, or for a ramp
// max(floor, growth × previous period).
func (b *bucket) limit() float64 {
	if b.rule == RuleRamp {
		return math.Max(b.p.floor, b.p.growth*b.prev)
	}
	return b.p.max()
}

// available is what may still be taken now (negative when in debt).
func (b *bucket) available() float64 {
	if b.rule == RuleRamp {
		return b.limit() - b.level
	}
	return b.level
}

// fits reports whether amount may be taken while keeping hold×limit back
// (hold is 0, or 1-fraction in conservative mode). A relative tolerance of
// 1e-9 of the limit absorbs float rounding of fractional units (USD) so a
// request that exactly fills a bucket is not refused by the last bit. A
// zero amount is refused by a bucket with nothing left, so a caller cannot
// slip past a used-up spend limit by estimating no spend.
func (b *bucket) fits(amount, hold float64) bool {
	have := b.available()
	lim := b.limit()
	keep := b.keep(hold)
	if amount == 0 {
		return have > keep
	}
	return have-amount >= keep-1e-9*math.Max(1, lim)
}

// keep is what learning mode holds back: hold × limit, but for a bucket
// counted in units (requests, tokens, requests in flight) never so much that
// less than one unit can be taken, so a bucket of capacity 1 still admits
// one. USD has no such unit and keeps the plain share.
func (b *bucket) keep(hold float64) float64 {
	lim := b.limit()
	k := hold * lim
	if hold > 0 && b.unit != UnitUSD {
		k = math.Min(k, math.Max(lim-1, 0))
	}
	return k
}

// never reports whether amount can never fit: larger than capacity + burst.
// A ramp's limit grows with traffic, so it has no such bound.
func (b *bucket) never(amount float64) bool {
	return b.rule != RuleRamp && amount > b.p.max()*(1+1e-9)
}

// take charges amount.
func (b *bucket) take(amount float64) {
	if b.rule == RuleRamp {
		b.level += amount
	} else {
		b.level -= amount
	}
}

// settle gives back delta (negative: charges an overrun) for a charge made in
// period epoch, and returns what it applied. Gifts never lift a bucket above
// its limit. A fixed period (daily, ramp) that has rolled over since the
// charge was reset whole, so its charge is gone and nothing is applied.
func (b *bucket) settle(delta float64, epoch int64) float64 {
	switch b.rule {
	case RuleDailyReset, RuleRamp:
		if epoch != b.epoch {
			return 0
		}
	}
	if b.rule == RuleRamp {
		b.level = math.Max(0, b.level-delta)
		return delta
	}
	if delta > 0 {
		b.level = math.Min(b.p.max(), b.level+delta)
	} else {
		b.level += delta
	}
	return delta
}

// wait is how long, in ns, until amount fits while keeping keep back, and
// whether that is known. A token bucket refills at its rate; a daily or ramp
// bucket gets room at its next period; a concurrency bucket only when some
// reservation ends, which the bucket cannot know.
func (b *bucket) wait(amount, keep float64, now int64) (int64, bool) {
	switch b.rule {
	case RuleTokenBucket:
		need := amount + keep - b.level
		if need <= 0 {
			return 0, true
		}
		w := need / b.rate()
		if w > float64(math.MaxInt64/2) {
			return math.MaxInt64 / 2, true
		}
		return int64(math.Ceil(w)), true
	case RuleDailyReset, RuleRamp:
		return b.nextPeriod() - now, true
	}
	return 0, false
}

// full is when the bucket will be back at its limit if nothing else
// happens, for the Limits view; 0 when unknown or already full.
func (b *bucket) full(now int64) int64 {
	switch b.rule {
	case RuleTokenBucket:
		if need := b.p.max() - b.level; need > 0 {
			return now + int64(math.Ceil(need/b.rate()))
		}
	case RuleDailyReset, RuleRamp:
		return b.nextPeriod()
	}
	return 0
}

// setParams changes the bucket's parameters, keeping its level (clamped to
// the new limit) so a catalog reload neither refills nor drains it.
func (b *bucket) setParams(d def, now int64) {
	b.advance(now)
	b.p = d
	if b.p.period != 0 {
		b.epoch = b.periodOf(now)
	}
	if b.rule != RuleRamp {
		b.level = math.Min(b.level, b.p.max())
	}
	b.last = now
}

// lessBucket is the canonical lock order: scope (narrowest first, so the
// order is also the order buckets are checked in), then creation index.
// Both are fixed for a bucket's life, so the order is total and the same for
// every goroutine, which is what rules out deadlock.
func lessBucket(a, b *bucket) bool {
	if a.scope != b.scope {
		return a.scope < b.scope
	}
	return a.idx < b.idx
}

// sortBuckets sorts a handful of buckets in lock order and drops duplicates
// (locking one mutex twice would deadlock). Insertion sort: n is at most a
// dozen and it does not allocate.
func sortBuckets(bs []*bucket) []*bucket {
	for i := 1; i < len(bs); i++ {
		for j := i; j > 0 && lessBucket(bs[j], bs[j-1]); j-- {
			bs[j], bs[j-1] = bs[j-1], bs[j]
		}
	}
	out := bs[:0]
	for _, x := range bs {
		if len(out) == 0 || out[len(out)-1] != x {
			out = append(out, x)
		}
	}
	return out
}
