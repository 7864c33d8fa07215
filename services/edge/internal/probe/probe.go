// Package probe runs the synthetic speed probes the decider schedules
// (every endpoint, at several prompt sizes) in the background, a few at a time, and stops them all when the
// edge shuts down. A probe at 150k tokens can take minutes on a slow endpoint;
// running it on the Report stream's receive goroutine would stall commands.
//
// This is the edge's side of the probes; the decider's side,
// services/decider/internal/probe, plans them.
package probe

import (
	"context"
	"log/slog"
	"sync"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Prober sends one probe and reports it; dispatch.Dispatcher implements it.
type Prober interface {
	Probe(ctx context.Context, cmd *switchboardv1.ProbeCommand) error
}

// Options configure a Runner.
type Options struct {
	// Prober runs each probe (Required).
	Prober Prober
	// MaxConcurrent bounds probes in flight; more are dropped, since the
	// decider schedules the next round anyway (Optional). Defaults to 4.
	MaxConcurrent int
	// Timeout bounds one probe (Optional). Defaults to 5 minutes.
	Timeout time.Duration
	// Logger logs dropped and failed probes (Optional). Defaults to discarding.
	Logger *slog.Logger
}

// Runner starts probes in the background. It is safe for concurrent use.
type Runner struct {
	opts   Options
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// New returns a Runner.
func New(o Options) *Runner {
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = 4
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Runner{opts: o, log: o.Logger, ctx: ctx, cancel: cancel, sem: make(chan struct{}, o.MaxConcurrent)}
}

// Start runs cmd in the background, or drops it when MaxConcurrent probes
// are already running or the Runner is closed. It never blocks.
func (r *Runner) Start(cmd *switchboardv1.ProbeCommand) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	select {
	case r.sem <- struct{}{}:
	default:
		r.log.Warn("probe dropped: too many in flight", "probe_id", cmd.GetProbeId())
		return
	}
	r.wg.Go(func() {
		defer func() { <-r.sem }()
		ctx, cancel := context.WithTimeout(r.ctx, r.opts.Timeout)
		defer cancel()
		if err := r.opts.Prober.Probe(ctx, cmd); err != nil {
			r.log.Warn("probe failed", "probe_id", cmd.GetProbeId(), "error", err)
		}
	})
}

// Close cancels running probes and waits for them to end.
func (r *Runner) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}
