package affinity

import "time"

// Entry is one prompt (or prefix) and where it was served, as a replica
// hands its table to one that starts (Export, Import).
type Entry struct {
	Hash   uint64
	Tokens int64
	// Served are the endpoints that served it, newest first.
	Served []Served
}

// Served is one endpoint that served a prompt.
type Served struct {
	Endpoint string
	At       time.Time
	Whole    bool
}

// Export returns every prompt an endpoint served within the TTL of now,
// with the endpoints that did.
func (t *Table) Export(now time.Time) []Entry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]Entry, 0, len(t.cur)+len(t.prev))
	add := func(h uint64, s *seen) {
		e := Entry{Hash: h, Tokens: s.tokens}
		for k := range maxEndpointsPerPrompt {
			if s.eps[k] != "" && now.Sub(s.at[k]) <= t.ttl {
				e.Served = append(e.Served, Served{Endpoint: s.eps[k], At: s.at[k], Whole: s.whole[k]})
			}
		}
		if len(e.Served) > 0 {
			out = append(out, e)
		}
	}
	for h, s := range t.prev {
		if _, newer := t.cur[h]; !newer {
			add(h, s)
		}
	}
	for h, s := range t.cur {
		add(h, s)
	}
	return out
}

// Import adds entries another replica exported. A prompt this table knows
// already keeps what it knows (its own reports are as new or newer); at
// most maxEndpointsPerPrompt endpoints of an entry are taken.
func (t *Table) Import(entries []Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range entries {
		if e.Hash == 0 || len(e.Served) == 0 {
			continue
		}
		if _, ok := t.cur[e.Hash]; ok {
			continue
		}
		if _, ok := t.prev[e.Hash]; ok {
			continue
		}
		served := e.Served[:min(len(e.Served), maxEndpointsPerPrompt)]
		for i := len(served) - 1; i >= 0; i-- { // oldest first: record puts the newest in front
			if s := served[i]; s.Endpoint != "" {
				t.record(s.Endpoint, e.Hash, max(e.Tokens, 0), s.Whole, s.At)
			}
		}
	}
}
