package probe

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var _ Prober = (*blockingProber)(nil)

// blockingProber counts probes and holds each until its context ends.
type blockingProber struct {
	started atomic.Int64
}

func (p *blockingProber) Probe(ctx context.Context, _ *switchboardv1.ProbeCommand) error {
	p.started.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func TestRunner(t *testing.T) {
	tests := []struct {
		name          string
		maxConcurrent int
		starts        int
		want          int64
	}{
		{name: "under the cap", maxConcurrent: 4, starts: 2, want: 2},
		{name: "over the cap drops", maxConcurrent: 2, starts: 5, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &blockingProber{}
			r := New(Options{Prober: p, MaxConcurrent: tt.maxConcurrent})
			for range tt.starts {
				r.Start(&switchboardv1.ProbeCommand{ProbeId: "p"})
			}
			require.Eventually(t, func() bool { return p.started.Load() == tt.want }, 5*time.Second, 5*time.Millisecond)
			r.Close()
			r.Start(&switchboardv1.ProbeCommand{ProbeId: "late"})
			require.Equal(t, tt.want, p.started.Load(), "no probe after Close")
		})
	}
}
