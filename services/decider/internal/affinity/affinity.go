// Package affinity remembers which endpoint recently served which prompt, so
// the decider can price a request where its cache is — cache affinity
// decides cost: an endpoint that
// served this conversation's earlier turn holds its prefix in cache and reads
// it at the cached-input price; the others would charge full input. It also
// says which endpoint served a conversation's last turn (Latest), which is
// how routing recognises a conversation whose caller names no session.
//
// Prompts are identified by the edge's chain hashes (a prompt's hash is a
// prefix hash of the conversation's next turn). An endpoint that served a
// prompt holds each of its prefixes too, so Served records the prompt's
// prefixes at its cache boundaries (the tool block, the leading system
// messages, each message boundary) beside the prompt itself: a new question
// after a system prompt two endpoints served is priced with the cache of
// each. Only a prompt served whole marks a conversation's turn, which
// Latest looks for: a shared system prompt is no conversation. Memory is bounded by two
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

// seen is where one prompt or prefix was served: up to a few endpoints,
// newest first, each with whether it served it as a whole prompt (a
// conversation's turn) or only as a prefix of a longer one.
type seen struct {
	tokens int64
	eps    [maxEndpointsPerPrompt]string
	at     [maxEndpointsPerPrompt]time.Time
	whole  [maxEndpointsPerPrompt]bool
}

// MaxPrefixesPerReport bounds the prefixes one Served call records, the
// prompt itself aside: the edge sends at most this many (chatreq.MaxPrefixes),
// and a confused edge sending more has only the longest recorded.
const MaxPrefixesPerReport = 32

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
	t.record(endpointID, hash, tokens, true, at)
}

// Served notes that endpointID served the prompt with this hash and size
// at at, and with it each of prefixes (shortest first, as the edge sends
// them; the prompt's own hash among them is the prompt): the endpoint holds
// all of them in cache now. A prefix's size is its own, at most the
// prompt's. At most MaxPrefixesPerReport prefixes are recorded, the longest.
func (t *Table) Served(endpointID string, hash uint64, tokens int64, prefixes []*switchboardv1.PromptPrefix, at time.Time) {
	if endpointID == "" {
		return
	}
	prefixes = prefixes[max(0, len(prefixes)-MaxPrefixesPerReport):]
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range prefixes {
		if h := p.GetHash(); h != 0 && h != hash {
			n := max(p.GetTokens(), 0)
			if tokens > 0 {
				n = min(n, tokens)
			}
			t.record(endpointID, h, n, false, at)
		}
	}
	if hash != 0 {
		t.record(endpointID, hash, tokens, true, at)
	}
}

// record notes one prompt or prefix; t.mu is held.
func (t *Table) record(endpointID string, hash uint64, tokens int64, whole bool, at time.Time) {
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
	// Move endpointID to the front, keeping the others newest first. An
	// endpoint that served the prompt whole still did when it serves it
	// again as a prefix of a longer one, within the same lifetime.
	i := 0
	for i < maxEndpointsPerPrompt-1 && s.eps[i] != "" && s.eps[i] != endpointID {
		i++
	}
	whole = whole || (s.eps[i] == endpointID && s.whole[i] && at.Sub(s.at[i]) <= t.ttl)
	copy(s.eps[1:i+1], s.eps[:i])
	copy(s.at[1:i+1], s.at[:i])
	copy(s.whole[1:i+1], s.whole[:i])
	s.eps[0], s.at[0], s.whole[0] = endpointID, at, whole
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
// of the prefixes (longest last), the longest one an endpoint served as a
// whole prompt within window of now (a prefix it served only inside
// another prompt, such as a system prompt many conversations share, is no
// turn of this conversation), and of the endpoints that served it the most
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
			if s.eps[k] == "" || !s.whole[k] || now.Sub(s.at[k]) > window {
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
