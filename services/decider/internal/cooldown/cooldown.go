// Package cooldown benches an endpoint that refused calls: it is not chosen
// again until its cool-down ends (routing still lists it behind the usable
// endpoints, so a request never runs out of fallbacks because of it).
//
// The default rule is a breaker (Breaker): three refusals (429, 5xx,
// connection error) within a minute bench the endpoint for two minutes. A
// single refusal of a provider that serves thousands of calls a day says
// little, and benching it for long sends its traffic to dearer or slower
// endpoints for nothing; the simulator measured the breaker no worse than
// the older rule on any profile and better on several (docs/simulation.md).
// That older rule, one refusal benching the endpoint for 15 minutes, stays a
// named setting (FirstRefusal), and the tracker counts how often each rule
// benches an endpoint, to compare them.
//
// A refusal that carries the provider's Retry-After is told how long to stay
// away: the endpoint is paused for exactly that long, not benched for the
// full cool-down, and never longer than provheaders.MaxRetryAfter (15
// minutes), whoever reports it. Only when it refuses again within the window (or, with a
// breaker of more errors, as often as the breaker needs) is it benched like
// any endpoint that keeps refusing.
//
// This is the decider's side of the cool-down; the edge's side,
// services/edge/internal/cooldown, remembers the benches the decider sends
// it over the Report stream until they end.
package cooldown

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-ai/switchboard/services/decider/internal/broker/provheaders"
)

// Options tune a Tracker. A zero field takes the default rule's (Breaker).
type Options struct {
	// Duration is how long an endpoint stays benched. (Optional) Defaults to 2m.
	Duration time.Duration
	// Errors is how many refusals within Window bench it. (Optional) Defaults to 3.
	Errors int
	// Window is the span in which Errors refusals must fall. (Optional) Defaults to 1m.
	Window time.Duration
}

// The named rules.
var (
	// Breaker is the default: three refusals within a minute bench an
	// endpoint for two minutes.
	Breaker = Options{Duration: 2 * time.Minute, Errors: 3, Window: time.Minute}
	// FirstRefusal is the older rule: one refusal benches an endpoint for
	// 15 minutes.
	FirstRefusal = Options{Duration: 15 * time.Minute, Errors: 1, Window: time.Minute}
)

// Rules are the named rules by the names the decider's --cooldown-rule
// takes.
var Rules = map[string]Options{"breaker": Breaker, "first-refusal": FirstRefusal}

// Over returns o with its zero fields taken from base.
func (o Options) Over(base Options) Options {
	if o.Duration <= 0 {
		o.Duration = base.Duration
	}
	if o.Errors <= 0 {
		o.Errors = base.Errors
	}
	if o.Window <= 0 {
		o.Window = base.Window
	}
	return o
}

// Tracker records refusals and cool-downs. It is safe for concurrent use.
type Tracker struct {
	opts    Options
	benched atomic.Int64 // cool-downs started, for the metric and tests
	paused  atomic.Int64 // pauses for a provider's Retry-After started
	active  atomic.Int32 // endpoints cooling now, so Decide skips the lock when none are

	mu    sync.RWMutex
	until map[string]time.Time
	errs  map[string][]time.Time
}

// New returns a tracker.
func New(o Options) *Tracker {
	o = o.Over(Breaker)
	return &Tracker{opts: o, until: map[string]time.Time{}, errs: map[string][]time.Time{}}
}

// Refused records a refusal by endpointID at at. It returns the end of the
// cool-down and true when this refusal started one.
func (t *Tracker) Refused(endpointID string, at time.Time) (time.Time, bool) {
	return t.RefusedFor(endpointID, at, 0)
}

// RefusedFor is Refused with the provider's Retry-After (0 for none). A
// Retry-After pauses the endpoint for that long, unless this refusal repeats
// one within the window (or trips a breaker of more errors), in which case
// it benches it for the cool-down, or for the Retry-After if longer. A
// refusal during a running pause or cool-down only extends it to the
// Retry-After. A Retry-After beyond provheaders.MaxRetryAfter counts as
// that long. It returns the end of the pause or cool-down and true when
// this refusal started one.
func (t *Tracker) RefusedFor(endpointID string, at time.Time, retryAfter time.Duration) (time.Time, bool) {
	retryAfter = min(retryAfter, provheaders.MaxRetryAfter)
	t.mu.Lock()
	defer t.mu.Unlock()
	if u, ok := t.until[endpointID]; ok && at.Before(u) {
		if ra := at.Add(retryAfter); ra.After(u) {
			t.until[endpointID] = ra
			return ra, false
		}
		return u, false
	}
	recent := t.errs[endpointID][:0]
	for _, e := range t.errs[endpointID] {
		if at.Sub(e) < t.opts.Window {
			recent = append(recent, e)
		}
	}
	recent = append(recent, at)
	need := t.opts.Errors
	if retryAfter > 0 {
		// The provider said when to come back: the first such refusal earns
		// a pause of that length, a repeated one the cool-down.
		need = max(need, 2)
	}
	if len(recent) < need {
		t.errs[endpointID] = recent
		if retryAfter <= 0 {
			return time.Time{}, false
		}
		u := at.Add(retryAfter)
		t.set(endpointID, u)
		t.paused.Add(1)
		return u, true
	}
	delete(t.errs, endpointID)
	u := at.Add(max(t.opts.Duration, retryAfter))
	t.set(endpointID, u)
	t.benched.Add(1)
	return u, true
}

// set benches endpointID until u; t.mu is held.
func (t *Tracker) set(endpointID string, u time.Time) {
	if _, was := t.until[endpointID]; !was {
		t.active.Add(1)
	}
	t.until[endpointID] = u
}

// Until returns when endpointID's cool-down ends and whether it is cooling at now.
func (t *Tracker) Until(endpointID string, now time.Time) (time.Time, bool) {
	if t.active.Load() == 0 {
		return time.Time{}, false
	}
	t.mu.RLock()
	u, ok := t.until[endpointID]
	t.mu.RUnlock()
	if !ok || !now.Before(u) {
		return time.Time{}, false
	}
	return u, true
}

// Expire forgets cool-downs that ended before now; the decider calls it
// periodically so the lock-free fast path of Until comes back.
func (t *Tracker) Expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ep, u := range t.until {
		if !now.Before(u) {
			delete(t.until, ep)
			t.active.Add(-1)
		}
	}
}

// Benched returns how many cool-downs have started.
func (t *Tracker) Benched() int64 { return t.benched.Load() }

// Paused returns how many pauses for a provider's Retry-After have started.
func (t *Tracker) Paused() int64 { return t.paused.Load() }
