package chaos

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// tap stands in front of one simulated provider and records, for every
// chat call that reaches it, when it arrived and when it ended: the
// arrivals of any sliding minute and the calls in flight at any moment, as
// the provider saw them. The provider's own counters (GET /admin/stats)
// must agree with the tap's count; the run checks they do.
type tap struct {
	name string
	srv  *http.Server
	ln   net.Listener

	mu       sync.Mutex
	arrivals []time.Time
	// flight is every change of the number of calls in flight, in order.
	flight   []flightPoint
	inFlight int
}

// flightPoint is the number of calls in flight from at on.
type flightPoint struct {
	at time.Time
	n  int
}

// startTap proxies a loopback listener to the provider at target (its base
// URL without /v1).
func startTap(name, target string) (*tap, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &tap{name: name, ln: ln}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1 // relay every stream chunk at once
	// A hedge's losing leg is cancelled by design: its "context canceled"
	// is not worth a line.
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	// A call ends, for the tap, when the provider's answer has been read to
	// its end (or the call failed): before the edge can have all of it, so
	// before the edge can give its slot back. Counting until the handler
	// returns would let a call overlap, by a few milliseconds, the next one
	// its slot admits.
	proxy.ModifyResponse = func(resp *http.Response) error {
		if done, ok := resp.Request.Context().Value(doneKey{}).(func()); ok {
			resp.Body = &endBody{ReadCloser: resp.Body, done: done}
		}
		return nil
	}
	t.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			proxy.ServeHTTP(w, r)
			return
		}
		t.enter()
		done := sync.OnceFunc(t.leave)
		defer done()
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), doneKey{}, done)))
	})}
	go func() { _ = t.srv.Serve(ln) }()
	return t, nil
}

type doneKey struct{}

// endBody calls done once the body was read to its end or closed.
type endBody struct {
	io.ReadCloser
	done func()
}

func (b *endBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.done()
	}
	return n, err
}

func (b *endBody) Close() error {
	b.done()
	return b.ReadCloser.Close()
}

// url is the base URL the catalog gives the endpoint (…/v1).
func (t *tap) url() string { return "http://" + t.ln.Addr().String() + "/v1" }

func (t *tap) enter() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	t.arrivals = append(t.arrivals, now)
	t.inFlight++
	t.flight = append(t.flight, flightPoint{at: now, n: t.inFlight})
}

func (t *tap) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inFlight--
	t.flight = append(t.flight, flightPoint{at: time.Now(), n: t.inFlight})
}

// record is a copy of what the tap saw.
func (t *tap) record() ([]time.Time, []flightPoint) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]time.Time(nil), t.arrivals...), append([]flightPoint(nil), t.flight...)
}

func (t *tap) close() { _ = t.srv.Close() }
