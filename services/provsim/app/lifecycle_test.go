package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRandomFaultsAreSeeded(t *testing.T) {
	t.Parallel()
	outcomes := func(seed int64) []int {
		sim, err := Start(t.Context(), Config{Seed: seed, Providers: []ProviderConfig{{
			Name: "p", Listen: "127.0.0.1:0",
			Models: []ModelConfig{{ID: "m", Faults: []FaultConfig{
				{Kind: FaultRateLimit, Rate: 0.3},
				{Kind: FaultUnavailable, Rate: 0.3},
			}}},
		}}}, nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, sim.Close()) }()
		c := newClient(t)
		var got []int
		for range 40 {
			got = append(got, do(t, c, http.MethodPost, sim.Provider("p").URL()+"/chat/completions", chatBody(t, userMsg("m", "x")), nil).status)
		}
		st := sim.Provider("p").Stats().Models["m"].Outcomes
		require.Equal(t, int64(40), st.OK+st.RateLimited+st.Unavailable)
		require.NotZero(t, st.OK)
		require.NotZero(t, st.RateLimited)
		require.NotZero(t, st.Unavailable)
		return got
	}
	a := outcomes(3)
	require.Equal(t, a, outcomes(3), "same seed, same faults")
	require.NotEqual(t, a, outcomes(4), "another seed, other faults")
}

func TestRateOneAlwaysFaults(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "", ModelConfig{ID: "m", Faults: []FaultConfig{{Kind: FaultUnavailable, Rate: 1}}})
	c := newClient(t)
	for range 5 {
		require.Equal(t, 503, do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("m", "x")), nil).status)
	}
	// A directive overrides the random draw.
	require.Equal(t, 429, do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("m", "[[provsim:fault=rate_limit]]")), nil).status)
}

// TestClientCancelMidStream checks generation stops when the client leaves
// and the call counts as cancelled, with no completion tokens billed.
func TestClientCancelMidStream(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "", ModelConfig{ID: "m", TokensPerSecond: 20, DefaultOutputTokens: 1000})
	c := newClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	body := userMsg("m", "slow words")
	body["stream"] = true
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL()+"/chat/completions", strings.NewReader(chatBody(t, body)))
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	buf := make([]byte, 64)
	_, err = resp.Body.Read(buf) // the stream has started
	require.NoError(t, err)
	cancel()
	_ = resp.Body.Close()
	require.Eventually(t, func() bool {
		return p.Stats().Models["m"].Outcomes.Cancelled == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, p.Stats().Models["m"].CompletionTokens)
}

// TestCloseEndsEverything checks Close returns promptly with a hung request
// and a stream that would outlast the grace period, and leaves no goroutine
// (TestMain checks the latter).
func TestCloseEndsEverything(t *testing.T) {
	t.Parallel()
	sim, err := start(t.Context(), Config{Providers: []ProviderConfig{{
		Name: "p", Listen: "127.0.0.1:0",
		Models: []ModelConfig{{ID: "m", TokensPerSecond: 5, DefaultOutputTokens: 1000}},
	}}}, nil, options{now: time.Now, grace: 200 * time.Millisecond})
	require.NoError(t, err)
	p := sim.Provider("p")
	c := newClient(t)

	var wg sync.WaitGroup
	errs := make([]error, 2)
	streaming := make(chan error, 1) // the long stream's first byte, or why not
	for i, text := range []string{"[[provsim:fault=hang]]", "a long stream"} {
		body := userMsg("m", text)
		body["stream"] = true
		wg.Go(func() {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL()+"/chat/completions", strings.NewReader(chatBody(t, body)))
			if err != nil {
				errs[i] = err
				return
			}
			resp, err := c.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			if i == 1 {
				_, err := io.ReadFull(resp.Body, make([]byte, 1))
				streaming <- err
				if err != nil {
					errs[i] = err
					return
				}
			}
			_, errs[i] = io.ReadAll(resp.Body)
		})
	}
	require.Eventually(t, func() bool {
		st := p.Stats()
		return st.Requests == 2
	}, 5*time.Second, 5*time.Millisecond)
	select {
	case err := <-streaming:
		require.NoError(t, err, "the long stream started")
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the long stream never started")
	}

	// The stream would run for 200 s; Close cuts it after the grace period.
	closed := make(chan error, 1)
	go func() { closed <- sim.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(30 * time.Second): // a hang guard, far below the stream's 200 s
		t.Fatal("Close waited for the stream")
	}
	wg.Wait()
	for i, err := range errs {
		require.Error(t, err, "request %d was cut", i)
	}
	st := p.Stats().Models["m"].Outcomes
	require.Equal(t, Outcomes{Hang: 1, Cancelled: 1}, st)
	require.NoError(t, sim.Close(), "idempotent")

	// The port is free again.
	_, err = http.Get("http://" + p.Addr() + "/healthz") //nolint:noctx // a refused dial needs no context
	require.Error(t, err)
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	_, err := Start(t.Context(), Config{}, nil)
	require.ErrorContains(t, err, "providers: at least one provider is required")

	// A port that is taken fails start-up and releases the ports already bound.
	first, err := Start(t.Context(), Config{Providers: []ProviderConfig{{Name: "a", Listen: "127.0.0.1:0", Models: []ModelConfig{{ID: "m"}}}}}, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, first.Close()) }()
	taken := first.Provider("a").Addr()
	_, err = Start(t.Context(), Config{Providers: []ProviderConfig{
		{Name: "ok", Listen: "127.0.0.1:0", Models: []ModelConfig{{ID: "m"}}},
		{Name: "clash", Listen: taken, Models: []ModelConfig{{ID: "m"}}},
	}}, nil)
	require.ErrorContains(t, err, "provider clash: listen")
	require.Nil(t, first.Provider("nope"))
}

func TestConcurrentRequests(t *testing.T) {
	t.Parallel()
	p := startProvider(t, "", ModelConfig{
		ID: "m", Cache: CacheConfig{Enabled: true, BlockTokens: 16, MinTokens: 16},
		TTFT:   TTFTConfig{Base: Duration(time.Millisecond), Jitter: 0.5},
		Faults: []FaultConfig{{Kind: FaultUnavailable, Rate: 0.2}},
		Limits: LimitsConfig{RequestsPerMinute: 1000},
	})
	c := newClient(t)
	var wg sync.WaitGroup
	errs := make([]error, 41)
	for i := range 40 {
		body := userMsg("m", strings.Repeat(fmt.Sprintf("w%d ", i%3), 100))
		body["stream"] = i%2 == 0
		payload := chatBody(t, body)
		wg.Go(func() {
			// No require here: FailNow must run on the test goroutine.
			resp, err := c.Post(p.URL()+"/chat/completions", "application/json", strings.NewReader(payload)) //nolint:noctx // bounded by the server
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			_, errs[i] = io.Copy(io.Discard, resp.Body)
		})
	}
	wg.Go(func() {
		for range 10 {
			if err := p.SetModel(ModelConfig{ID: "m", Cache: CacheConfig{Enabled: true, BlockTokens: 16, MinTokens: 16}, TokensPerSecond: 10000}); err != nil {
				errs[40] = err
			}
		}
	})
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	st := p.Stats().Models["m"]
	require.Equal(t, int64(40), st.Requests)
	require.Equal(t, int64(40), st.Outcomes.OK+st.Outcomes.Unavailable)
}

// syncBuffer is a bytes.Buffer safe for the logger and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunFlags(t *testing.T) {
	t.Setenv(EnvConfig, "")
	t.Setenv(EnvSeed, "")
	t.Setenv(EnvLogLevel, "")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "all flag problems at once", args: []string{"--seed", "x", "--log-level", "loud"}, want: []string{"--config: required", "--seed:", "--log-level:"}},
		{name: "stray argument", args: []string{"--config", "c.yaml", "extra"}, want: []string{"unexpected arguments"}},
		{name: "unknown flag", args: []string{"--nope"}, want: []string{"flag provided but not defined"}},
		{name: "missing file", args: []string{"--config", filepath.Join(t.TempDir(), "none.yaml")}, want: []string{"read config"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr syncBuffer
			err := Run(t.Context(), tt.args, &stderr)
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	require.NoError(t, Run(t.Context(), []string{"-h"}, io.Discard))
}

func TestRunServesUntilCancelled(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sim.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
providers:
  - name: only
    listen: 127.0.0.1:0
    models: [{id: m}]
`), 0o600))
	// The config comes from the environment fallback.
	t.Setenv(EnvConfig, path)
	t.Setenv(EnvSeed, "9")
	t.Setenv(EnvLogLevel, "debug")

	ctx, cancel := context.WithCancel(t.Context())
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() { done <- Run(ctx, nil, &stderr) }()

	var url string
	require.Eventually(t, func() bool {
		_, rest, ok := strings.Cut(stderr.String(), "url=")
		if !ok {
			return false
		}
		url, _, _ = strings.Cut(rest, "\n")
		return true
	}, 5*time.Second, 10*time.Millisecond)
	c := newClient(t)
	resp := do(t, c, http.MethodPost, url+"/chat/completions", chatBody(t, userMsg("m", "hi")), nil)
	require.Equal(t, 200, resp.status)
	require.Contains(t, stderr.String(), "outcome=ok")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	require.Contains(t, stderr.String(), "shutting down")
}
