package upstream

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
)

// watchingClient is a client that records what it was sent and flushed,
// and signals when what it received holds a given text.
type watchingClient struct {
	h    http.Header
	mu   sync.Mutex
	got  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (c *watchingClient) Header() http.Header { return c.h }
func (c *watchingClient) WriteHeader(int)     {}
func (c *watchingClient) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got.Write(b)
}

// Flush is when bytes reach the client.
func (c *watchingClient) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if strings.Contains(c.got.String(), c.want) {
		c.once.Do(func() { close(c.seen) })
	}
}

// TestChunkNotHeldWhileProviderIsSilent: chunks that arrive together may
// go out together, but a chunk is written out before the edge waits for
// the provider's next one. The provider here sends its second token only
// once the client has the first.
func TestChunkNotHeldWhileProviderIsSilent(t *testing.T) {
	client := &watchingClient{h: http.Header{}, want: "second-token-chunk", seen: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_, _ = w.Write([]byte(`data: {"choices":[{"delta":{"content":"first"}}]}` + "\n\n" +
			`data: {"choices":[{"delta":{"content":"second-token-chunk"}}]}` + "\n\n"))
		_ = rc.Flush()
		select {
		case <-client.seen:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte(`data: {"choices":[{"delta":{"content":"third"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"))
	}))
	defer srv.Close()
	c := New(Options{Client: srv.Client(), Credentials: noCredentials{}, FirstTokenTimeout: time.Minute,
		IdleTimeout: time.Minute, WriteTimeout: time.Minute})
	ep := &switchboardv1.Endpoint{Id: "e", Provider: "alpha", BaseUrl: srv.URL + "/v1", UpstreamModel: "up"}
	req := Request{ID: "gen-1", Stream: true,
		Body:     func(*switchboardv1.Endpoint) ([]byte, error) { return []byte(`{}`), nil },
		Rewriter: rewrite.Rewriter{Model: rewrite.String("m"), Provider: rewrite.String("alpha")},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang fails instead of blocking the suite
	defer cancel()
	l := c.NewLeg(ctx, req, ep)
	require.True(t, l.Open(ctx), l.Result.ErrText)
	l.Deliver(ctx, client)
	l.Close()
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, l.Result.Outcome, l.Result.ErrText)
	out := client.got.String()
	require.Equal(t, 4, strings.Count(out, "data: "), out)
	require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"), out)
	require.Equal(t, int64(len("first")+len("second-token-chunk")+len("third")), l.Result.Delivered)
}

// TestChunksReadTogetherBeforeAMalformedOne: chunks read in one piece with
// a malformed one after them reach the client, then the error event, and
// no [DONE]; what they carried counts as delivered.
func TestChunksReadTogetherBeforeAMalformedOne(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(`data: {"choices":[{"delta":{"content":"one"}}]}` + "\n\n" +
			`data: {"choices":[{"delta":{"content":"two"}}]}` + "\n\n" +
			`data: {"choices":[{"delta":{"content":"three"}}]}` + "\n\n" +
			"data: {\"choices\":[\n\n"))
	}))
	defer srv.Close()
	c := New(Options{Client: srv.Client(), Credentials: noCredentials{}, FirstTokenTimeout: time.Minute,
		IdleTimeout: time.Minute, WriteTimeout: time.Minute})
	ep := &switchboardv1.Endpoint{Id: "e", Provider: "alpha", BaseUrl: srv.URL + "/v1", UpstreamModel: "up"}
	req := Request{ID: "gen-1", Stream: true,
		Body:     func(*switchboardv1.Endpoint) ([]byte, error) { return []byte(`{}`), nil },
		Rewriter: rewrite.Rewriter{Model: rewrite.String("m"), Provider: rewrite.String("alpha")},
	}
	ctx := context.Background()
	client := &watchingClient{h: http.Header{}, want: "never", seen: make(chan struct{})}
	l := c.NewLeg(ctx, req, ep)
	require.True(t, l.Open(ctx), l.Result.ErrText)
	l.Deliver(ctx, client)
	l.Close()
	require.Equal(t, switchboardv1.Outcome_OUTCOME_MALFORMED, l.Result.Outcome, l.Result.ErrText)
	out := client.got.String()
	for _, word := range []string{"one", "two", "three", "stream_interrupted"} {
		require.Contains(t, out, word)
	}
	require.NotContains(t, out, "[DONE]")
	require.Equal(t, 4, strings.Count(out, "data: "), out)
	require.Equal(t, int64(len("one")+len("two")+len("three")), l.Result.Delivered)
}
