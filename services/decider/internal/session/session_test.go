package session

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestKeepAndLast(t *testing.T) {
	tb := New(Options{})
	t0 := time.Unix(1_800_000_000, 0)
	_, _, ok := tb.Last("acme", "m", "s1")
	require.False(t, ok)

	tb.Keep("acme", "m", "s1", "r1", "a/m", t0)
	ep, at, ok := tb.Last("acme", "m", "s1")
	require.True(t, ok)
	require.Equal(t, "a/m", ep)
	require.Equal(t, t0, at)

	for _, other := range [][3]string{{"other", "m", "s1"}, {"acme", "m2", "s1"}, {"acme", "m", "s2"}} {
		_, _, ok := tb.Last(other[0], other[1], other[2])
		require.False(t, ok, "a conversation is one tenant's session for one model: %v", other)
	}

	tb.Keep("acme", "m", "s1", "r2", "b/m", t0.Add(time.Minute))
	ep, at, _ = tb.Last("acme", "m", "s1")
	require.Equal(t, "b/m", ep)
	require.Equal(t, t0.Add(time.Minute), at, "each turn refreshes the conversation")
	require.Equal(t, 1, tb.Len())
}

func TestServedMovesTheConversation(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name   string
		run    func(tb *Table)
		wantEP string
		wantAt time.Time
	}{
		{
			name: "a fallback answered: the conversation follows it",
			run: func(tb *Table) {
				tb.Keep("acme", "m", "s", "r1", "a/m", t0)
				tb.Served("r1", "b/m", t0.Add(3*time.Second))
			},
			wantEP: "b/m", wantAt: t0.Add(3 * time.Second),
		},
		{
			name: "a late report of an earlier turn changes nothing",
			run: func(tb *Table) {
				tb.Keep("acme", "m", "s", "r1", "a/m", t0)
				tb.Keep("acme", "m", "s", "r2", "c/m", t0.Add(time.Second))
				tb.Served("r1", "b/m", t0.Add(3*time.Second))
			},
			wantEP: "c/m", wantAt: t0.Add(time.Second),
		},
		{
			name: "an unknown request changes nothing",
			run: func(tb *Table) {
				tb.Keep("acme", "m", "s", "r1", "a/m", t0)
				tb.Served("r9", "b/m", t0.Add(3*time.Second))
			},
			wantEP: "a/m", wantAt: t0,
		},
		{
			name: "a request is corrected once",
			run: func(tb *Table) {
				tb.Keep("acme", "m", "s", "r1", "a/m", t0)
				tb.Served("r1", "a/m", t0.Add(time.Second))
				tb.Served("r1", "b/m", t0.Add(2*time.Second))
			},
			wantEP: "a/m", wantAt: t0.Add(time.Second),
		},
		{
			name: "a turn without a request id is not corrected",
			run: func(tb *Table) {
				tb.Keep("acme", "m", "s", "", "a/m", t0)
				tb.Served("", "b/m", t0.Add(time.Second))
			},
			wantEP: "a/m", wantAt: t0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := New(Options{})
			tt.run(tb)
			ep, at, ok := tb.Last("acme", "m", "s")
			require.True(t, ok)
			require.Equal(t, tt.wantEP, ep)
			require.Equal(t, tt.wantAt, at)
		})
	}
}

func TestBounded(t *testing.T) {
	tb := New(Options{Capacity: 10})
	t0 := time.Unix(1_800_000_000, 0)
	for i := range 1000 {
		tb.Keep("acme", "m", fmt.Sprint(i), fmt.Sprint("r", i), "a/m", t0)
	}
	require.LessOrEqual(t, tb.Len(), 10)
	_, _, ok := tb.Last("acme", "m", "999")
	require.True(t, ok, "the newest conversations are kept")
	_, _, ok = tb.Last("acme", "m", "0")
	require.False(t, ok)
	tb.mu.RLock()
	defer tb.mu.RUnlock()
	require.LessOrEqual(t, len(tb.reqCur)+len(tb.reqPrev), 10, "pending requests are bounded too")
}

func TestConcurrent(t *testing.T) {
	tb := New(Options{Capacity: 64})
	t0 := time.Unix(1_800_000_000, 0)
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 500 {
				s := fmt.Sprint(i % 40)
				r := fmt.Sprint(g, "-", i)
				tb.Keep("acme", "m", s, r, "a/m", t0.Add(time.Duration(i)))
				tb.Served(r, "b/m", t0.Add(time.Duration(i+1)))
				tb.Last("acme", "m", s)
			}
		}()
	}
	for range 4 {
		<-done
	}
	require.LessOrEqual(t, tb.Len(), 64)
}
