// Package affinity remembers which endpoint recently served which prompt, so
// the decider can price a request where its cache is — cache affinity
// decides cost: an endpoint that
// served this conversation's earlier turn holds its prefix in cache and reads
// it at the cached-input price; the others would charge full input. It also
// says which endpoint served a conversation's last turn (Latest), which is
// how routing recognises a conversation whose caller names no session.
//
// Prompts are identified by the edge's chain hashes (a prompt's hash is a
// prefix hash of the conversation's next turn). Memory is bounded by two
// generations of maps: entries go to the current one; when it is full it
// becomes the previous one and the old previous one is dropped. A prompt
// seen in either generation is found, so what was used within the last
// capacity/2 to capacity recordings survives; the hot path never scans.
package affinity

import (
	"sync"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Options tune a Table.
type Options struct {
	// TTL is how long a provider keeps a prompt in cache. (Optional) Defaults
	// to 5m, the usual provider prompt-cache lifetime.
	TTL time.Duration
	// Capacity bounds the number of prompts remembered. (Optional) Defaults to 200000.
	Capacity int
}

// seen is where one prompt was served: up to a few endpoints, newest first.
type seen struct {
	tokens int64
	eps    [maxEndpointsPerPrompt]string
	at     [maxEndpointsPerPrompt]time.Time
}

// maxEndpointsPerPrompt bounds how many endpoints are remembered per prompt;
// a prompt is rarely served by more than a couple (a hedge, a retry).
const maxEndpointsPerPrompt = 4

// Table is the prompt → endpoint memory. It is safe for concurrent use.
type Table struct {
	ttl time.Duration
	max int

	mu        sync.RWMutex
	cur, prev map[uint64]*seen
}

// New returns an empty table.
func New(o Options) *Table {
	if o.TTL <= 0 {
		o.TTL = 5 * time.Minute
	}
	if o.Capacity <= 0 {
		o.Capacity = 200000
	}
	return &Table{ttl: o.TTL, max: max(o.Capacity/2, 1), cur: map[uint64]*seen{}, prev: map[uint64]*seen{}}
}

// Record notes that endpointID served the prompt with this hash and size at at.
func (t *Table) Record(endpointID string, hash uint64, tokens int64, at time.Time) {
	if hash == 0 || endpointID == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.cur[hash]
	if !ok {
		if old, inPrev := t.prev[hash]; inPrev {
			c := *old
			s = &c
		} else {
			s = &seen{}
		}
		if len(t.cur) >= t.max {
			t.prev, t.cur = t.cur, make(map[uint64]*seen, t.max)
		}
		t.cur[hash] = s
	}
	s.tokens = tokens
	// Move endpointID to the front, keeping the others newest first.
	i := 0
	for i < maxEndpointsPerPrompt-1 && s.eps[i] != "" && s.eps[i] != endpointID {
		i++
	}
	copy(s.eps[1:i+1], s.eps[:i])
	copy(s.at[1:i+1], s.at[:i])
	s.eps[0], s.at[0] = endpointID, at
}

// Cached fills cached[i] with the tokens endpoints[i] is expected to hold in
// cache for a request with these prefixes (longest last): the size of the
// longest prefix that endpoint served within the TTL, else 0. It allocates
// nothing, so Decide can call it on every request.
func (t *Table) Cached(endpoints []string, prefixes []*switchboardv1.PromptPrefix, now time.Time, cached []int64) {
	for i := range cached {
		cached[i] = 0
	}
	if len(prefixes) == 0 {
		return
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	found := 0
	for p := len(prefixes) - 1; p >= 0 && found < len(endpoints); p-- {
		s, ok := t.cur[prefixes[p].GetHash()]
		if !ok {
			if s, ok = t.prev[prefixes[p].GetHash()]; !ok {
				continue
			}
		}
		for k := range maxEndpointsPerPrompt {
			if s.eps[k] == "" || now.Sub(s.at[k]) > t.ttl {
				continue
			}
			for i, ep := range endpoints {
				if ep == s.eps[k] && cached[i] == 0 {
					cached[i] = min(prefixes[p].GetTokens(), s.tokens)
					found++
				}
			}
		}
	}
}

// Latest returns which of endpoints served this conversation's last turn:
// of the prefixes (longest last), the longest one an endpoint served
// within window of now, and of the endpoints that served it the most
// recent. i indexes endpoints and at is when that endpoint served it; ok
// is false when no endpoint served any prefix within the window. The
// window is the caller's (how long a conversation stays with its
// endpoint), not the table's TTL.
func (t *Table) Latest(endpoints []string, prefixes []*switchboardv1.PromptPrefix, now time.Time, window time.Duration) (i int, at time.Time, ok bool) {
	if len(prefixes) == 0 {
		return 0, time.Time{}, false
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	for p := len(prefixes) - 1; p >= 0; p-- {
		s, found := t.cur[prefixes[p].GetHash()]
		if !found {
			if s, found = t.prev[prefixes[p].GetHash()]; !found {
				continue
			}
		}
		// eps is newest first: the first live one known to the model wins.
		for k := range maxEndpointsPerPrompt {
			if s.eps[k] == "" || now.Sub(s.at[k]) > window {
				continue
			}
			for i, ep := range endpoints {
				if ep == s.eps[k] {
					return i, s.at[k], true
				}
			}
		}
	}
	return 0, time.Time{}, false
}

// Len returns the number of prompts remembered.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.cur) + len(t.prev)
}
