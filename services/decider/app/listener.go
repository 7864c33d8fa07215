package app

import (
	"net"
	"sync"
)

// handoff is the decider's listener, served by one gRPC server after
// another: while the decider starts, by a server that answers health
// checks only (NOT_SERVING) and UNAVAILABLE to everything else; once every
// component is built, by the real one. One goroutine accepts from the
// socket and hands each connection to whichever server is serving now
// (Serve), so the port never closes between the two and nothing the real
// server needs is bound late: it is built whole before it is given a
// connection. A connection accepted while neither serves waits for the
// next one; one the start-up server held when it stopped is closed, and its
// client reconnects to the real server on the same address.
type handoff struct {
	lis   net.Listener
	conns chan net.Conn
	// failed is closed when the socket stops accepting; err says why.
	failed chan struct{}
	err    error
	// closed is closed by Close, which ends the accepting goroutine.
	closed    chan struct{}
	closeOnce sync.Once
	done      chan struct{} // closed when the accepting goroutine returned
}

// newHandoff starts accepting on lis.
func newHandoff(lis net.Listener) *handoff {
	h := &handoff{lis: lis, conns: make(chan net.Conn), failed: make(chan struct{}), closed: make(chan struct{}), done: make(chan struct{})}
	go h.accept()
	return h
}

func (h *handoff) accept() {
	defer close(h.done)
	for {
		c, err := h.lis.Accept()
		if err != nil {
			h.err = err
			close(h.failed)
			return
		}
		select {
		case h.conns <- c:
		case <-h.closed:
			_ = c.Close()
			return
		}
	}
}

// Serve returns the listener one server serves on: it takes connections
// until the server closes it (grpc.Server.Stop closes its listeners), which
// leaves the socket open for the next.
func (h *handoff) Serve() net.Listener {
	return &turn{h: h, stop: make(chan struct{})}
}

// Close closes the socket and waits for the accepting goroutine.
func (h *handoff) Close() error {
	var err error
	h.closeOnce.Do(func() {
		close(h.closed)
		err = h.lis.Close()
		<-h.done
	})
	return err
}

// turn is one server's view of the handoff.
type turn struct {
	h    *handoff
	stop chan struct{}
	once sync.Once
}

// Accept implements [net.Listener.Accept]: the next connection, the
// socket's failure, or net.ErrClosed once this turn (or the socket) is
// closed.
func (t *turn) Accept() (net.Conn, error) {
	select {
	case <-t.stop:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-t.h.conns:
		return c, nil
	case <-t.h.failed:
		return nil, t.h.err
	case <-t.h.closed:
		return nil, net.ErrClosed
	case <-t.stop:
		return nil, net.ErrClosed
	}
}

// Close implements [net.Listener.Close]: it ends this turn, not the socket.
func (t *turn) Close() error {
	t.once.Do(func() { close(t.stop) })
	return nil
}

// Addr implements [net.Listener.Addr].
func (t *turn) Addr() net.Addr { return t.h.lis.Addr() }
