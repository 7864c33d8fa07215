package gotune

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{"536870912\n": 536870912, "max\n": 0, "": 0, "-1": 0, "0": 0, "12abc": 0} {
		got, ok := memoryLimit([]byte(in))
		require.Equal(t, want, got, in)
		require.Equal(t, want > 0, ok, in)
	}
}

func TestApply(t *testing.T) {
	was := debug.SetGCPercent(100)
	defer debug.SetGCPercent(was)
	limit := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(limit)

	// GOGC and GOMEMLIMIT set: the operator's choice stands.
	s := Apply(func(k string) string { return map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}[k] })
	require.Equal(t, Settings{}, s)
	require.Equal(t, 100, debug.SetGCPercent(100))

	s = Apply(func(string) string { return "" })
	require.Equal(t, DefaultGCPercent, s.GCPercent)
	require.Equal(t, DefaultGCPercent, debug.SetGCPercent(100))
	if s.MemoryLimit > 0 { // in a container with a memory limit
		require.Equal(t, s.MemoryLimit, debug.SetMemoryLimit(-1))
	}
}
