// Package hedge holds the daily hedge budget: a fixed amount of USD per UTC
// day, shared by every edge, that pays for the second endpoint of hedged
// requests. An edge asks before it hedges; the answer is atomic (one mutex
// around a counter, on the one replica that owns the decider's singleton
// state), so two edges can never both spend the last cent.
// When the day's budget is spent, long requests use one endpoint until the
// next UTC day.
//
// A paced budget (NewPaced) spreads the day's amount over the day: at time t
// of the UTC day a grant may take the spend up to
// daily × (t + Burst) / (24h + Burst), a line from Burst's share at midnight
// to the whole budget at the next. Long hedged requests want far more than a
// few dollars a day, so an unpaced budget is spent in the first hours after
// midnight and the busy hours get no hedges; paced, what the quiet hours did
// not spend waits for the busy ones, no hour spends more than Burst's share
// ahead of an even spend, and the day's last hour still has its share.
//
// An acquisition charges the edge's estimate of the extra call at once; when
// the request's activity record arrives with the real cost of the cancelled
// call, Settle replaces the estimate (same day only). A record that never
// arrives leaves the estimate charged, which errs on the side of spending less.
//
// Money fails closed: an estimate or a cost that is not a finite,
// non-negative amount is refused (an acquisition is not granted, a
// settlement leaves the estimate charged), a settlement gives back at most
// what its acquisitions took, and a budget whose saved state cannot be read
// counts the day as spent, and one whose state cannot be written (Durable)
// grants nothing, rather than starting the day again.
package hedge

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// Budget is the day's hedge budget. It is safe for concurrent use.
type Budget struct {
	daily float64
	burst time.Duration // ≥ 24h: unpaced
	now   func() time.Time

	mu      sync.Mutex
	day     string // UTC date of spent, "2006-01-02"
	spent   float64
	pending map[string]float64 // request id → estimate charged today
	// pendingBytes bounds what pending takes in the saved state (pendingSize each).
	pendingBytes int
	dirty        bool
	// unwritable is set while the state cannot be saved (Durable): no
	// grant is made that a next owner would not know of.
	unwritable bool
	granted    int64
	refused    int64
}

// New returns a budget of dailyUSD per UTC day, which a day's first hedges
// may spend at once; now is the clock.
func New(dailyUSD float64, now func() time.Time) *Budget {
	return NewPaced(Options{DailyUSD: dailyUSD, Burst: Unpaced, Now: now})
}

// Unpaced is the Burst of a budget that lets the day's first hedges spend
// all of it.
const Unpaced = 24 * time.Hour

// DefaultBurst is the Burst of a paced budget: one hour's share of the day
// ahead of an even spend.
const DefaultBurst = time.Hour

// Options configure a budget.
type Options struct {
	// DailyUSD is the budget per UTC day. (Required)
	DailyUSD float64
	// Burst is how far ahead of an even spend over the UTC day grants may
	// run: at time t of the day the spend may reach
	// DailyUSD × (t + Burst) / (24h + Burst). (Optional) Defaults to
	// DefaultBurst; Unpaced (24h) or more lets a day's first hedges spend
	// the whole day's budget.
	Burst time.Duration
	// Now is the clock. (Optional) Defaults to time.Now.
	Now func() time.Time
}

// NewPaced returns a budget whose daily amount lasts through the day (see
// the package doc).
func NewPaced(o Options) *Budget {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if !amount(o.DailyUSD) {
		o.DailyUSD = 0 // a budget that is not an amount grants nothing
	}
	return &Budget{daily: o.DailyUSD, burst: min(o.Burst, Unpaced), now: o.Now, pending: map[string]float64{}}
}

// allowance is what today's spend may reach at now: the whole budget when
// unpaced, else the share of the day elapsed plus the burst, out of the day
// plus the burst. Callers hold mu.
func (b *Budget) allowance(now time.Time) float64 {
	if b.burst >= Unpaced {
		return b.daily
	}
	u := now.UTC()
	y, m, d := u.Date()
	elapsed := u.Sub(time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
	return min(b.daily*float64(elapsed+b.burst)/float64(24*time.Hour+b.burst), b.daily)
}

// roll starts a new day when the UTC date changed. Callers hold mu.
func (b *Budget) roll(now time.Time) {
	if d := now.UTC().Format(time.DateOnly); d != b.day {
		b.day, b.spent, b.dirty = d, 0, true
		clear(b.pending)
		b.pendingBytes = 0
	}
}

// Acquire charges estimateUSD for requestID's hedge if today's budget has
// room, and, when paced, if the spend stays within what the day so far
// allows. It returns whether the hedge may start, what is left of the day's
// budget, and when the budget refills.
func (b *Budget) Acquire(requestID string, estimateUSD float64) (granted bool, remaining float64, reset time.Time) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(now)
	reset = nextMidnight(now)
	_, known := b.pending[requestID]
	size := 0
	if !known {
		size = pendingSize(requestID)
	}
	if !amount(estimateUSD) || b.unwritable || b.spent+estimateUSD > b.allowance(now) || b.spent >= b.daily ||
		len(requestID) > validate.MaxIDLen || !utf8.ValidString(requestID) || b.pendingBytes+size > MaxStateBytes-stateOverhead {
		b.refused++
		return false, max(b.daily-b.spent, 0), reset
	}
	b.spent += estimateUSD
	b.pending[requestID] += estimateUSD
	b.pendingBytes += size
	b.granted++
	b.dirty = true
	return true, max(b.daily-b.spent, 0), reset
}

// Settle replaces requestID's estimate with the actual cost of its cancelled
// call, if it was charged today: it gives back at most the estimate. A cost
// that is not an amount leaves the estimate charged.
func (b *Budget) Settle(requestID string, actualUSD float64) {
	if !amount(actualUSD) {
		return
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(now)
	est, ok := b.pending[requestID]
	if !ok {
		return
	}
	delete(b.pending, requestID)
	b.pendingBytes -= pendingSize(requestID)
	b.spent = max(b.spent-est+actualUSD, 0)
	b.dirty = true
}

// Snapshot returns the state, a statev1.HedgeBudgetState (the day, its
// spend and its pending estimates, which survive a restart or a change of
// owner), and whether it changed since the last call, so the caller saves
// only changes.
func (b *Budget) Snapshot() ([]byte, bool) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(now)
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(&statev1.HedgeBudgetState{
		Day: b.day, SpentUsd: b.spent, PendingUsd: b.pending})
	if err != nil {
		// Never written: an empty or partial state would restart the day.
		return nil, false
	}
	changed := b.dirty
	b.dirty = false
	return data, changed
}

// errState is a saved state that is not one.
var errState = errors.New("hedge budget state: not a day and a finite, non-negative spend")

// Restore replaces today's spend and pending estimates with a saved state;
// a state of an earlier day is ignored. A state that cannot be read (empty,
// not a HedgeBudgetState, a spend that is not an amount) counts today as spent: the
// budget refuses hedges until the next UTC day rather than granting a
// budget that may already be gone.
func (b *Budget) Restore(data []byte) error {
	var s statev1.HedgeBudgetState
	err := proto.Unmarshal(data, &s)
	if err == nil {
		if _, perr := time.Parse(time.DateOnly, s.GetDay()); perr != nil || !amount(s.GetSpentUsd()) {
			err = errState
		}
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(now)
	if err != nil {
		b.spent, b.dirty = b.daily, true
		clear(b.pending)
		b.pendingBytes = 0
		return fmt.Errorf("hedge budget state unreadable, today counted as spent: %w", err)
	}
	if s.GetDay() == b.day {
		b.spent = max(s.GetSpentUsd(), 0)
		clear(b.pending)
		b.pendingBytes = 0
		for id, est := range s.GetPendingUsd() {
			if est > 0 && amount(est) {
				b.pending[id] = est
				b.pendingBytes += pendingSize(id)
			}
		}
	}
	return nil
}

// Durable says whether the last save of the state succeeded: while it did
// not, no hedge is granted.
func (b *Budget) Durable(ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unwritable = !ok
}

// MaxStateBytes bounds the budget's saved state, in bytes: a hedge whose
// request would take the pending estimates past it is refused, as is one
// whose request id is longer than the gRPC boundary allows. It leaves the
// broker's snapshot (broker.DefaultMaxStateBytes) room in etcd's request
// limit.
const MaxStateBytes = 256 << 10

// stateOverhead bounds the saved state but for its pending estimates: the
// day and the spend take 21 bytes.
const stateOverhead = 128

// pendingSize bounds what one pending estimate takes in the saved state:
// its map entry (field 3) holding the id (field 1) and a double (field 2).
func pendingSize(id string) int {
	entry := protowire.SizeTag(1) + protowire.SizeBytes(len(id)) + protowire.SizeTag(2) + protowire.SizeFixed64()
	return protowire.SizeTag(3) + protowire.SizeBytes(entry)
}

// amount reports whether v is an amount of money: finite, not negative.
func amount(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }

// Status returns today's spend and the decision counts.
func (b *Budget) Status() (spent, daily float64, granted, refused int64) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(now)
	return b.spent, b.daily, b.granted, b.refused
}

func nextMidnight(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}

// ResetTime is when the budget refills: the next UTC midnight.
func (b *Budget) ResetTime() time.Time { return nextMidnight(b.now()) }
