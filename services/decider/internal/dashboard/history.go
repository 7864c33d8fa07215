package dashboard

import (
	"context"
	"sync"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// sample is every endpoint's typical first-token time per size bucket at
// one instant, in milliseconds (nil where there is no figure), and each
// model's endpoints.
type sample struct {
	at     time.Time
	ttft   map[string][tokens.NumBuckets]*float64
	models map[string][]string
}

// history is the last samples, oldest first, at most max of them: a ring.
type history struct {
	mu   sync.Mutex
	max  int
	ring []sample
	next int // where the next sample goes once the ring is full
}

func newHistory(capacity int) *history { return &history{max: max(capacity, 2)} }

func (h *history) add(s sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ring) < h.max {
		h.ring = append(h.ring, s)
		return
	}
	h.ring[h.next] = s
	h.next = (h.next + 1) % h.max
}

// samples returns the samples, oldest first.
func (h *history) samples() []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]sample, 0, len(h.ring))
	out = append(out, h.ring[h.next:]...)
	return append(out, h.ring[:h.next]...)
}

// sample reads every endpoint's first-token times as the operator's
// GetEndpointStats answers them, as the decider's own work (no caller).
func (d *Dashboard) sample(ctx context.Context, now time.Time) (sample, error) {
	ctx, _ = d.o.Catalog.Pin(ctx)
	resp, err := d.o.RPC.GetEndpointStats(ctx, &switchboardv1.GetEndpointStatsRequest{})
	if err != nil {
		return sample{}, err
	}
	s := sample{at: now, ttft: map[string][tokens.NumBuckets]*float64{}, models: map[string][]string{}}
	for _, m := range resp.GetModels() {
		for _, e := range m.GetEndpoints() {
			var row [tokens.NumBuckets]*float64
			for _, t := range e.GetTtft() {
				if i, ok := bucketIndex(t.GetBucket()); ok {
					row[i] = ms(t.GetTypical(), t.GetTypical() != nil)
				}
			}
			s.ttft[e.GetEndpointId()] = row
			s.models[m.GetModel()] = append(s.models[m.GetModel()], e.GetEndpointId())
		}
	}
	return s, nil
}

// Sample adds one sample at now to the history.
func (d *Dashboard) Sample(ctx context.Context, now time.Time) {
	s, err := d.sample(ctx, now)
	if err != nil {
		d.o.Logger.Warn("dashboard history: endpoint statistics not read", "err", err)
		return
	}
	s.models = nil // the history keeps the figures; the model's endpoints are read now
	d.hist.add(s)
}

// Run samples the history every SampleEvery until ctx ends, the first at once.
func (d *Dashboard) Run(ctx context.Context) {
	d.Sample(ctx, d.o.Now())
	t := time.NewTicker(d.o.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.Sample(ctx, d.o.Now())
		}
	}
}
