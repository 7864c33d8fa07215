package admission

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
)

// Without a broker's owner a settlement is queued, and Run settles it
// through the policy on the budget this replica holds.
func TestSettlerQueuesUntilRun(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	b := hedge.New(10, func() time.Time { return now })
	if ok, _, _ := b.Acquire("r1", 1); !ok {
		t.Fatal("hedge not granted")
	}
	s := NewSettler(b, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.Settle(context.Background(), "r1", 0.25)
	if spent, _, _, _ := b.Status(); spent != 1 {
		t.Fatalf("spent %v before Run, want the estimate 1", spent)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.After(5 * time.Second)
	for {
		if spent, _, _, _ := b.Status(); spent == 0.25 {
			return
		}
		select {
		case <-deadline:
			t.Fatal("settlement not applied")
		case <-time.After(time.Millisecond):
		}
	}
}

// Queued settlements go in one batch per caller, in order of each caller's first.
func TestSettlementBatchesByCaller(t *testing.T) {
	a, b := &auth.Principal{}, &auth.Principal{}
	st := func(id string) *switchboardv1.HedgeSettlement { return &switchboardv1.HedgeSettlement{RequestId: id} }
	got := settlementBatches([]settlement{{a, st("1")}, {b, st("2")}, {a, st("3")}})
	if len(got) != 2 || got[0].caller != a || len(got[0].settlements) != 2 || got[0].settlements[1].GetRequestId() != "3" ||
		got[1].caller != b || len(got[1].settlements) != 1 {
		t.Fatalf("batches %+v", got)
	}
}
