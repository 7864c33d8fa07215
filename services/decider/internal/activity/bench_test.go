package activity

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// cpuTime is the process's user + system CPU so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAdd writes batches of 32 records shaped like an edge's, as a
// Report stream does, and reports the CPU per record (the fsync's wait is
// not CPU): the decider's cost of keeping one request's activity.
func BenchmarkAdd(b *testing.B) {
	b.Run("ids=random", func(b *testing.B) { benchmarkAdd(b, func(int) string { return "gen-" + strings.ToLower(rand.Text()) }) })
	b.Run("ids=in-time-order", func(b *testing.B) {
		benchmarkAdd(b, func(n int) string { return fmt.Sprintf("gen-%012x%s", n, strings.ToLower(rand.Text())[:14]) })
	})
}

func benchmarkAdd(b *testing.B, id func(int) string) {
	s, err := Open(Options{Path: filepath.Join(b.TempDir(), "a.db"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	const per = 32
	t0 := time.Now().Add(-time.Hour)
	batch := make([]*switchboardv1.ActivityRecord, per)
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := range b.N {
		for j := range batch {
			n := i*per + j
			at := t0.Add(time.Duration(n) * time.Millisecond)
			batch[j] = &switchboardv1.ActivityRecord{
				Id: id(n), TenantId: "acme", ApiKeyId: "k-1234", Model: "deepseek/deepseek-v4.1-flash",
				EndpointId: "deepseek/deepseek-v4.1-flash@fast", Provider: "fast", CreateTime: timestamppb.New(at),
				Attempts: []*switchboardv1.Attempt{{
					EndpointId: "deepseek/deepseek-v4.1-flash@fast", Provider: "fast", Outcome: switchboardv1.Outcome_OUTCOME_OK,
					Ttft: durationpb.New(300 * time.Millisecond), HttpStatus: 200, CostUsd: 0.0012, StartTime: timestamppb.New(at),
				}},
				Usage:   &switchboardv1.Usage{InputTokens: 1200, OutputTokens: 300, CostUsd: 0.0012, Reported: true},
				CostUsd: 0.0012, Status: switchboardv1.CallStatus_CALL_STATUS_OK, HttpStatus: 200, Stream: true,
				Duration: durationpb.New(2 * time.Second), Ttft: durationpb.New(300 * time.Millisecond), Grant: make([]byte, 16),
			}
		}
		if err := s.Add(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N*per)/1e3, "cpu-µs/record")
}
