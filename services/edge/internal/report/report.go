// Package report keeps the edge's one long-lived Report stream to the
// decider: it batches call reports and activity records (so reporting costs
// one stream message per batch, not one RPC per call), reconnects with
// capped, jittered back-off when the decider goes away, and hands the
// decider's commands to the edge.
//
// The request path never waits on it: reports and records go into bounded
// queues with a non-blocking send, and when a queue is full (decider down for
// a long time) what does not fit is dropped and counted. Losing samples is
// better than adding latency or memory growth to live traffic. Activity
// records have their own queue, so a burst of call reports never pushes the
// billing log out.
//
// Two things are never dropped silently, because money and quotas hang on
// them: activity records and reconciliations. Both travel in numbered batches
// that the decider acknowledges once they are durable (activity) or applied
// by the broker's owner (reconciliations); unacknowledged batches are sent
// again on the next stream (and reconciliations also on the same stream after
// ResendAfter), so each is delivered at least once and applied once.
//
// An acknowledged reconciliation is kept for ReplayWindow with the term of
// the broker's owner that applied it, which the acknowledgement names. A new
// owner restores the last snapshot of the one before, which may lack what
// that one applied after it; the decider tells the stream of every new
// owner's term, and the stream then sends again, unnumbered, what owners of
// older terms applied (and declares its held reservations again). It does
// not matter which replica the stream is connected to, nor whether it broke.
//
// The stream also declares the reservations of the calls in flight (Hold):
// right after each hello and then every HeartbeatInterval, so the broker's
// owner — a new one after a failover included — keeps them open while their
// calls run, however long.
//
// The parts, one file each: what was delivered and not confirmed, and what
// was confirmed lately for replays by owner term (ledger.go); the
// reservations held by calls in flight (holds.go); one stream's life, from
// its hello to its send loop and the commands it receives (session.go).
//
// This is the edge's end of the Report stream; the decider's end is
// services/decider/internal/report.
package report

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Handler acts on the decider's commands. Its methods are called from the
// stream's receive goroutine and must not block.
type Handler interface {
	// Probe starts a synthetic probe.
	Probe(cmd *switchboardv1.ProbeCommand)
	// Cooldown benches an endpoint.
	Cooldown(cmd *switchboardv1.CooldownCommand)
	// KeySet replaces the set of valid API keys.
	KeySet(ks *switchboardv1.KeySet)
}

// Options configure a Stream.
type Options struct {
	// Client is the decider client (Required).
	Client switchboardv1.EdgeServiceClient
	// Hello opens every stream (Required).
	Hello *switchboardv1.EdgeHello
	// Handler receives commands (Optional). Defaults to ignoring them.
	Handler Handler
	// FlushInterval is the longest a report waits before it is sent
	// (Optional). Defaults to 200ms.
	FlushInterval time.Duration
	// BatchSize sends a batch early once this many reports wait (Optional).
	// Defaults to 64.
	BatchSize int
	// QueueSize bounds the reports waiting while the decider is unreachable
	// (Optional). Defaults to 8192.
	QueueSize int
	// ActivityQueueSize bounds the activity records waiting while the
	// decider is unreachable (Optional). Defaults to 8192.
	ActivityQueueSize int
	// MinBackoff is the first reconnect delay (Optional). Defaults to 100ms.
	MinBackoff time.Duration
	// MaxBackoff caps the reconnect delay (Optional). Defaults to 5s.
	MaxBackoff time.Duration
	// HeartbeatInterval is how often the reservations of the calls in
	// flight are declared to the decider (Optional). Defaults to 40s, a
	// third of the broker's default reservation TTL.
	HeartbeatInterval time.Duration
	// ResendAfter is how long a reconcile batch may wait for its
	// acknowledgement before it is sent again on the same stream
	// (Optional). Defaults to 10s.
	ResendAfter time.Duration
	// ReplayWindow is how long after its acknowledgement a reconciliation
	// is kept to be sent again to a newer owner of the broker (Optional).
	// Defaults to 30s. The broker's owner snapshots its state about once a
	// second: one that crashed may have applied a reconciliation its last
	// snapshot does not hold, and its successor, which restored that
	// snapshot, must apply it again. The broker applies each reservation's
	// reconciliation once, so a replay is harmless anywhere else.
	ReplayWindow time.Duration
	// FinalFlushTimeout bounds the last flush at shutdown (Optional).
	// Defaults to 2s.
	FinalFlushTimeout time.Duration
	// Logger logs stream events (Optional). Defaults to discarding.
	Logger *slog.Logger
}

// Stream is the edge side of the Report stream. It is safe for concurrent use.
type Stream struct {
	opts    Options
	log     *slog.Logger
	queue   chan *switchboardv1.CallReport
	dropped atomic.Int64
	// activity queues finished requests for the activity log.
	activity chan *switchboardv1.ActivityRecord
	// reconciles queues reconciliations, sent in acknowledged batches.
	reconciles chan *switchboardv1.ReconcileRequest
	// sessions counts streams that got their hello through, for tests and logs.
	sessions atomic.Int64

	// ledger keeps what was sent until acknowledged, and what was
	// acknowledged for replays to newer owners (ledger.go).
	ledger
	// held are the reservations of the calls in flight (holds.go).
	held holds
}

// UnackedReconciles returns how many reconciliations wait for the decider's
// acknowledgement, queued ones included.
func (s *Stream) UnackedReconciles() int { return int(s.outstanding.Load()) }

// Reconcile queues a reservation's reconciliation without ever blocking; it
// is sent in an acknowledged batch and sent again until the decider says it
// was applied. When the queue is full (decider unreachable for very long)
// it is dropped and counted: the reservation then expires at its TTL.
func (s *Stream) Reconcile(r *switchboardv1.ReconcileRequest) {
	s.Forget(r.GetReservationId())
	select {
	case s.reconciles <- r:
		s.outstanding.Add(1)
	default:
		s.droppedReconciles.Add(1)
	}
}

// DroppedReconciles returns how many reconciliations were given up.
func (s *Stream) DroppedReconciles() int64 { return s.droppedReconciles.Load() }

// Unacked returns how many activity batches wait for the decider's ack.
func (s *Stream) Unacked() int {
	return s.unackedActivity()
}

// New returns a Stream; Run connects it.
func New(o Options) *Stream {
	if o.FlushInterval <= 0 {
		o.FlushInterval = 200 * time.Millisecond
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 64
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 8192
	}
	if o.ActivityQueueSize <= 0 {
		o.ActivityQueueSize = 8192
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(5*time.Second, o.MinBackoff)
	}
	if o.FinalFlushTimeout <= 0 {
		o.FinalFlushTimeout = 2 * time.Second
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = 40 * time.Second
	}
	if o.ResendAfter <= 0 {
		o.ResendAfter = 10 * time.Second
	}
	if o.ReplayWindow <= 0 {
		o.ReplayWindow = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Stream{
		opts: o, log: o.Logger,
		queue:      make(chan *switchboardv1.CallReport, o.QueueSize),
		activity:   make(chan *switchboardv1.ActivityRecord, o.ActivityQueueSize),
		reconciles: make(chan *switchboardv1.ReconcileRequest, o.ActivityQueueSize),
		ledger: ledger{window: o.ReplayWindow, log: o.Logger, replayc: make(chan struct{}, 1),
			unacked: map[uint64][]*switchboardv1.ActivityRecord{}, runacked: map[uint64]*sentReconciles{}},
	}
}

// Report queues a call report without ever blocking; when the queue is full
// the report is dropped and counted.
func (s *Stream) Report(r *switchboardv1.CallReport) {
	select {
	case s.queue <- r:
	default:
		s.dropped.Add(1)
	}
}

// Activity queues an activity record without ever blocking; when the queue
// is full the record is dropped and counted.
func (s *Stream) Activity(r *switchboardv1.ActivityRecord) {
	select {
	case s.activity <- r:
	default:
		s.droppedActivity.Add(1)
	}
}

// Dropped returns how many reports were dropped because the queue was full.
func (s *Stream) Dropped() int64 { return s.dropped.Load() }

// DroppedActivity returns how many activity records were dropped because
// their queue was full.
func (s *Stream) DroppedActivity() int64 { return s.droppedActivity.Load() }

// pending holds what was taken off the queues but not sent yet; it survives
// into the next session when one breaks.
type pending struct {
	reports    []*switchboardv1.CallReport
	activity   []*switchboardv1.ActivityRecord
	reconciles []*switchboardv1.ReconcileRequest
}

// Run keeps a stream open until ctx ends, reconnecting as needed, then
// flushes what is queued (bounded by FinalFlushTimeout) and returns.
func (s *Stream) Run(ctx context.Context) {
	backoff := s.opts.MinBackoff
	var p pending
	for {
		began := time.Now()
		err := s.session(ctx, &p)
		if ctx.Err() != nil {
			return
		}
		// A stream that lived longer than the longest back-off was healthy:
		// start over from the shortest delay, so a decider restart costs
		// ~100ms of reporting, not 5s.
		if time.Since(began) > s.opts.MaxBackoff {
			backoff = s.opts.MinBackoff
		}
		s.log.Warn("report stream broken, reconnecting", "error", err, "retry_in", backoff)
		// Jitter keeps every edge of a region from reconnecting in lockstep
		// after a decider restart.
		delay := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, s.opts.MaxBackoff)
	}
}

// Sessions returns how many streams were opened (hello sent) so far.
func (s *Stream) Sessions() int64 { return s.sessions.Load() }
