package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Request bodies are the one thing a client controls the pace of: a body
// that trickles in holds a connection, a goroutine and a growing buffer. So
// every body is read under a deadline, a body the edge will not use is
// not read (its connection is closed instead of drained) unless it is
// small enough to read out so its client gets the answer, and
// bodies of API keys not yet seen accepted are read only a few at a time.

// trackedBody records whether the handler read the body to its end.
type trackedBody struct {
	body io.ReadCloser
	eof  atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil {
		b.eof.Store(true)
	}
	return n, err
}

func (b *trackedBody) Close() error { return b.body.Close() }

// guardBody puts every request body under the body read timeout, and after
// the handler makes sure an unread body is not drained: the server would
// otherwise read up to 256 KiB of it at the client's pace before reusing
// the connection. A handler that reads its body clears the deadline (see
// readBody), so it cannot cut a long answer.
func (s *Server) guardBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyReadTimeout))
		tb := &trackedBody{body: r.Body}
		r.Body = tb
		next.ServeHTTP(w, r)
		if !tb.eof.Load() {
			_ = rc.SetReadDeadline(time.Now())
		}
	})
}

// discard reads the rest of a body the edge will not use, at most n
// bytes, under the body's read deadline, and reports whether it reached
// the end.
func discard(body io.Reader, n int64) bool {
	_, err := io.CopyN(io.Discard, body, n+1)
	return errors.Is(err, io.EOF)
}

// abandonBody makes the answer about to be written the last on its
// connection and stops any read of the request body, so a client that
// never sends its body cannot hold the connection.
func abandonBody(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// keyCache remembers which API key hashes the decider accepted or refused
// recently. A key accepted is "verified": its bodies are read without the
// cap on unverified reads; a key refused is answered 401 without reading
// its body. Entries expire, so a key added to or removed from the catalog
// is noticed; the maps are bounded, cleared when full (a clear only sends
// keys back through the capped path once).
type keyCache struct {
	mu       sync.Mutex
	accepted map[string]time.Time
	refused  map[string]time.Time
	now      func() time.Time
}

const (
	keyCacheMax       = 100_000
	keyAcceptedTTL    = 10 * time.Minute
	keyRefusedTTL     = 10 * time.Second
	unverifiedRetryIn = time.Second
)

func newKeyCache() *keyCache {
	return &keyCache{accepted: map[string]time.Time{}, refused: map[string]time.Time{}, now: time.Now}
}

func (c *keyCache) put(m map[string]time.Time, hash string, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(m) >= keyCacheMax {
		clear(m)
	}
	m[hash] = c.now().Add(ttl)
}

func (c *keyCache) has(m map[string]time.Time, hash string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := m[hash]
	if ok && c.now().After(until) {
		delete(m, hash)
		return false
	}
	return ok
}

func (c *keyCache) accept(hash string) {
	c.put(c.accepted, hash, keyAcceptedTTL)
	c.mu.Lock()
	delete(c.refused, hash)
	c.mu.Unlock()
}

func (c *keyCache) refuse(hash string) {
	c.put(c.refused, hash, keyRefusedTTL)
	c.mu.Lock()
	delete(c.accepted, hash)
	c.mu.Unlock()
}

func (c *keyCache) verified(hash string) bool { return c.has(c.accepted, hash) }
func (c *keyCache) rejected(hash string) bool { return c.has(c.refused, hash) }

// maxPresizedBody bounds the buffer allocated ahead of a body from its
// Content-Length: what a client only claims it will send gets no more.
const maxPresizedBody = 64 << 10

// readAll is io.ReadAll into a buffer sized ahead from the body's
// Content-Length (up to maxPresizedBody; -1 when unknown), so that a body
// is read without regrowing and copying its buffer on the way.
func readAll(r io.Reader, contentLength int64) ([]byte, error) {
	if contentLength < 0 || contentLength > maxPresizedBody {
		return io.ReadAll(r)
	}
	// One byte over, so that the read that finds the end does not grow it.
	b := make([]byte, 0, contentLength+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b, nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // longer than it said: grow
		}
	}
}

// readBody reads the body up to MaxBodyBytes, within the body read timeout
// guardBody set. Once read, the deadline is cleared, so it cannot cut the
// answer: the server watches the connection for the client leaving under
// the same deadline.
//
// A body over the limit is refused, but a client still writing it would
// see its connection reset instead of the 413 if the edge stopped reading:
// so a body up to twice the limit is read to its end and discarded first
// (by its Content-Length, the connection then stays usable). A larger one
// is refused by its Content-Length before reading a byte, or cut where
// the second limit is reached, and its connection closed.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	tooLarge := func() *apiError {
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "request_too_large",
			message: fmt.Sprintf("the request body exceeds %d bytes", s.opts.MaxBodyBytes)}
	}
	if r.ContentLength > s.opts.MaxBodyBytes {
		if r.ContentLength > 2*s.opts.MaxBodyBytes || !discard(r.Body, r.ContentLength) {
			abandonBody(w)
		}
		return nil, tooLarge()
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes), r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			// The server closes this connection after the answer (the
			// length was not declared); reading the rest lets the client
			// finish writing before it does.
			if !discard(r.Body, s.opts.MaxBodyBytes) {
				abandonBody(w)
			}
			return nil, tooLarge()
		}
		abandonBody(w)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &apiError{status: http.StatusRequestTimeout, typ: "invalid_request_error", code: "request_timeout",
				message: fmt.Sprintf("the request body did not arrive within %s", s.opts.BodyReadTimeout)}
		}
		e := invalidRequest("", "could not read the request body")
		return nil, &e
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return body, nil
}
