package app

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCapacity: over a sliding minute of the scaled clock, calls past the
// capacity are answered 429 with the scaled, fixed Retry-After and no
// x-ratelimit headers, and are not counted; the same sequence as the routing
// simulation's TestCapacitySlidingMinute, at time scale 0.5.
func TestCapacity(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	t0 := time.Unix(1_000_000, 0)
	now := t0
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	at := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = t0.Add(d / 2) // the scale below
	}
	sim, err := start(t.Context(), Config{TimeScale: 0.5, Providers: []ProviderConfig{{
		Name: "p", Listen: "127.0.0.1:0",
		Models: []ModelConfig{{ID: "m", DefaultOutputTokens: 1,
			Capacity: CapacityConfig{RequestsPerMinute: 2, TokensPerMinute: 1000, RetryAfter: Duration(7 * time.Second)}}},
	}}}, nil, options{now: clock, grace: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	p := sim.Provider("p")
	c := newClient(t)
	// A prompt of n tokens by the shared rule: 3 + 4 + 1 + content/4.
	call := func(n int) response {
		content := ""
		for range n - 8 {
			content += "word"
		}
		return do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("m", content)), nil)
	}
	require.Equal(t, 200, call(100).status)
	at(time.Second)
	require.Equal(t, 200, call(100).status)
	at(2 * time.Second)
	r := call(100)
	require.Equal(t, 429, r.status, "a third call within the minute")
	require.Equal(t, "4", r.header.Get("Retry-After"), "7s at scale 0.5, rounded up")
	require.Equal(t, "3500", r.header.Get("Retry-After-Ms"))
	require.Empty(t, r.header.Get("X-Ratelimit-Limit-Requests"), "capacity is not announced")
	at(time.Minute)
	require.Equal(t, 200, call(100).status, "the first left the (scaled) window")
	at(90 * time.Second)
	require.Equal(t, 429, call(950).status, "with the call at 1:00, over the tokens per minute")
	require.Equal(t, Outcomes{OK: 3, RateLimited: 2}, p.Stats().Models["m"].Outcomes)

	_, err = ParseConfig([]byte("providers:\n  - name: p\n    listen: 127.0.0.1:0\n    models:\n      - id: m\n        capacity: {requests_per_minute: -1}\n"))
	require.ErrorContains(t, err, "capacity.requests_per_minute: must not be negative")
}
