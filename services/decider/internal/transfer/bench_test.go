package transfer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-ai/switchboard/services/decider/internal/transfer"
)

// BenchmarkFetchFullTables: a transfer of full tables (200,000 prompts on
// four endpoints of realistic ids, 200,000 conversations) over gRPC
// (bufconn), taken and applied; it reports the bytes on the wire, which
// transfer.DefaultMaxBytes must hold, and its time, which
// transfer.DefaultTimeout must.
func BenchmarkFetchFullTables(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	src := newTables(now)
	eps := []string{"alpha/deepseek/deepseek-v4.1-flash", "beta/deepseek/deepseek-v4.1-flash", "gamma/deepseek/deepseek-v4.1-flash", "delta/deepseek/deepseek-v4.1-flash"}
	const n = 100_000 // each table keeps two generations of half its capacity
	for i := range 2 * n {
		src.Affinity.Served(eps[i%len(eps)], uint64(i+1)*0x9e3779b97f4a7c15, 60_000, nil, now.Add(-time.Duration(i)*time.Millisecond))
		src.Sessions.Keep(fmt.Sprintf("tenant-%d", i%100), "deepseek/deepseek-v4.1-flash", fmt.Sprintf("session-%08d-4c1f-9a7e-3b2d5e6f7a8b", i), "", eps[i%len(eps)], now.Add(-time.Minute))
	}
	conn := dial(b, &peer{tables: src})
	b.ResetTimer()
	var res transfer.Result
	for b.Loop() {
		var err error
		res, err = transfer.Fetch(b.Context(), conn, "b", newTables(now), transfer.Limits{Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(res.Bytes)/(1<<20), "MiB")
	b.ReportMetric(float64(res.Affinity+res.Conversations), "entries")
}
