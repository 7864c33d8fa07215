package stats

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

// BenchmarkTTFT measures the read Decide makes per endpoint, in a store the
// size of a large catalog (1000 models × 20 endpoints): by id (a map lookup)
// and through a handle resolved once.
func BenchmarkTTFT(b *testing.B) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	for m := range 1000 {
		for e := range 20 {
			s.ObserveTTFT(fmt.Sprintf("p%02d/vendor/model-%d", e, m), tokens.Bucket32KTo128K, time.Second, time.Time{})
		}
	}
	id := fmt.Sprintf("p%02d/vendor/model-%d", 7, 512)
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.TTFT(id, tokens.Bucket32KTo128K)
		}
	})
	b.Run("handle", func(b *testing.B) {
		e := s.Endpoint(id)
		b.ReportAllocs()
		for b.Loop() {
			e.TTFT(tokens.Bucket32KTo128K)
		}
	})
	b.Run("miss", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.TTFT("nobody/vendor/model-1", tokens.Bucket32KTo128K)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s.TTFT(id, tokens.Bucket32KTo128K)
			}
		})
	})
}

// BenchmarkObserveTTFT measures one observation on the Report path: a series
// with few samples, a full one (insertion, eviction and recomputation over
// MaxSamples), and many goroutines on different endpoints.
func BenchmarkObserveTTFT(b *testing.B) {
	at := time.Unix(1_800_000_000, 0)
	for _, fill := range []int{1, DefaultMaxSamples} {
		b.Run(fmt.Sprintf("samples=%d", fill), func(b *testing.B) {
			clk := newClock()
			s := New(Config{Now: clk.Now, MaxSamples: fill})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				s.ObserveTTFT("alpha/m", tokens.BucketUnder8K, time.Duration(1+i%13)*100*time.Millisecond, at.Add(time.Duration(i)))
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		clk := newClock()
		s := New(Config{Now: clk.Now})
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			id := fmt.Sprintf("p%d/m", n.Add(1)%8) // one endpoint per goroutine, as one edge stream each
			i := 0
			for pb.Next() {
				i++
				s.ObserveTTFT(id, tokens.BucketUnder8K, time.Duration(1+i%13)*100*time.Millisecond, time.Time{})
			}
		})
	})
}

// BenchmarkRefresh measures the once-a-second Refresh over 20 000 endpoints
// when nothing expired, its common case.
func BenchmarkRefresh(b *testing.B) {
	clk := newClock()
	s := New(Config{Now: clk.Now})
	for m := range 1000 {
		for e := range 20 {
			id := fmt.Sprintf("p%02d/vendor/model-%d", e, m)
			for bk := range tokens.Bucket(tokens.NumBuckets) {
				s.ObserveTTFT(id, bk, time.Second, time.Time{})
			}
			s.ObserveThroughput(id, 50, time.Time{})
			s.ObserveCache(id, 1000, 500, time.Time{})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Refresh()
	}
}

// BenchmarkObserveFull measures one observation into a full series (the
// default MaxSamples, 64) while time moves on, one call a second: each
// observation evicts the oldest sample, inserts the new one and recomputes
// the summary. Calls end out of order, so the sample times jitter by up to 5s
// behind the clock; one TTFT in 17 is ten times slower, so that the outlier
// rule has something to down-weight. ttft-4-reporters spreads the calls
// over four edges, whose shares are then computed.
func BenchmarkObserveFull(b *testing.B) {
	for _, kind := range []string{"ttft", "throughput", "cache", "output", "ttft-4-reporters"} {
		b.Run(kind, func(b *testing.B) {
			now := time.Unix(1_800_000_000, 0)
			s := New(Config{Now: func() time.Time { return now }})
			edges := []Reporter{s.From("edge-0"), s.From("edge-1"), s.From("edge-2"), s.From("edge-3")}
			observe := func(i int) {
				now = now.Add(time.Second)
				at := now.Add(-time.Duration(i*7919%5000) * time.Millisecond)
				switch kind {
				case "ttft":
					ttft := time.Duration(1+i%13) * 100 * time.Millisecond
					if i%17 == 0 {
						ttft *= 10
					}
					s.ObserveTTFT("alpha/m", tokens.BucketUnder8K, ttft, at)
				case "throughput":
					s.ObserveThroughput("alpha/m", float64(40+i%29), at)
				case "cache":
					s.ObserveCache("alpha/m", int64(1000+i%7*1000), int64(i%5*200), at)
				case "output":
					s.ObserveOutput("m", int64(100+i%31*10), at)
				case "ttft-4-reporters":
					edges[i%len(edges)].ObserveTTFT("alpha/m", tokens.BucketUnder8K, time.Duration(1+i%13)*100*time.Millisecond, at)
				}
			}
			for i := range 2 * DefaultMaxSamples {
				observe(i)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				observe(i)
			}
		})
	}
}
