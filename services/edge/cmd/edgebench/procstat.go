package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// 100 on every Linux architecture Go supports (sysconf(_SC_CLK_TCK) needs
// cgo).
const clockTick = 10 * time.Millisecond

// cpuTime returns the CPU time (user + system) a process has used so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime, the 14th and 15th fields of a
// /proc/<pid>/stat line. The 2nd field, the command in parentheses, may
// hold spaces and parentheses itself, so fields are counted after the last
// ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat: no command field")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command", len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("stat: %w", err)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// rss returns a process's resident set size in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)) //nolint:gosec // G703: a number, under /proc.
	if err != nil {
		return 0, err
	}
	return parseStatusRSS(b)
}

// parseStatusRSS reads VmRSS (kB) from /proc/<pid>/status.
func parseStatusRSS(b []byte) (int64, error) {
	for line := range strings.SplitSeq(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status: VmRSS %q", rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("status: %w", err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("status: no VmRSS")
}

// parseMemStat reads one runtime.MemStats figure from a Go heap profile in
// text form (/debug/pprof/heap?debug=1), whose lines read
// "# HeapAlloc = 1234" or, for pairs such as "# Stack = 1234 / 5678"
// (StackInuse / StackSys), the first number.
func parseMemStat(b []byte, field string) (int64, error) {
	prefix := "# " + field + " = "
	for line := range strings.SplitSeq(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, fmt.Errorf("heap profile: no %s", field)
}
