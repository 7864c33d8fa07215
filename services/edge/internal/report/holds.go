package report

import (
	"slices"
	"sync"
)

// holds are the reservations of the calls in flight, declared to the
// broker's owner after each hello, in every heartbeat, and again to each
// new owner, until their reconciliation is queued or they are forgotten. It
// is safe for concurrent use.
type holds struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (h *holds) hold(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids == nil {
		h.ids = map[string]struct{}{}
	}
	h.ids[id] = struct{}{}
}

func (h *holds) forget(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.ids, id)
}

// list returns the held reservations, sorted.
func (h *holds) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.ids))
	for id := range h.ids {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Hold declares a reservation in use by a call in flight: it is listed in
// every heartbeat until its reconciliation is queued (Reconcile) or it is
// forgotten (Forget). It never blocks.
func (s *Stream) Hold(id string) {
	if id == "" {
		return
	}
	s.held.hold(id)
}

// Forget stops declaring a reservation that was closed another way (a
// Reconcile RPC that succeeded).
func (s *Stream) Forget(id string) { s.held.forget(id) }

// Held returns the reservations declared in heartbeats now.
func (s *Stream) Held() []string { return s.held.list() }
