package share

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// BenchmarkPublish is what sharing adds to a Report stream's receive loop
// per batch, for two peers whose queues are drained as fast as they fill
// (the sender is not measured: it runs beside the stream).
func BenchmarkPublish(b *testing.B) {
	s := New(Options{Self: "a", Logger: quiet, Conn: func(string) (*grpc.ClientConn, error) { return nil, context.Canceled }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, id := range []string{"b", "c"} {
		p := &peer{addr: id, queue: make(chan item, DefaultQueueBatches), cancel: func() {}, done: make(chan struct{})}
		s.peers[id] = p
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-p.queue:
				}
			}
		}()
	}
	edge := &switchboardv1.EdgeHello{EdgeId: "e1"}
	reports := batch("r1", "r2", "r3", "r4")
	b.ReportAllocs()
	for b.Loop() {
		s.Publish(edge, reports)
	}
}
