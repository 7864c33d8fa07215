// Package gotune sets the Go runtime's garbage collector for a Switchboard
// server: a proxy whose live heap is small next to what it allocates per
// request spends a large share of its CPU collecting at Go's default pace.
package gotune

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultGCPercent is the collector's target unless GOGC says otherwise: the
// heap may grow to five times what is live before a collection, instead of
// twice. A server holding 1,000 open streams keeps ~70 MB live, so it may
// reach ~350 MB between collections; a memory limit (GOMEMLIMIT, or the
// container's, see Apply) makes the collector run sooner near it.
const DefaultGCPercent = 400

// memoryLimitShare is the part of the container's memory limit given to
// the Go heap as its soft limit: the rest is for the runtime's own memory,
// stacks and the kernel's buffers.
const memoryLimitShare = 0.9

// cgroupMemoryMax is cgroup v2's memory limit of the process's container.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// Settings are what Apply set; 0 where it left the runtime's own.
type Settings struct {
	GCPercent   int
	MemoryLimit int64
}

// Apply sets the collector's target to DefaultGCPercent unless GOGC is set,
// and, unless GOMEMLIMIT is set, a soft memory limit at 90 % of the
// container's memory limit when there is one (cgroup v2), so that the
// larger target never runs a container out of memory.
func Apply(getenv func(string) string) Settings {
	var s Settings
	if getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
		s.GCPercent = DefaultGCPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		if b, err := os.ReadFile(cgroupMemoryMax); err == nil {
			if limit, ok := memoryLimit(b); ok {
				s.MemoryLimit = int64(float64(limit) * memoryLimitShare)
				debug.SetMemoryLimit(s.MemoryLimit)
			}
		}
	}
	return s
}

// memoryLimit parses cgroup v2's memory.max: a number of bytes, or "max"
// for none.
func memoryLimit(b []byte) (int64, bool) {
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 {
		return 0, false
	}
	return v, true
}
