package dashboard

import (
	"net"
	"sync"
	"time"
)

// Refused sign-ins are paced per client address: failBurst at once, then
// one more every failEvery, so guessing credentials is slow while a person
// who mistyped signs in a moment later. A burst's allowance is kept for at
// most maxClients addresses; past that the fullest are forgotten first.
const (
	failBurst  = 10
	failEvery  = time.Second
	maxClients = 4096
)

type pacer struct {
	mu      sync.Mutex
	clients map[string]*allowance
}

// allowance is a client's refusals left at a time.
type allowance struct {
	left float64
	at   time.Time
}

func newPacer() *pacer { return &pacer{clients: map[string]*allowance{}} }

// client is the host of a request's remote address.
func client(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// left returns how many refusals the client has left at now.
func (p *pacer) left(c string, now time.Time) float64 {
	a, ok := p.clients[c]
	if !ok {
		return failBurst
	}
	return min(failBurst, a.left+float64(now.Sub(a.at))/float64(failEvery))
}

// blocked reports whether the client used up its refusals.
func (p *pacer) blocked(c string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.left(c, now) < 1
}

// refused counts one refusal of the client at now.
func (p *pacer) refused(c string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.clients[c]; !ok && len(p.clients) >= maxClients {
		for k := range p.clients {
			if p.left(k, now) >= failBurst-1 {
				delete(p.clients, k)
			}
		}
		if len(p.clients) >= maxClients {
			return // every one is pacing: the newcomer gets its burst
		}
	}
	p.clients[c] = &allowance{left: p.left(c, now) - 1, at: now}
}
