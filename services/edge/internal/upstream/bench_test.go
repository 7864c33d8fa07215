package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// noCredentials is a credential store with none.
type noCredentials struct{}

func (noCredentials) Lookup(string, *url.URL) (string, error) { return "", nil }

// discard is a client that takes every write and flush, counting the
// flushes.
type discard struct {
	h       http.Header
	flushes int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      { d.flushes++ }

// SetWriteDeadline takes the write deadlines the server's own response
// writer takes; without it every deadline would cost an error.
func (d *discard) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkStreamedLeg is one streamed call end to end on loopback: a
// provider streaming five small chunks (the last with finish_reason and
// usage) and [DONE], each flushed, read, rewritten and relayed by a leg.
func BenchmarkStreamedLeg(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fakeupstream.WriteBenchStream(w)
	}))
	defer srv.Close()
	c := New(Options{Client: srv.Client(), Credentials: noCredentials{}, FirstTokenTimeout: time.Minute,
		IdleTimeout: time.Minute, WriteTimeout: time.Minute})
	ep := &switchboardv1.Endpoint{Id: "e", Provider: "alpha", BaseUrl: srv.URL + "/v1", UpstreamModel: "up"}
	body := []byte(`{"model":"up","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	req := Request{ID: "gen-1", Stream: true, IncludeUsage: true,
		Body:     func(*switchboardv1.Endpoint) ([]byte, error) { return body, nil },
		Rewriter: rewrite.Rewriter{ID: rewrite.String("gen-1"), Model: rewrite.String("org/model"), Provider: rewrite.String("alpha"), KeepUsage: true},
	}
	ctx := context.Background()
	w := &discard{h: http.Header{}}
	for b.Loop() {
		l := c.NewLeg(ctx, req, ep)
		if !l.Open(ctx) {
			b.Fatalf("open: %s", l.Result.ErrText)
		}
		l.Deliver(ctx, w)
		l.Close()
		if l.Result.Outcome != switchboardv1.Outcome_OUTCOME_OK {
			b.Fatalf("outcome %v: %s", l.Result.Outcome, l.Result.ErrText)
		}
	}
	b.ReportMetric(float64(w.flushes)/float64(b.N), "flushes/op")
}
