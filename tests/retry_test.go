package tests

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// callLog is a reverse proxy in front of one simulated provider that
// records when each chat or Messages call arrived and when its answer
// left, with its status, the body it was sent (and its answer's bytes,
// with keepBodies).
type callLog struct {
	keepBodies bool

	mu    sync.Mutex
	calls []call
}

type call struct {
	arrived, answered time.Time
	status            int
	// path is the call's URL path; answer its answer, with keepBodies.
	path   string
	answer []byte
	body   []byte
}

func (l *callLog) proxy(t testing.TB, target string) string {
	u, err := url.Parse(target)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := call{arrived: time.Now(), path: r.URL.Path}
		var err error
		if c.body, err = io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(c.body))
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		if l.keepBodies {
			rec.body = &bytes.Buffer{}
		}
		rp.ServeHTTP(rec, r)
		c.answered, c.status = time.Now(), rec.status
		if rec.body != nil {
			c.answer = rec.body.Bytes()
		}
		if r.URL.Path == u.Path+"/chat/completions" || r.URL.Path == u.Path+"/messages" {
			l.mu.Lock()
			l.calls = append(l.calls, c)
			l.mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + u.Path
}

func (l *callLog) all() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]call(nil), l.calls...)
}

type statusWriter struct {
	http.ResponseWriter
	status int
	// body, when set, keeps a copy of what was written.
	body *bytes.Buffer
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.body != nil {
		w.body.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// recorded starts the system with alpha behind a call log.
func recorded(t *testing.T, modelYAML string) (*stack, *callLog) {
	alpha := &callLog{}
	s := startSystemWith(t, systemOptions{modelYAML: modelYAML, baseURL: func(p, u string) string {
		if p == "alpha" {
			return alpha.proxy(t, u)
		}
		return u
	}}, "--report-flush-interval=20ms")
	return s, alpha
}

const ask = `{"model":"` + model + `","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`

// A 429 whose code says the provider account's quota is spent is never
// retried on that endpoint: the request moves on at once, and the broker
// keeps the endpoint paused for everyone.
func TestSpendLimitNotRetriedOnThatEndpoint(t *testing.T) {
	s, alpha := recorded(t, "")
	require.NoError(t, s.sim.Provider("alpha").SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8,
		Faults: []provsim.FaultConfig{{Kind: provsim.FaultSpendLimit, Rate: 1}}}))

	code, h, body := s.post(t, testKey, ask)
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, "beta", body["provider"], "the next provider serves")
	require.Equal(t, "1", h.Get("X-Switchboard-Retries"))
	// The pause reaches the broker with the request's reconciliation, on
	// the Report stream after the answer: wait for it, not for luck.
	require.Eventually(t, func() bool { return s.decider.PausedRoutes() > 0 }, 10*time.Second, 10*time.Millisecond,
		"the broker pauses alpha on the request's reconciliation")
	for range 3 {
		code, h, body = s.post(t, testKey, ask)
		require.Equal(t, http.StatusOK, code, "%v", body)
		require.Equal(t, "beta", body["provider"])
		require.Equal(t, "0", h.Get("X-Switchboard-Retries"), "alpha is paused at the broker: not even tried")
	}
	calls := alpha.all()
	require.Len(t, calls, 1, "alpha was called once, for the first request only")
	require.Equal(t, http.StatusTooManyRequests, calls[0].status)
	require.EqualValues(t, 1, s.sim.Provider("alpha").Stats().Models[simModel].Outcomes.RateLimited)
}

// A model whose fallback policy forbids moving keeps its requests on their
// endpoint: an overloaded endpoint is retried only after its Retry-After,
// within the request's retry budget, and no other provider is called.
func TestOverloadStormHonoursRetryAfterWithoutFallback(t *testing.T) {
	s, alpha := recorded(t, "    fallback: {allow: false}")
	require.NoError(t, s.sim.Provider("alpha").SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8,
		Faults: []provsim.FaultConfig{{Kind: provsim.FaultOverloaded, Rate: 1, RetryAfter: provsim.Duration(time.Second)}}}))

	start := time.Now()
	code, h, body := s.post(t, testKey, ask)
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", body)
	require.Equal(t, "2", h.Get("X-Switchboard-Retries"), "the default budget: two retries")
	ra, err := strconv.Atoi(h.Get("Retry-After"))
	require.NoError(t, err, "a final 503 says when to come back")
	require.GreaterOrEqual(t, ra, 1)
	require.LessOrEqual(t, ra, 2, "Retry-After 1s plus at most 100ms of jitter, rounded up")

	calls := alpha.all()
	require.Len(t, calls, 3, "the first call and two retries: the retry budget bounds them")
	for i, c := range calls {
		require.Equal(t, 529, c.status)
		require.True(t, c.arrived.After(start))
		if i > 0 {
			gap := c.arrived.Sub(calls[i-1].answered)
			require.GreaterOrEqual(t, gap, time.Second, "call %d came %s after the last 529 with Retry-After: 1", i+1, gap)
		}
	}
	for _, p := range []string{"beta", "gamma"} {
		require.Zero(t, s.sim.Provider(p).Stats().Models[simModel].Outcomes.OK, "fallback forbidden: %s never called", p)
	}

}

// A 529 storm with Retry-After: requests at once on one endpoint. Each
// makes at most the retry budget's calls, and after the first wave none
// reaches the endpoint until Retry-After has passed.
func TestOverloadStormWaitsForRetryAfter(t *testing.T) {
	s, alpha := recorded(t, "    fallback: {allow: false}")
	require.NoError(t, s.sim.Provider("alpha").SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8,
		Faults: []provsim.FaultConfig{{Kind: provsim.FaultOverloaded, Rate: 1, RetryAfter: provsim.Duration(time.Second)}}}))
	// Pinned to alpha: once alpha cools down at the decider, routing would
	// send new requests elsewhere.
	const pinned = `{"model":"` + model + `","max_tokens":4,"provider":{"only":["alpha"]},"messages":[{"role":"user","content":"hello"}]}`
	var wg sync.WaitGroup
	codes := make([]int, 4)
	retries := make([]string, 4)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, h, _ := s.post(t, testKey, pinned)
			codes[i], retries[i] = code, h.Get("X-Switchboard-Retries")
		}()
	}
	wg.Wait()
	storm := alpha.all()
	require.NotEmpty(t, storm)
	require.LessOrEqual(t, len(storm), 4*3, "at most 1 + 2 retries per request")
	for i, r := range retries {
		require.Contains(t, []int{http.StatusServiceUnavailable, http.StatusTooManyRequests}, codes[i])
		if r == "" {
			continue // refused at Decide: alpha was paused already
		}
		n, err := strconv.Atoi(r)
		require.NoError(t, err)
		require.LessOrEqual(t, n, 2, "the retry budget")
	}
	first := storm[0].answered
	for _, c := range storm {
		if c.answered.Before(first) {
			first = c.answered
		}
	}
	// The first wave's calls were admitted before any 529 was known; they
	// all arrive within moments of each other. Any later call is a retry,
	// which the broker holds back until Retry-After (1s) has passed.
	for _, c := range storm {
		late := c.arrived.Sub(first)
		require.False(t, late > 200*time.Millisecond && late < time.Second,
			"a call %s after the storm's first 529 with Retry-After: 1", late)
	}
	for _, p := range []string{"beta", "gamma"} {
		st := s.sim.Provider(p).Stats().Models[simModel].Outcomes
		require.Zero(t, st.OK+st.RateLimited+st.Unavailable, "%s never called", p)
	}
}

// With fallbacks forbidden, a spend limit ends the request at once: the
// endpoint is not retried and no other provider is called.
func TestSpendLimitWithoutFallbackIsNotRetried(t *testing.T) {
	s, alpha := recorded(t, "    fallback: {allow: false}")
	require.NoError(t, s.sim.Provider("alpha").SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8,
		Faults: []provsim.FaultConfig{{Kind: provsim.FaultSpendLimit, Rate: 1}}}))
	code, h, body := s.post(t, testKey, ask)
	require.Equal(t, http.StatusBadGateway, code, "%v", body)
	require.Equal(t, "0", h.Get("X-Switchboard-Retries"))
	require.Len(t, alpha.all(), 1)
	code, _, body = s.post(t, testKey, ask)
	require.Equal(t, http.StatusTooManyRequests, code, "%v", body)
	require.Len(t, alpha.all(), 1, "the broker keeps alpha paused: refused before any call")
	for _, p := range []string{"beta", "gamma"} {
		st := s.sim.Provider(p).Stats().Models[simModel].Outcomes
		require.Zero(t, st.OK+st.RateLimited+st.Unavailable, "fallback forbidden: %s never called", p)
	}
}

// A request refused at Decide because its only endpoint is paused after an
// overload (a 529 with Retry-After) hears 503, as the request that met the
// overload did, not 429: the provider is overloaded, the caller is within
// its limits.
func TestPausedByOverloadRefusedWith503(t *testing.T) {
	s, _ := recorded(t, "    fallback: {allow: false}")
	require.NoError(t, s.sim.Provider("alpha").SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8,
		Faults: []provsim.FaultConfig{{Kind: provsim.FaultOverloaded, Rate: 1, RetryAfter: provsim.Duration(30 * time.Second)}}}))
	const pinned = `{"model":"` + model + `","max_tokens":4,"provider":{"only":["alpha"]},"messages":[{"role":"user","content":"hello"}]}`
	code, _, body := s.post(t, testKey, pinned)
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", body)

	code, h, body := s.post(t, testKey, pinned)
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", body)
	require.Empty(t, h.Get("X-Switchboard-Retries"), "refused at Decide: no provider call")
	require.Equal(t, "provider_paused", h.Get("X-Switchboard-Reason"))
	require.NotEmpty(t, h.Get("Retry-After"))
}
