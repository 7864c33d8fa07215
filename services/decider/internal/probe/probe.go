// Package probe schedules synthetic speed probes: every interval,
// each endpoint gets one probe per configured prompt size (about 2k, 20k,
// 60k and 150k tokens by default, one in each size bucket), so a slowdown
// at one size is caught even while calls of another size stay fast, and
// every size is measured before traffic of that size arrives. The decider only plans them; edges run them, one
// probe per edge in turn, spread evenly over the interval so they neither
// burst nor land on one edge. Probes are never billed to a tenant (the
// billing policy, pkg/billing); the observe package accounts their cost.
//
// This is the decider's side of the probes; the edge's side,
// services/edge/internal/probe, runs the probes planned here.
package probe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

// DefaultSizes are the probe prompt sizes, in tokens: one inside each size
// bucket of pkg/tokens (<8k, 8k-32k, 32k-128k, >128k). Without a probe in a
// bucket its speed is known only from the traffic routing sent there, so
// an endpoint that routing never picks for short prompts stays unmeasured
// on them. The 2k probe costs about a tenth of the 20k one, a hundredth of
// the total (docs/simulation.md).
var DefaultSizes = []int64{2 * 1024, 20 * 1024, 60 * 1024, 150 * 1024}

// Options configure a Prober.
type Options struct {
	// Interval is how often each endpoint is probed at each size. (Required, > 0)
	Interval time.Duration
	// Sizes are the prompt sizes in tokens. (Optional) Defaults to DefaultSizes.
	Sizes []int64
	// MaxOutputTokens is the output each probe asks for. (Optional) Defaults to 8.
	MaxOutputTokens int64
	// Models lists what to probe. (Required)
	Models func() []routing.ModelEndpoints
	// Send hands a probe to the next edge in turn; false when no edge is connected. (Required)
	Send func(*switchboardv1.ReportResponse) bool
	// Logger (Required)
	Logger *slog.Logger
	// After is the clock Run waits on: a channel that receives once d has
	// passed. (Optional) Defaults to a timer of the real clock; tests step
	// Run with their own.
	After func(d time.Duration) <-chan time.Time
}

// Prober plans probes.
type Prober struct {
	o       Options
	sent    int64
	skipped int64
}

// New returns a prober.
func New(o Options) *Prober {
	if len(o.Sizes) == 0 {
		o.Sizes = DefaultSizes
	}
	if o.MaxOutputTokens <= 0 {
		o.MaxOutputTokens = 8
	}
	return &Prober{o: o}
}

// Plan returns one round of probes.
func (p *Prober) Plan() []*switchboardv1.ProbeCommand {
	var out []*switchboardv1.ProbeCommand
	for _, m := range p.o.Models() {
		for _, ep := range m.Endpoints {
			for _, size := range p.o.Sizes {
				if cl := ep.GetContextLength(); cl > 0 && size+p.o.MaxOutputTokens > cl {
					continue // the endpoint cannot take a prompt this large
				}
				out = append(out, &switchboardv1.ProbeCommand{
					ProbeId:         newID(),
					Model:           m.Model,
					Endpoint:        ep,
					PromptTokens:    size,
					MaxOutputTokens: p.o.MaxOutputTokens,
				})
			}
		}
	}
	return out
}

// Run sends rounds of probes until ctx ends.
func (p *Prober) Run(ctx context.Context) {
	for ctx.Err() == nil {
		plan := p.Plan()
		if len(plan) == 0 {
			if !p.sleep(ctx, p.o.Interval) {
				return
			}
			continue
		}
		gap := p.o.Interval / time.Duration(len(plan))
		for _, cmd := range plan {
			if !p.sleep(ctx, gap) {
				return
			}
			if p.o.Send(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Probe{Probe: cmd}}) {
				p.sent++
			} else {
				p.skipped++
			}
		}
		p.o.Logger.Debug("probe round done", "probes", len(plan), "sent_total", p.sent, "skipped_total", p.skipped)
	}
}

// sleep waits d, false when ctx ended first.
func (p *Prober) sleep(ctx context.Context, d time.Duration) bool {
	var after <-chan time.Time
	if p.o.After != nil {
		after = p.o.After(d)
	} else {
		t := time.NewTimer(d)
		defer t.Stop()
		after = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-after:
		return true
	}
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
