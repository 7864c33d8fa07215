package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The benchmark's own services run as child processes of the benchmark
// binary, so the CPU each one uses can be read from /proc apart from the
// load generator's: the binary runs as a role when roleEnv names one.
const (
	roleEnv     = "EDGEBENCH_ROLE"
	roleArgEnv  = "EDGEBENCH_ROLE_ARG" // the proxy's upstream URL; the upstream's slow chunk interval
	roleUp      = "upstream"
	roleProxy   = "proxy"
	readyPrefix = "listening "
)

// runRole runs the role named in the environment, if any, until SIGTERM, and
// reports whether it did.
func runRole() (bool, error) {
	role := os.Getenv(roleEnv)
	if role == "" {
		return false, nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var h http.Handler
	switch role {
	case roleUp:
		interval, err := time.ParseDuration(os.Getenv(roleArgEnv))
		if err != nil {
			return true, fmt.Errorf("upstream: slow interval: %w", err)
		}
		h = upstream{slowInterval: interval}
	case roleProxy:
		u, err := url.Parse(os.Getenv(roleArgEnv))
		if err != nil {
			return true, fmt.Errorf("proxy: upstream: %w", err)
		}
		h = newProxy(u)
	default:
		return true, fmt.Errorf("unknown role %q", role)
	}
	return true, serve(ctx, h)
}

// serve listens on a free loopback port, announces it on stdout and serves
// until ctx ends.
func serve(ctx context.Context, h http.Handler) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("%s%s\n", readyPrefix, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		return srv.Close()
	case err := <-errc:
		return err
	}
}

// Chunks is how many SSE chunks the fake upstream streams per answer.
const Chunks = 5

// upstream is the fake provider: an OpenAI chat completion, streamed as
// Chunks small chunks (the last with finish_reason and usage, then
// [DONE]) or answered as one JSON object. Under /slow/ the chunks of a
// stream are slowInterval apart, for many concurrent open streams.
type upstream struct{ slowInterval time.Duration }

var (
	chunkWords = [Chunks]string{"Hello", " from", " the", " fake", " upstream"}
	jsonAnswer = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"bench-model",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the fake upstream"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}` + "\n")
)

func (u upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	slow := strings.HasPrefix(r.URL.Path, "/slow/")
	if r.Method != http.MethodPost || strings.TrimPrefix(r.URL.Path, "/slow") != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Stream bool `json:"stream"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(jsonAnswer)))
		_, _ = w.Write(jsonAnswer)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var b []byte
	for i, word := range chunkWords {
		if i > 0 && slow {
			t := time.NewTimer(u.slowInterval)
			select {
			case <-r.Context().Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		b = append(b[:0], `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench-model","choices":[{"index":0,"delta":{`...)
		if i == 0 {
			b = append(b, `"role":"assistant",`...)
		}
		b = append(b, `"content":`...)
		b = strconv.AppendQuote(b, word)
		b = append(b, `},"finish_reason":`...)
		if i == Chunks-1 {
			b = append(b, `"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`...)
		} else {
			b = append(b, `null}]}`...)
		}
		b = append(b, "\n\n"...)
		if i == Chunks-1 {
			b = append(b, "data: [DONE]\n\n"...)
		}
		if _, err := w.Write(b); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// newProxy is the baseline: a stock httputil.ReverseProxy to target that
// flushes every write (FlushInterval -1) and buffers the request body
// first, as a stock proxy streaming the request body can cut SSE answers
// short (golang/go#40747).
func newProxy(target *url.URL) http.Handler {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256, // as the edge's
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
		},
		FlushInterval: -1,
		Transport:     tr,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		rp.ServeHTTP(w, r)
	})
}

// errNoAnnounce is returned when a child exits before saying where it listens.
var errNoAnnounce = errors.New("child exited before announcing its address")
