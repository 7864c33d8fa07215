package broker

import (
	"math"
	"sync"
	"sync/atomic"
)

// nShards is the number of reservation shards. Reservations are spread by
// sequence number (or by idempotency key), so 64 shards make two requests
// contend for one shard lock about once in 64 even on many cores, while
// Expire's scan of the shards' earliest expiry stays trivial.
const nShards = 64

// shard holds some of the open reservations: by id, by idempotency key, and
// in a min-heap by expiry.
type shard struct {
	mu   sync.Mutex
	byID map[string]*entry
	idem map[idemKey]*entry
	heap []*entry
	// next is the earliest expiry in the heap (MaxInt64 when empty), read
	// without the lock so Expire skips shards with nothing due.
	next atomic.Int64
	// closed remembers reservations closed recently, by id, and closedQ
	// the same in closing order, for pruning (see Broker.remember).
	closed  map[string]*closed
	closedQ []*closed
	// firstClosed is when closedQ's oldest item closed (MaxInt64 when
	// empty), read without the lock so Expire skips shards with nothing
	// to forget.
	firstClosed atomic.Int64
	// state is the broker's count of the bytes open reservations take in
	// a snapshot: remove gives an entry's back.
	state *atomic.Int64
	_     [64]byte
}

func (s *shard) init(state *atomic.Int64) {
	s.state = state
	s.byID = map[string]*entry{}
	s.idem = map[idemKey]*entry{}
	s.closed = map[string]*closed{}
	s.firstClosed.Store(math.MaxInt64)
	s.next.Store(math.MaxInt64)
}

// idemKey scopes an idempotency key to its tenant, so one tenant's key can
// never return another tenant's reservation.
type idemKey struct{ tenant, key string }

// shard hashes the key with FNV-1a: stable across processes, so a restored
// reservation sits in the shard where a retry of its key will look.
func (k idemKey) shard() int {
	h := uint64(14695981039346656037)
	mix := func(s string) {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
		h ^= 0xff
		h *= 1099511628211
	}
	mix(k.tenant)
	mix(k.key)
	return int(h % nShards)
}

func (s *shard) insert(e *entry) {
	s.byID[e.res.ID] = e
	if e.idem.key != "" {
		s.idem[e.idem] = e
	}
	e.heapIdx = len(s.heap)
	s.heap = append(s.heap, e)
	s.up(e.heapIdx)
	s.next.Store(s.heap[0].expires)
}

func (s *shard) remove(e *entry) {
	s.state.Add(-e.size)
	delete(s.byID, e.res.ID)
	if e.idem.key != "" && s.idem[e.idem] == e {
		delete(s.idem, e.idem)
	}
	i := e.heapIdx
	last := len(s.heap) - 1
	if i != last {
		s.swap(i, last)
	}
	s.heap[last] = nil
	s.heap = s.heap[:last]
	if i != last {
		s.down(i)
		s.up(i)
	}
	e.heapIdx = -1
	if len(s.heap) == 0 {
		s.next.Store(math.MaxInt64)
		if cap(s.heap) > 1024 {
			s.heap = nil // give a burst's memory back
		}
	} else {
		s.next.Store(s.heap[0].expires)
	}
}

func (s *shard) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.heap[i].heapIdx = i
	s.heap[j].heapIdx = j
}

func (s *shard) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.heap[p].expires <= s.heap[i].expires {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *shard) down(i int) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.heap[r].expires < s.heap[l].expires {
			m = r
		}
		if s.heap[i].expires <= s.heap[m].expires {
			return
		}
		s.swap(i, m)
		i = m
	}
}
