// Package report serves the Report stream: it keeps one connection per edge,
// takes their batched call reports, activity records, reconciliations and
// reservation heartbeats, and pushes commands (probes, cool-downs,
// configuration changes) back to them.
//
// The receive loop never waits on the broker: reconciliations and heartbeats
// go to a worker of the stream (a bounded queue), which applies them on the
// broker's owner, retrying while there is none, and acknowledges a reconcile
// batch only once every reconciliation in it was applied (or can never be).
// What does not fit in the queue is not acknowledged: the edge sends it again.
//
// Every acknowledgement of a reconcile batch names the term of the broker's
// owner that applied it, and every edge is told the owner's term when its
// stream opens and whenever a new owner is elected: a new owner restored a
// snapshot that may lack what its predecessor applied after it, so the edge
// sends the reconciliations older terms applied again.
//
// The hub's parts, one file each: a stream's life (connection.go), its
// reservation worker (worker.go), its activity writer (activity.go), and
// what is sent to every edge (broadcast.go).
//
// This is the decider's end of the Report stream; the edge's end is
// services/edge/internal/report.
package report

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Sink takes the reports of one batch. It must not block for long: it runs
// on the stream's receive loop.
type Sink func(edge *switchboardv1.EdgeHello, reports []*switchboardv1.CallReport)

// ActivitySink takes activity records (of one or more batches of a stream)
// and returns once they are durable, or an error. ctx is the stream's: it
// carries the edge's caller (auth.FromContext), for whom what the records
// lead to (a hedge settlement forwarded to the broker's owner) is done. It
// runs on the stream's activity worker, not its receive loop; blocking
// there holds the stream's later activity batches and, once activityQueue
// of them wait, the stream (back-pressure on that edge). Only a durable
// batch is acknowledged.
type ActivitySink func(ctx context.Context, edge *switchboardv1.EdgeHello, records []*switchboardv1.ActivityRecord) error

// Reservations applies what edges say about their reservations, on the
// broker's owner. Its methods may block (forwarding, an owner still taking
// over); the hub calls them from a stream's worker, never from its receive
// loop.
type Reservations interface {
	// Reconcile applies one reconciliation. nil means it was applied, or
	// never can be (unknown reservation, already reconciled, invalid):
	// either way it is done, by the owner of the term returned (never a
	// newer term than that owner's; 0 when unknown). An error means: try
	// again later.
	Reconcile(ctx context.Context, req *switchboardv1.ReconcileRequest) (term int64, err error)
	// Keep extends the open reservations among ids by their TTL.
	Keep(ctx context.Context, ids []string) error
}

// sendBuffer is how many commands may wait for a slow edge before new ones are
// dropped; a stuck edge must never stall the decider.
const sendBuffer = 256

// Defaults of the reservation work of one stream.
const (
	// workQueue is how many batches (reconcile batches, heartbeats) wait
	// for a stream's worker; more are not taken (and not acknowledged).
	workQueue = 64
	// activityQueue bounds the activity batches a stream holds before they
	// are stored; beyond it the stream is not read (back-pressure).
	activityQueue = 64
	// maxActivityWrite bounds the records of one stream taken into one
	// write.
	maxActivityWrite = 4096
	// attemptTimeout bounds one reconciliation or heartbeat on the owner.
	attemptTimeout = 2 * time.Second
	retryMin       = 50 * time.Millisecond
	retryMax       = time.Second
	// reconcileGiveUp bounds the retries of one reconciliation: past it
	// its batch is left unacknowledged for the edge to send again, so one
	// that keeps failing never holds up the rest of the stream's work.
	reconcileGiveUp = 15 * time.Second
)

// Hub tracks the connected edges.
type Hub struct {
	logger   *slog.Logger
	sink     Sink
	activity ActivitySink
	received atomic.Int64
	dropped  atomic.Int64
	// rsv applies reconciliations and heartbeats; nil fails every attempt
	// (they wait in the worker's retries).
	rsv Reservations
	// refused counts reservation work not queued because a stream's queue
	// was full; retried counts failed attempts that were retried.
	refused atomic.Int64
	retried atomic.Int64
	kept    atomic.Int64 // heartbeats applied
	// invalid counts the items dropped for failing validate's checks.
	invalid atomic.Int64
	// retryMin and retryMax bound the retry back-off; attempt bounds one
	// try; giveUp bounds the retries of one reconciliation.
	retryMin, retryMax, attempt, giveUp time.Duration

	// keys returns the current set of valid API keys, sent to every edge:
	// the one in the decider's catalog snapshot; nil sends none.
	keys func() *switchboardv1.KeySet
	// tracer and lag are Options.Tracer and Options.Lag.
	tracer trace.Tracer
	lag    func(time.Duration)
	// term is the latest term of the broker's owner, sent to every edge;
	// 0 until one is known.
	term atomic.Int64

	mu     sync.Mutex
	edges  map[*conn]struct{}
	ring   []*conn // the edges in connection order, for SendOne
	next   int
	closed bool
}

// SetRetry changes the back-off between failed reservation attempts
// (defaults 50ms doubling to 1s) and how long one reconciliation is retried
// before its batch is left to the edge (default 15s), for tests. Call it
// before serving.
func (h *Hub) SetRetry(minDelay, maxDelay, giveUp time.Duration) {
	h.retryMin, h.retryMax, h.giveUp = minDelay, maxDelay, giveUp
}

// Options are what a Hub hands the edges' streams to.
type Options struct {
	// Logger logs the streams' failures. (Required)
	Logger *slog.Logger
	// Sink takes the call reports. (Optional) nil: they are only counted.
	Sink Sink
	// Activity takes the activity records. (Optional) nil: they are only counted.
	Activity ActivitySink
	// Keys returns the current set of valid API keys, told to every edge
	// when its stream opens and again on each KeysChanged. (Optional) nil,
	// or a nil set: none.
	Keys func() *switchboardv1.KeySet
	// Reservations applies the edges' reconciliations and heartbeats on
	// the broker's owner. (Optional) nil fails every attempt: the work is
	// retried, then left to the edge to send again.
	Reservations Reservations
	// Tracer makes a span of the handling of each call report that carries
	// its call's trace context, a child of the call's span on the edge, so
	// the request's trace shows it. (Optional) Nil: no spans.
	Tracer trace.Tracer
	// Lag records how long each call report took from the edge that made
	// it to this hub. (Optional) Nil: not measured.
	Lag func(time.Duration)
}

// NewHub returns a hub of o.
func NewHub(o Options) *Hub {
	keys := o.Keys
	if keys == nil {
		keys = func() *switchboardv1.KeySet { return nil }
	}
	return &Hub{logger: o.Logger, sink: o.Sink, activity: o.Activity, keys: keys, rsv: o.Reservations, edges: map[*conn]struct{}{},
		tracer: o.Tracer, lag: o.Lag,
		retryMin: retryMin, retryMax: retryMax, attempt: attemptTimeout, giveUp: reconcileGiveUp}
}

func (h *Hub) add(c *conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if h.keys() != nil {
		c.keys <- struct{}{} // the first thing a new stream is sent
	}
	if h.term.Load() != 0 {
		c.term <- struct{}{}
	}
	h.edges[c] = struct{}{}
	h.ring = append(h.ring, c)
	return true
}

func (h *Hub) remove(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.edges, c)
	for i, rc := range h.ring {
		if rc == c {
			h.ring = append(h.ring[:i], h.ring[i+1:]...)
			break
		}
	}
}

// Edges returns the hellos of the connected edges.
func (h *Hub) Edges() []*switchboardv1.EdgeHello {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*switchboardv1.EdgeHello, 0, len(h.edges))
	for c := range h.edges {
		out = append(out, c.hello)
	}
	return out
}

// Received returns how many call reports have arrived.
func (h *Hub) Received() int64 { return h.received.Load() }

// Refused returns how many batches of reservation work were not taken
// because a stream's queue was full.
func (h *Hub) Refused() int64 { return h.refused.Load() }

// Retried returns how many reservation attempts failed and were retried.
func (h *Hub) Retried() int64 { return h.retried.Load() }

// Invalid returns how many call reports, reconciliations, reservation ids
// and activity records were dropped for failing their checks.
func (h *Hub) Invalid() int64 { return h.invalid.Load() }

// Heartbeats returns how many reservation heartbeats were applied.
func (h *Hub) Heartbeats() int64 { return h.kept.Load() }

// Close ends every stream, so a graceful stop is not held up by edges that
// would otherwise stay connected forever; they reconnect to another replica.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for c := range h.edges {
		c.cancel()
	}
}

// Take hands the call reports and activity records of one request that a
// caller reports by a unary call (RouterService.ReportCall, which checks
// them first) to the sinks a stream's batches go to: reports at once,
// records once durable. from names the caller as an edge's hello does:
// what it reports of an endpoint's speed is bounded per caller, as an
// edge's is per edge.
func (h *Hub) Take(ctx context.Context, from *switchboardv1.EdgeHello, reports []*switchboardv1.CallReport, records []*switchboardv1.ActivityRecord) error {
	h.received.Add(int64(len(reports)))
	h.measureLag(reports)
	spans := h.startSpans(ctx, from, reports)
	if h.sink != nil && len(reports) > 0 {
		h.sink(from, reports)
	}
	endSpans(spans)
	if h.activity == nil || len(records) == 0 {
		return nil
	}
	return h.activity(ctx, from, records)
}
