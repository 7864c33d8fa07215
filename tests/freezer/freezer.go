// Package freezer is a TCP proxy that can freeze: stop passing bytes
// either way while keeping every connection open, and keep accepting new
// ones that pass nothing either. From its clients' side that is a peer
// paused or cut off by the network, the hard case: no refusal, no reset,
// only silence until a keepalive or a deadline notices. Heal lets the held
// bytes through, in order, as a network whose partition ended does.
//
// The end-to-end tests put one in front of a decider or an etcd member;
// the chaos test (tests/chaos) puts one in front of each, holding only the
// connections that cross regions.
package freezer

import (
	"net"
	"sync"
)

// Proxy passes every connection accepted on its loopback address to its
// target.
type Proxy struct {
	ln     net.Listener
	target string
	hold   func(client net.Conn) bool

	mu   sync.Mutex
	thaw chan struct{} // closed while thawed; a fresh open channel while frozen
	open map[net.Conn]struct{}
	done bool
	wg   sync.WaitGroup
}

// Start listens on a free loopback port and passes each connection to
// target. hold says, when a connection is accepted, whether a freeze holds
// it (nil: every connection); one it does not hold passes bytes while the
// proxy is frozen.
func Start(target string, hold func(client net.Conn) bool) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, hold: hold, thaw: make(chan struct{}), open: map[net.Conn]struct{}{}}
	close(p.thaw)
	// The accept loop is counted too, so that no Add can start from zero
	// while Close waits.
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		held := p.hold == nil || p.hold(c)
		p.mu.Lock()
		if p.done {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			return
		}
		p.open[c], p.open[up] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		var pair sync.WaitGroup
		pair.Add(2)
		go func() { defer p.wg.Done(); defer pair.Done(); p.pipe(up, c, held) }()
		go func() { defer p.wg.Done(); defer pair.Done(); p.pipe(c, up, held) }()
		p.wg.Go(func() {
			pair.Wait()
			p.mu.Lock()
			delete(p.open, c)
			delete(p.open, up)
			p.mu.Unlock()
		})
	}
}

// pipe copies src to dst, holding each read's bytes while frozen if held.
func (p *Proxy) pipe(dst, src net.Conn, held bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if held {
			p.mu.Lock()
			thaw := p.thaw
			p.mu.Unlock()
			<-thaw
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

// Set freezes (true) or heals (false) the connections the proxy holds,
// those open and those to come.
func (p *Proxy) Set(frozen bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thaw: // thawed
		if frozen {
			p.thaw = make(chan struct{})
		}
	default:
		if !frozen {
			close(p.thaw)
		}
	}
}

// Close stops accepting, heals, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Set(false)
	p.mu.Lock()
	p.done = true
	for c := range p.open {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
