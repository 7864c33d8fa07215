package dashboard

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

// sample is every endpoint's typical first-token time per size bucket at
// one instant, in milliseconds; NaN where there is no figure.
type sample struct {
	at   time.Time
	ttft map[string][tokens.NumBuckets]float64
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

// Sample adds one sample of every endpoint of the applied catalog at now.
func (d *Dashboard) Sample(now time.Time) {
	if v := d.o.Catalog.Load(); v != nil {
		d.hist.add(d.sampleOf(v.Catalog, now))
	}
}

// sampleOf reads every endpoint of c at now.
func (d *Dashboard) sampleOf(c *catalog.Catalog, now time.Time) sample {
	s := sample{at: now, ttft: map[string][tokens.NumBuckets]float64{}}
	for _, m := range c.Models {
		for _, e := range m.Endpoints {
			id := e.ID(m.ID)
			var row [tokens.NumBuckets]float64
			for b := range tokens.NumBuckets {
				row[b] = math.NaN()
				if t, _, ok := d.o.Source.TTFT(id, tokens.Bucket(b)); ok {
					row[b] = float64(t) / float64(time.Millisecond)
				}
			}
			s.ttft[id] = row
		}
	}
	return s
}

// Run samples the history every SampleEvery until ctx ends, the first at once.
func (d *Dashboard) Run(ctx context.Context) {
	d.Sample(d.o.Now())
	t := time.NewTicker(d.o.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.Sample(d.o.Now())
		}
	}
}
