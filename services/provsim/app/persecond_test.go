package app

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRequestsPerSecond(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	sim, err := start(t.Context(), Config{Providers: []ProviderConfig{{
		Name: "p", Listen: "127.0.0.1:0",
		Models: []ModelConfig{{ID: "m", DefaultOutputTokens: 2, Limits: LimitsConfig{RequestsPerSecond: 2}}},
	}}}, nil, options{now: clock, grace: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	p := sim.Provider("p")
	c := newClient(t)
	status := func() int {
		return do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("m", "hi")), nil).status
	}
	require.Equal(t, []int{200, 200, 429}, []int{status(), status(), status()}, "two a second, the third refused")
	mu.Lock()
	now = now.Add(999 * time.Millisecond)
	mu.Unlock()
	require.Equal(t, 429, status(), "still the same second")
	mu.Lock()
	now = now.Add(time.Millisecond)
	mu.Unlock()
	require.Equal(t, []int{200, 200, 429}, []int{status(), status(), status()}, "a new second: capacity again, and again no more")
	require.Equal(t, Outcomes{OK: 4, RateLimited: 3}, p.Stats().Models["m"].Outcomes)

	_, err = ParseConfig([]byte("providers:\n  - name: p\n    listen: 127.0.0.1:0\n    models:\n      - id: m\n        limits: {requests_per_second: -1}\n"))
	require.ErrorContains(t, err, "limits.requests_per_second: must not be negative")
}
