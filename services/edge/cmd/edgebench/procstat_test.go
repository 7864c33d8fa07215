package main

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseStatCPU(t *testing.T) {
	// A command with spaces and parentheses; utime 250 and stime 50 ticks.
	line := "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 8 0 123 456 789 18446744073709551615\n"
	d, err := parseStatCPU([]byte(line))
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, d)

	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 x 50 0"} {
		_, err := parseStatCPU([]byte(bad))
		require.Error(t, err, bad)
	}
}

// TestCPUTimeOfThisProcess reads /proc for real: this process's CPU time
// grows while it works.
func TestCPUTimeOfThisProcess(t *testing.T) {
	before, err := cpuTime(os.Getpid())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // hang guard only
	defer cancel()
	x := 0
	for ctx.Err() == nil {
		for i := range 1_000_000 {
			x += i
		}
		now, err := cpuTime(os.Getpid())
		require.NoError(t, err)
		if now > before {
			break
		}
	}
	require.NoError(t, ctx.Err(), "CPU time never grew")
	runtime.KeepAlive(x)

	_, err = cpuTime(-1)
	require.Error(t, err)
}

func TestParseStatusRSS(t *testing.T) {
	n, err := parseStatusRSS([]byte("Name:\tedge\nVmPeak:\t  9000 kB\nVmRSS:\t   1234 kB\nThreads:\t8\n"))
	require.NoError(t, err)
	require.EqualValues(t, 1234*1024, n)
	_, err = parseStatusRSS([]byte("Name:\tedge\n"))
	require.Error(t, err)

	n, err = rss(os.Getpid())
	require.NoError(t, err)
	require.Positive(t, n)
}

// TestParseMemStat reads the heap profile this Go writes, as the debug
// listener serves it.
func TestParseMemStat(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, pprof.Lookup("heap").WriteTo(&buf, 1))
	heap, err := parseMemStat(buf.Bytes(), "HeapAlloc")
	require.NoError(t, err)
	require.Positive(t, heap)
	stack, err := parseMemStat(buf.Bytes(), "Stack")
	require.NoError(t, err)
	require.Positive(t, stack)

	n, err := parseMemStat([]byte("# HeapAlloc = 77\n# Stack = 12 / 34\n"), "Stack")
	require.NoError(t, err)
	require.EqualValues(t, 12, n)
	_, err = parseMemStat([]byte("# HeapAlloc = 77\n"), "Stack")
	require.Error(t, err)
}
