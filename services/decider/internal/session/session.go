// Package session remembers which endpoint serves each conversation its
// caller named with a session id, so routing can keep a conversation's
// later turns on the endpoint that holds its prompt cache.
//
// A conversation is a tenant's session id for one model. Decide notes the
// endpoint it chose for a turn (Keep); when the edge reports that a
// different endpoint answered the request (a fallback after a failed
// attempt), Served moves the conversation there, since that is where its
// prompt now sits in cache. Whether an entry is still warm is the caller's
// rule: the table only says when the conversation's last turn was.
//
// Memory is bounded by two generations of maps, as the affinity table's:
// entries go to the current one; when it is full it becomes the previous
// one and the old previous one is dropped. Conversations are keyed by
// their whole names, so no caller's session ids can collide with another
// tenant's entries; pending requests by their ids hashed with a seed chosen
// at start.
package session

import (
	"hash/maphash"
	"sync"
	"time"
)

// Options tune a Table.
type Options struct {
	// Capacity bounds the number of conversations remembered. (Optional) Defaults to 200000.
	Capacity int
	// Kept is told of every turn Keep notes, so other decider replicas
	// note it too (KeepShared). (Optional) It must not block.
	Kept func(Turn)
}

// Turn is one turn of a conversation, as Keep notes it.
type Turn struct {
	Tenant, Model, Session, RequestID, Endpoint string
	At                                          time.Time
}

// entry is where a conversation's last turn went, and when.
type entry struct {
	endpoint string
	at       time.Time
}

// pending is a decided request whose call has not been reported yet.
type pending struct {
	key key
	at  time.Time // the turn's time, to recognise a later turn
}

// Table is the conversation → endpoint memory. It is safe for concurrent use.
type Table struct {
	seed maphash.Seed
	max  int
	kept func(Turn)

	mu        sync.RWMutex
	cur, prev map[key]entry
	// Requests decided for a conversation, by request id, until reported.
	reqCur, reqPrev map[uint64]pending
}

// New returns an empty table.
func New(o Options) *Table {
	if o.Capacity <= 0 {
		o.Capacity = 200000
	}
	n := max(o.Capacity/2, 1)
	return &Table{
		seed: maphash.MakeSeed(), max: n, kept: o.Kept,
		cur: map[key]entry{}, prev: map[key]entry{},
		reqCur: map[uint64]pending{}, reqPrev: map[uint64]pending{},
	}
}

// key names a conversation.
type key struct{ tenant, model, session string }

// Last returns the endpoint of the conversation's last turn and when it
// was decided or answered; ok is false for a conversation never seen (or
// forgotten).
func (t *Table) Last(tenant, model, session string) (endpoint string, at time.Time, ok bool) {
	k := key{tenant, model, session}
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, ok := t.cur[k]
	if !ok {
		e, ok = t.prev[k]
	}
	return e.endpoint, e.at, ok
}

// Keep notes that a turn of the conversation, request requestID, was sent
// to endpoint at at. requestID may be empty; the turn is then not
// corrected by Served. Options.Kept is told.
func (t *Table) Keep(tenant, model, session, requestID, endpoint string, at time.Time) {
	tu := Turn{Tenant: tenant, Model: model, Session: session, RequestID: requestID, Endpoint: endpoint, At: at}
	t.keep(tu)
	if t.kept != nil {
		t.kept(tu)
	}
}

// KeepShared notes a turn another replica decided, as Keep does, without
// telling Options.Kept: it is that replica's to share.
func (t *Table) KeepShared(tu Turn) { t.keep(tu) }

func (t *Table) keep(tu Turn) {
	at, endpoint, requestID := tu.At, tu.Endpoint, tu.RequestID
	k := key{tu.Tenant, tu.Model, tu.Session}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.put(k, entry{endpoint: endpoint, at: at})
	if requestID == "" {
		return
	}
	rk := maphash.String(t.seed, requestID)
	if _, ok := t.reqCur[rk]; !ok && len(t.reqCur) >= t.max {
		t.reqPrev, t.reqCur = t.reqCur, make(map[uint64]pending, t.max)
	}
	t.reqCur[rk] = pending{key: k, at: at}
}

// Served notes that endpoint answered request requestID. When that request
// was a conversation's turn and no later turn has been decided since, the
// conversation moves to endpoint (it holds the prompt now) and its last turn
// becomes at. A request not kept is ignored.
func (t *Table) Served(requestID, endpoint string, at time.Time) {
	if requestID == "" || endpoint == "" {
		return
	}
	rk := maphash.String(t.seed, requestID)
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.reqCur[rk]
	if ok {
		delete(t.reqCur, rk)
	} else if p, ok = t.reqPrev[rk]; ok {
		delete(t.reqPrev, rk)
	} else {
		return
	}
	e, ok := t.cur[p.key]
	if !ok {
		e, ok = t.prev[p.key]
	}
	if !ok || !e.at.Equal(p.at) {
		return // forgotten, or a later turn was decided since
	}
	if at.Before(e.at) {
		at = e.at
	}
	t.put(p.key, entry{endpoint: endpoint, at: at})
}

// put stores e under k in the current generation, rotating when full.
func (t *Table) put(k key, e entry) {
	if _, ok := t.cur[k]; !ok {
		delete(t.prev, k)
		if len(t.cur) >= t.max {
			t.prev, t.cur = t.cur, make(map[key]entry, t.max)
		}
	}
	t.cur[k] = e
}

// Len returns the number of conversations remembered.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.cur) + len(t.prev)
}

// Export returns every conversation remembered and where its last turn
// went, as a replica hands its table to one that starts (RequestID empty).
func (t *Table) Export() []Turn {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]Turn, 0, len(t.cur)+len(t.prev))
	add := func(k key, e entry) {
		out = append(out, Turn{Tenant: k.tenant, Model: k.model, Session: k.session, Endpoint: e.endpoint, At: e.at})
	}
	for k, e := range t.prev {
		if _, newer := t.cur[k]; !newer {
			add(k, e)
		}
	}
	for k, e := range t.cur {
		add(k, e)
	}
	return out
}

// Import takes the conversations another replica exported: one this table
// knows keeps its own last turn unless the imported one is later.
func (t *Table) Import(turns []Turn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tu := range turns {
		if tu.Endpoint == "" {
			continue
		}
		k := key{tu.Tenant, tu.Model, tu.Session}
		e, ok := t.cur[k]
		if !ok {
			e, ok = t.prev[k]
		}
		if ok && !tu.At.After(e.at) {
			continue
		}
		t.put(k, entry{endpoint: tu.Endpoint, at: tu.At})
	}
}
