// Package cooldown remembers which endpoints the decider benched, and until
// when, so the edge skips them among a request's fallbacks. The decider
// already leaves cooled-down endpoints out of new decisions; this covers the
// window between its command and decisions made before it.
//
// This is the edge's side of the cool-down; the decider's side,
// services/decider/internal/cooldown, decides which endpoints are benched.
package cooldown

import (
	"sync"
	"time"
)

// Table maps endpoint ids to the time they may be used again. It is safe for
// concurrent use.
type Table struct {
	now func() time.Time

	mu    sync.Mutex
	until map[string]time.Time
}

// New returns an empty Table reading the time from now (time.Now when nil),
// injectable so tests never sleep.
func New(now func() time.Time) *Table {
	if now == nil {
		now = time.Now
	}
	return &Table{now: now, until: make(map[string]time.Time)}
}

// Set benches endpointID until the given time; a time in the past lifts it.
func (t *Table) Set(endpointID string, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !until.After(t.now()) {
		delete(t.until, endpointID)
		return
	}
	t.until[endpointID] = until
}

// Active reports whether endpointID is cooling down now. Expired entries are
// removed as they are found, so the map stays as small as the set of benched
// endpoints.
func (t *Table) Active(endpointID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.until[endpointID]
	if !ok {
		return false
	}
	if t.now().Before(u) {
		return true
	}
	delete(t.until, endpointID)
	return false
}
