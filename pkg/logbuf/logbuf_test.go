package logbuf

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuffer is a destination that counts its writes.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuffer) get() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String(), s.writes
}

func TestLinesHeldThenWrittenTogether(t *testing.T) {
	dst := &syncBuffer{}
	w := New(dst, 20*time.Millisecond)
	for i := range 100 {
		_, err := fmt.Fprintf(w, "line %d\n", i)
		require.NoError(t, err)
	}
	// Written out within the interval without another write or a Flush.
	require.Eventually(t, func() bool { s, _ := dst.get(); return strings.Count(s, "\n") == 100 }, 5*time.Second, time.Millisecond)
	s, writes := dst.get()
	require.Less(t, writes, 100, "lines are written together")
	require.True(t, strings.HasPrefix(s, "line 0\nline 1\n"))
	require.True(t, strings.HasSuffix(s, "line 99\n"))
	require.NoError(t, w.Close())
}

func TestFullBufferWrittenAtOnce(t *testing.T) {
	dst := &syncBuffer{}
	w := New(dst, time.Hour)
	line := strings.Repeat("x", 1023) + "\n"
	for range maxPending / len(line) {
		_, _ = w.Write([]byte(line))
	}
	s, _ := dst.get()
	require.Len(t, s, maxPending, "64 KiB pending: written without waiting for the interval")
	require.NoError(t, w.Close())
}

func TestCloseWritesPendingAndLaterWritesGoThrough(t *testing.T) {
	dst := &syncBuffer{}
	w := New(dst, time.Hour)
	_, _ = w.Write([]byte("a\n"))
	s, _ := dst.get()
	require.Empty(t, s)
	require.NoError(t, w.Close())
	s, _ = dst.get()
	require.Equal(t, "a\n", s)
	_, _ = w.Write([]byte("b\n"))
	s, _ = dst.get()
	require.Equal(t, "a\nb\n", s)
}

// Concurrent writers and flushes keep every line whole and each writer's
// lines in order.
func TestConcurrentWritersKeepLinesWholeAndOrdered(t *testing.T) {
	dst := &syncBuffer{}
	w := New(dst, time.Millisecond)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				_, _ = fmt.Fprintf(w, "%d %d\n", g, i)
				if i%97 == 0 {
					_ = w.Flush()
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, w.Close())
	s, _ := dst.get()
	next := map[string]int{}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	require.Len(t, lines, 8*500)
	for _, l := range lines {
		var g string
		var i int
		_, err := fmt.Sscanf(l, "%s %d", &g, &i)
		require.NoError(t, err, l)
		require.Equal(t, next[g], i, "writer %s's lines in order", g)
		next[g]++
	}
}
