package report

// What the hub sends to edges: commands to one edge in turn or to all, the
// key set and the broker owner's term to every edge, never dropped.

import (
	"context"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// SendOne sends a command to the next edge of region in turn (of any
// region when region is ""), so work such as probes is spread across a
// region's edges and measures what that region sees. It returns false when
// no edge took it.
func (h *Hub) SendOne(region string, m *switchboardv1.ReportResponse) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for range h.ring {
		c := h.ring[h.next%len(h.ring)]
		h.next++
		if region != "" && c.hello.GetRegion() != region {
			continue
		}
		select {
		case c.out <- m:
			return true
		default: // that edge is backed up: try the next
		}
	}
	return false
}

// KeysChanged sends the key set NewHub's keys returns now to every
// connected edge (each edge that connects later gets it first). Edges
// refuse keys outside it before reading their requests, so it is never
// dropped for a slow edge: a set not yet sent is replaced by the newer one.
func (h *Hub) KeysChanged() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.edges {
		select {
		case c.keys <- struct{}{}:
		default: // already signalled: the latest set goes
		}
	}
}

// SetOwnerTerm makes term the broker owner's term told to every connected
// edge and to each edge that connects later, when it is newer than the one
// told so far. Like the key set it is never dropped for a slow edge: an
// edge that misses a new term would never replay what the new owner lacks.
func (h *Hub) SetOwnerTerm(term int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if term <= h.term.Load() {
		return
	}
	h.term.Store(term)
	for c := range h.edges {
		select {
		case c.term <- struct{}{}:
		default: // already signalled: the latest term goes
		}
	}
}

// FollowOwnerTerm tells edges each new term of the broker's owner, from
// terms (the term now, and a channel closed when it may have changed:
// the admission's OwnerTerm), until ctx ends.
func (h *Hub) FollowOwnerTerm(ctx context.Context, terms func() (int64, <-chan struct{})) {
	for {
		term, changed := terms()
		h.SetOwnerTerm(term)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// Broadcast sends a command to every connected edge, dropping it for an edge
// whose buffer is full.
func (h *Hub) Broadcast(m *switchboardv1.ReportResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.edges {
		h.trySend(c, m)
	}
}
