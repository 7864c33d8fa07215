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
// This is the decider's end of the Report stream; the edge's end is
// services/edge/internal/report.
package report

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
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

// job is one unit of a stream's reservation work.
type job struct {
	reconciles []*switchboardv1.ReconcileRequest
	// ack is the reconcile batch's sequence, acknowledged once every
	// reconciliation is applied; 0 for reconciliations nobody waits for.
	ack  uint64
	keep []string
}

// Hub tracks the connected edges.
type Hub struct {
	logger   *slog.Logger
	sink     Sink
	activity ActivitySink
	received atomic.Int64
	dropped  atomic.Int64
	// rsv applies reconciliations and heartbeats; nil until set (they then
	// wait in the worker's retries).
	rsv atomic.Pointer[reservationsBox]
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

	// keys is the latest set of valid API keys, sent to every edge.
	keys atomic.Pointer[switchboardv1.KeySet]
	// term is the latest term of the broker's owner, sent to every edge;
	// 0 until one is known.
	term atomic.Int64

	mu     sync.Mutex
	edges  map[*conn]struct{}
	ring   []*conn // the edges in connection order, for SendOne
	next   int
	closed bool
}

type conn struct {
	ctx   context.Context
	hello *switchboardv1.EdgeHello
	since time.Time
	out   chan *switchboardv1.ReportResponse
	// keys is signalled when the edge must be sent the hub's latest key
	// set: a new set replaces one not yet sent, never queues behind it,
	// and is never dropped for a full buffer.
	keys chan struct{}
	// term is signalled, like keys, when the edge must be told the
	// owner's latest term.
	term chan struct{}
	jobs chan job
	// activity holds the activity batches received and not yet stored.
	activity chan *switchboardv1.ActivityBatch
	cancel   context.CancelFunc
}

type reservationsBox struct{ r Reservations }

// SetReservations sets what applies the edges' reconciliations and
// heartbeats. Work that arrives before it is set is retried until it is.
func (h *Hub) SetReservations(r Reservations) { h.rsv.Store(&reservationsBox{r: r}) }

// SetRetry changes the back-off between failed reservation attempts
// (defaults 50ms doubling to 1s) and how long one reconciliation is retried
// before its batch is left to the edge (default 15s), for tests. Call it
// before serving.
func (h *Hub) SetRetry(minDelay, maxDelay, giveUp time.Duration) {
	h.retryMin, h.retryMax, h.giveUp = minDelay, maxDelay, giveUp
}

// NewHub returns a hub that hands reports to sink and activity records to
// activity (nil: they are only counted).
func NewHub(logger *slog.Logger, sink Sink, activity ActivitySink) *Hub {
	return &Hub{logger: logger, sink: sink, activity: activity, edges: map[*conn]struct{}{},
		retryMin: retryMin, retryMax: retryMax, attempt: attemptTimeout, giveUp: reconcileGiveUp}
}

// Serve runs one edge's stream until it ends. The first message must be a hello.
func (h *Hub) Serve(stream switchboardv1.DeciderService_ReportServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil || hello.GetEdgeId() == "" {
		return status.Error(codes.InvalidArgument, "the first Report message must be a hello with an edge_id")
	}
	if err := errors.Join(validate.ID("hello.edge_id", hello.GetEdgeId()), validate.Name("hello.region", hello.GetRegion()),
		validate.Name("hello.version", hello.GetVersion())); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	c := &conn{ctx: ctx, hello: hello, since: time.Now(), out: make(chan *switchboardv1.ReportResponse, sendBuffer),
		keys: make(chan struct{}, 1), term: make(chan struct{}, 1), jobs: make(chan job, workQueue), activity: make(chan *switchboardv1.ActivityBatch, activityQueue),
		cancel: cancel}
	if !h.add(c) {
		return status.Error(codes.Unavailable, "decider is shutting down")
	}
	defer h.remove(c)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // the worker stops with the stream
	worked := make(chan struct{})
	wg.Go(func() {
		defer close(worked)
		var workers sync.WaitGroup
		workers.Go(func() { h.work(c) })
		workers.Go(func() { h.store(c) })
		workers.Wait()
	})
	h.logger.Info("edge connected", "edge", hello.GetEdgeId(), "region", hello.GetRegion())

	// Receiving runs in its own goroutine so that Close can end the stream
	// by returning from this handler; gRPC then cancels the stream and the
	// pending Recv returns. stream.Send is only ever called from here.
	recvErr := make(chan error, 1)
	go func() { recvErr <- h.receive(stream, c) }()
	for {
		// A new key set goes before anything else waiting: it is the
		// first thing a new stream is sent, and it precedes the catalog
		// change announced with it. A new owner term goes next, before
		// any ack the new owner's work produces.
		select {
		case <-c.keys:
			if err := h.sendKeys(stream); err != nil {
				return err
			}
			continue
		default:
		}
		select {
		case <-c.term:
			if err := h.sendTerm(stream); err != nil {
				return err
			}
			continue
		default:
		}
		select {
		case err := <-recvErr:
			h.logger.Info("edge disconnected", "edge", hello.GetEdgeId(), "err", err)
			if errors.Is(err, io.EOF) {
				// The edge is stopping and sent its last batches: apply
				// them before the stream ends (bounded), acknowledging
				// what it still waits for.
				close(c.jobs) // receive, the only sender, has returned
				close(c.activity)
				return h.drain(stream, c, worked)
			}
			if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		case <-ctx.Done():
			return status.Error(codes.Unavailable, "decider is shutting down")
		case m := <-c.out:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-c.keys:
			if err := h.sendKeys(stream); err != nil {
				return err
			}
		case <-c.term:
			if err := h.sendTerm(stream); err != nil {
				return err
			}
		}
	}
}

// sendKeys sends the latest key set.
func (h *Hub) sendKeys(stream switchboardv1.DeciderService_ReportServer) error {
	ks := h.keys.Load()
	if ks == nil {
		return nil
	}
	return stream.Send(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_KeySet{KeySet: ks}})
}

// sendTerm sends the broker owner's latest term.
func (h *Hub) sendTerm(stream switchboardv1.DeciderService_ReportServer) error {
	return stream.Send(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_OwnerTerm{
		OwnerTerm: &switchboardv1.OwnerTerm{Term: h.term.Load()}}})
}

// drainTimeout bounds how long a stream the edge closed waits for its
// last reservation work.
const drainTimeout = 5 * time.Second

// drain waits, after the edge's half-close, until the worker has applied
// what was queued, sending its acks, within drainTimeout.
func (h *Hub) drain(stream switchboardv1.DeciderService_ReportServer, c *conn, worked <-chan struct{}) error {
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	for {
		select {
		case <-worked:
			for {
				select {
				case m := <-c.out:
					if err := stream.Send(m); err != nil {
						return nil
					}
				default:
					return nil
				}
			}
		case m := <-c.out:
			if err := stream.Send(m); err != nil {
				return nil // the edge is gone
			}
		case <-t.C:
			h.logger.Warn("reservation work left undone at the end of a stream", "edge", c.hello.GetEdgeId(), "queued", len(c.jobs))
			return nil
		case <-c.ctx.Done():
			return nil
		}
	}
}

func (h *Hub) receive(stream switchboardv1.DeciderService_ReportServer, c *conn) error {
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		if a := m.GetActivity(); a != nil {
			a = h.validActivity(c, a)
			if h.activity != nil && len(a.GetRecords()) > 0 {
				// Stored and acknowledged off this loop (store), so a
				// commit's fsync never holds up the call reports and
				// reconciliations behind it, and batches that arrive
				// meanwhile share the next commit.
				select {
				case c.activity <- a:
				case <-c.ctx.Done():
					return c.ctx.Err()
				}
				continue
			}
			if err := h.ackActivity(c, a); err != nil {
				return err
			}
			continue
		}
		if rb := m.GetReconcile(); rb != nil {
			// Acknowledged by the worker once applied. A batch that does not
			// fit is not acknowledged: the edge sends it again.
			h.queue(c, job{reconciles: keep(h, c, "reconcile", rb.GetReconciles(), validate.Reconcile), ack: rb.GetSequence()})
			continue
		}
		if hb := m.GetHeartbeat(); hb != nil {
			ids := keep(h, c, "heartbeat", hb.GetReservationIds(), func(id string) error { return validate.ID("reservation_id", id) })
			if len(ids) > 0 {
				h.queue(c, job{keep: ids})
			}
			continue
		}
		batch := m.GetBatch()
		if batch == nil {
			continue
		}
		reports := keep(h, c, "call report", batch.GetReports(), validate.CallReport)
		n := int64(len(reports))
		h.received.Add(n)
		if h.sink != nil && n > 0 {
			h.sink(c.hello, reports)
		}
		h.trySend(c, &switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Ack{Ack: &switchboardv1.ReportAck{Accepted: n}}})
	}
}

// keep returns the items of a batch that pass check, counting and logging
// those that do not. A bad item is dropped, not the stream: the rest of its
// batch is good, and an edge that sent it would only send it again. A
// dropped reconciliation or activity record is acknowledged with its batch,
// as one that can never be applied is.
func keep[T any](h *Hub, c *conn, what string, items []T, check func(T) error) []T {
	var out []T
	for i, it := range items {
		err := check(it)
		if err == nil {
			if out != nil {
				out = append(out, it)
			}
			continue
		}
		if out == nil {
			out = append(make([]T, 0, len(items)), items[:i]...)
		}
		h.invalid.Add(1)
		h.logger.Warn("invalid item dropped", "what", what, "edge", c.hello.GetEdgeId(), "err", err)
	}
	if out == nil {
		return items
	}
	return out
}

// validActivity is the batch a with its invalid records dropped.
func (h *Hub) validActivity(c *conn, a *switchboardv1.ActivityBatch) *switchboardv1.ActivityBatch {
	recs := keep(h, c, "activity record", a.GetRecords(), validate.ActivityRecord)
	if len(recs) == len(a.GetRecords()) {
		return a
	}
	return &switchboardv1.ActivityBatch{Records: recs, Sequence: a.GetSequence()}
}

// store writes a stream's activity batches, each write taking every batch
// queued by then, and acknowledges each batch once its records are
// durable. A batch whose write failed is not acknowledged: the edge sends
// it again on its next stream.
func (h *Hub) store(c *conn) {
	for {
		var a *switchboardv1.ActivityBatch
		select {
		case b, ok := <-c.activity:
			if !ok {
				return // the edge half-closed: everything queued is stored
			}
			a = b
		case <-c.ctx.Done():
			return
		}
		// Fresh slices each time: the sink may keep the records.
		batches, records := []*switchboardv1.ActivityBatch{a}, slices.Clone(a.GetRecords())
	more:
		for len(records) < maxActivityWrite {
			select {
			case a, ok := <-c.activity:
				if !ok {
					break more
				}
				batches, records = append(batches, a), append(records, a.GetRecords()...)
			default:
				break more
			}
		}
		if err := h.activity(c.ctx, c.hello, records); err != nil {
			h.logger.Error("activity batches not stored", "edge", c.hello.GetEdgeId(), "batches", len(batches), "err", err)
			continue
		}
		for _, a := range batches {
			if h.ackActivity(c, a) != nil {
				return
			}
		}
	}
}

// ackActivity acknowledges a stored activity batch. Unlike a call-report
// ack it is never dropped: the edge keeps the batch until it sees it.
func (h *Hub) ackActivity(c *conn, a *switchboardv1.ActivityBatch) error {
	ack := &switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Ack{Ack: &switchboardv1.ReportAck{
		Accepted: int64(len(a.GetRecords())), ActivitySequence: a.GetSequence()}}}
	select {
	case c.out <- ack:
		return nil
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
}

// queue hands reservation work to the stream's worker without waiting.
func (h *Hub) queue(c *conn, j job) {
	select {
	case c.jobs <- j:
	default:
		h.refused.Add(1)
		h.logger.Warn("reservation work queue full; not acknowledged, the edge sends it again",
			"edge", c.hello.GetEdgeId(), "reconciles", len(j.reconciles), "sequence", j.ack)
	}
}

// work applies the stream's reservation work in order until the stream ends.
func (h *Hub) work(c *conn) {
	for {
		select {
		case <-c.ctx.Done():
			return
		case j, ok := <-c.jobs:
			if !ok || !h.do(c, j) {
				return
			}
		}
	}
}

// do applies one job, retrying each failed step for a bounded time (a
// heartbeat twice as long as a reconciliation: long enough to outlast a new
// owner's takeover, so what an edge declares on reconnecting reaches it
// before the restored reservations expire); false when the stream ended.
func (h *Hub) do(c *conn, j job) bool {
	if len(j.keep) > 0 {
		done, alive := h.retry(c, "keep reservations", 2*h.giveUp, func(ctx context.Context, r Reservations) error { return r.Keep(ctx, j.keep) })
		if !alive {
			return false
		}
		if done {
			h.kept.Add(1)
		}
	}
	// The ack names the oldest term that applied any of the batch (0 if
	// one is unknown): the edge replays the whole batch to a newer owner,
	// and a reconciliation applied twice is applied once.
	term := int64(-1)
	for _, rq := range j.reconciles {
		var applied int64
		done, alive := h.retry(c, "reconcile", h.giveUp, func(ctx context.Context, r Reservations) (err error) {
			applied, err = r.Reconcile(ctx, rq)
			return err
		})
		if term < 0 || applied < term {
			term = applied
		}
		if !alive {
			return false
		}
		if !done {
			h.logger.Warn("reconciliation still failing; its batch is left for the edge to send again",
				"edge", c.hello.GetEdgeId(), "reservation", rq.GetReservationId(), "sequence", j.ack)
			return true
		}
	}
	if j.ack == 0 {
		return true
	}
	if term < 0 {
		// Nothing to apply (every item was invalid): the owner now.
		term = h.term.Load()
	}
	ack := &switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Ack{Ack: &switchboardv1.ReportAck{
		Accepted: int64(len(j.reconciles)), ReconcileSequence: j.ack, OwnerTerm: term}}}
	select {
	case c.out <- ack:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// retry runs f until it succeeds (done), for at most giveUp; alive is false
// when the stream ended first.
func (h *Hub) retry(c *conn, what string, giveUp time.Duration, f func(context.Context, Reservations) error) (done, alive bool) {
	delay := h.retryMin
	deadline := time.Now().Add(giveUp)
	for {
		var err error
		if box := h.rsv.Load(); box != nil {
			ctx, cancel := context.WithTimeout(c.ctx, h.attempt)
			err = f(ctx, box.r)
			cancel()
			if err == nil {
				return true, true
			}
		} else {
			err = errors.New("the rate-limit broker is not ready yet")
		}
		if c.ctx.Err() != nil {
			return false, false
		}
		if time.Now().After(deadline) {
			return false, true
		}
		h.retried.Add(1)
		h.logger.Debug(what+" failed; retrying", "edge", c.hello.GetEdgeId(), "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return false, false
		case <-t.C:
		}
		delay = min(2*delay, h.retryMax)
	}
}

func (h *Hub) trySend(c *conn, m *switchboardv1.ReportResponse) {
	select {
	case c.out <- m:
	default:
		h.dropped.Add(1)
	}
}

func (h *Hub) add(c *conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if h.keys.Load() != nil {
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

// SendOne sends a command to the next edge in turn, so work such as probes
// is spread across edges. It returns false when no edge took it.
func (h *Hub) SendOne(m *switchboardv1.ReportResponse) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for range h.ring {
		c := h.ring[h.next%len(h.ring)]
		h.next++
		select {
		case c.out <- m:
			return true
		default: // that edge is backed up: try the next
		}
	}
	return false
}

// SetKeySet makes ks the set of valid API keys, sent to every connected
// edge and to each edge that connects later. Edges refuse keys outside it
// before reading their requests, so it is never dropped for a slow edge: a
// set not yet sent is replaced by the newer one.
func (h *Hub) SetKeySet(ks *switchboardv1.KeySet) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keys.Store(ks)
	for c := range h.edges {
		select {
		case c.keys <- struct{}{}:
		default: // already signalled: the latest set goes
		}
	}
}

// SetOwnerTerm makes term the broker owner's term told to every connected
// edge and to each edge that connects later, when it is newer than the one
// told so far. Like the key set it is never dropped for a slow edge: an
// edge that misses a new term would never replay what the new owner lacks.
func (h *Hub) SetOwnerTerm(term int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if term <= h.term.Load() {
		return
	}
	h.term.Store(term)
	for c := range h.edges {
		select {
		case c.term <- struct{}{}:
		default: // already signalled: the latest term goes
		}
	}
}

// FollowOwnerTerm tells edges each new term of the broker's owner, from
// terms (the term now, and a channel closed when it may have changed:
// the admission's OwnerTerm), until ctx ends.
func (h *Hub) FollowOwnerTerm(ctx context.Context, terms func() (int64, <-chan struct{})) {
	for {
		term, changed := terms()
		h.SetOwnerTerm(term)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// Broadcast sends a command to every connected edge, dropping it for an edge
// whose buffer is full.
func (h *Hub) Broadcast(m *switchboardv1.ReportResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.edges {
		h.trySend(c, m)
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
