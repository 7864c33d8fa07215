package experiment

import (
	"fmt"
	"testing"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// BenchmarkAggregateAdd is the cost of counting one activity record.
func BenchmarkAggregateAdd(b *testing.B) {
	p, err := Parse(def(time.Hour, 10*time.Minute), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	a := NewAggregate(p)
	recs := make([]*switchboardv1.ActivityRecord, 1024)
	for i := range recs {
		recs[i] = rec(fmt.Sprint(i), t0.Add(time.Duration(i)*17*time.Second), time.Duration(50+i%400)*time.Millisecond,
			time.Duration(60+i%500)*time.Millisecond, time.Duration(1+i%20)*time.Second, int64(10+i%300), 0.001)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		a.Add(recs[i%len(recs) : i%len(recs)+1])
	}
}

// BenchmarkArm is the cost routing pays per decision for a running experiment.
func BenchmarkArm(b *testing.B) {
	e := def(3*time.Hour, time.Hour)
	e.Models = []string{"vendor/a", "vendor/b"}
	p, err := Parse(e, Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.Arm("vendor/a", t0.Add(time.Duration(i)*time.Second))
	}
}
