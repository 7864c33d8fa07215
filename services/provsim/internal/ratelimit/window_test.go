package ratelimit

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	type step struct {
		at      time.Duration // offset from t0
		tokens  int64
		allowed bool
		retry   time.Duration
		reqRem  int64
		tokRem  int64
		reset   time.Duration
	}
	tests := []struct {
		name  string
		lim   Limits
		steps []step
	}{
		{
			name: "requests per minute",
			lim:  Limits{RequestsPerMinute: 2},
			steps: []step{
				{at: 0, tokens: 10, allowed: true, reqRem: 1, reset: time.Minute},
				{at: 10 * time.Second, tokens: 10, allowed: true, reqRem: 0, reset: 50 * time.Second},
				{at: 20 * time.Second, tokens: 10, allowed: false, retry: 40 * time.Second, reqRem: 0, reset: 40 * time.Second},
				// The first request left the window: one slot again.
				{at: 60 * time.Second, tokens: 10, allowed: true, reqRem: 0, reset: 10 * time.Second},
			},
		},
		{
			name: "tokens per minute",
			lim:  Limits{TokensPerMinute: 100},
			steps: []step{
				{at: 0, tokens: 60, allowed: true, tokRem: 40, reset: time.Minute},
				{at: 5 * time.Second, tokens: 30, allowed: true, tokRem: 10, reset: 55 * time.Second},
				{at: 6 * time.Second, tokens: 50, allowed: false, retry: 54 * time.Second, tokRem: 10, reset: 54 * time.Second},
				{at: 7 * time.Second, tokens: 101, allowed: false, retry: Span, tokRem: 10, reset: 53 * time.Second},
				{at: 61 * time.Second, tokens: 50, allowed: true, tokRem: 20, reset: 4 * time.Second},
			},
		},
		{
			name: "both, tokens bind first",
			lim:  Limits{RequestsPerMinute: 10, TokensPerMinute: 50},
			steps: []step{
				{at: 0, tokens: 50, allowed: true, reqRem: 9, tokRem: 0, reset: time.Minute},
				{at: 30 * time.Second, tokens: 1, allowed: false, retry: 30 * time.Second, reqRem: 9, tokRem: 0, reset: 30 * time.Second},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var w Window
			for i, s := range tt.steps {
				d := w.Admit(tt.lim, s.tokens, t0.Add(s.at))
				require.Equal(t, s.allowed, d.Allowed, "step %d", i)
				require.Equal(t, s.retry, d.RetryAfter, "step %d", i)
				if tt.lim.RequestsPerMinute > 0 {
					require.Equal(t, s.reqRem, d.Requests.Remaining, "step %d", i)
					require.Equal(t, tt.lim.RequestsPerMinute, d.Requests.Limit)
				}
				if tt.lim.TokensPerMinute > 0 {
					require.Equal(t, s.tokRem, d.Tokens.Remaining, "step %d", i)
				}
				require.Equal(t, s.reset, d.Requests.Reset, "step %d", i)
			}
		})
	}
}

// TestWindowConcurrent checks that concurrent callers never get more than the
// quota admitted.
func TestWindowConcurrent(t *testing.T) {
	t.Parallel()
	var w Window
	now := time.Unix(0, 0)
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if w.Admit(Limits{RequestsPerMinute: 7}, 1, now).Allowed {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 7, admitted)
}
