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
// This is the edge's end of the Report stream; the decider's end is
// services/decider/internal/report.
package report

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
	Client switchboardv1.DeciderServiceClient
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
	activity        chan *switchboardv1.ActivityRecord
	droppedActivity atomic.Int64
	// sessions counts streams that got their hello through, for tests and logs.
	sessions atomic.Int64

	// Activity batches sent but not yet acknowledged as durable by the
	// decider, by sequence; a new stream sends them again first, so a record
	// is delivered at least once (the decider stores it once, by id).
	ackMu   sync.Mutex
	seq     uint64
	unacked map[uint64][]*switchboardv1.ActivityRecord

	// reconciles queues reconciliations; like activity batches they are kept
	// until acknowledged (rseq, runacked) and sent again if not.
	reconciles        chan *switchboardv1.ReconcileRequest
	droppedReconciles atomic.Int64
	rseq              uint64
	runacked          map[uint64]*sentReconciles
	// outstanding counts reconciliations queued or sent and not yet
	// acknowledged (nor given up).
	outstanding atomic.Int64
	// recent are acknowledged reconciliations kept for ReplayWindow, oldest
	// first, to be replayed to newer owners of the broker.
	recent  []*ackedReconciles
	recentN int // the reconciliations in recent
	// term is the newest term of the broker's owner this stream was told
	// of or saw in an ack; 0 until the stream's first (each stream starts
	// again from what its decider says).
	term int64
	// replayc tells the session that reconciliations wait to be replayed
	// (ackedReconciles.replay), or that beat is set: the held reservations
	// are to be declared to a new owner.
	replayc chan struct{}
	beat    bool

	// held are the reservations of the calls in flight, declared in
	// heartbeats until their reconciliation is queued or they are forgotten.
	heldMu sync.Mutex
	held   map[string]struct{}
}

// ackedReconciles is an acknowledged reconcile batch, kept for a replay.
type ackedReconciles struct {
	reconciles []*switchboardv1.ReconcileRequest
	at         time.Time // acknowledged
	// term is the newest owner term it was sent to: the one its ack named,
	// then each newer one it was replayed to. An owner of a newer term may
	// lack it.
	term int64
	// replay marks it to be sent again, to the owner of term.
	replay bool
}

// maxRecent bounds the acknowledged reconciliations kept for a replay.
const maxRecent = 8192

// sentReconciles is a reconcile batch waiting for its acknowledgement.
type sentReconciles struct {
	reconciles []*switchboardv1.ReconcileRequest
	at         time.Time // last sent
}

// maxUnacked bounds the activity batches kept for resending; past it the
// oldest are given up (and counted as dropped) rather than growing forever
// while the decider is unreachable.
const maxUnacked = 1024

// sent numbers an activity batch and keeps it until it is acknowledged.
func (s *Stream) sent(records []*switchboardv1.ActivityRecord) uint64 {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.seq++
	s.unacked[s.seq] = records
	if len(s.unacked) > maxUnacked {
		oldest := s.seq
		for k := range s.unacked {
			oldest = min(oldest, k)
		}
		s.droppedActivity.Add(int64(len(s.unacked[oldest])))
		delete(s.unacked, oldest)
	}
	return s.seq
}

// acked forgets an acknowledged batch.
func (s *Stream) acked(seq uint64) {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	delete(s.unacked, seq)
}

// requeue puts every unacknowledged batch back in front of what is pending,
// in the order they were first sent, for the next stream.
func (s *Stream) requeue(p *pending) {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	if len(s.unacked) == 0 {
		return
	}
	seqs := make([]uint64, 0, len(s.unacked))
	for k := range s.unacked {
		seqs = append(seqs, k)
	}
	slices.Sort(seqs)
	var again []*switchboardv1.ActivityRecord
	for _, k := range seqs {
		again = append(again, s.unacked[k]...)
	}
	clear(s.unacked)
	p.activity = append(again, p.activity...)
}

// sentReconcile numbers a reconcile batch and keeps it until acknowledged.
func (s *Stream) sentReconcile(rs []*switchboardv1.ReconcileRequest) uint64 {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.rseq++
	s.runacked[s.rseq] = &sentReconciles{reconciles: rs, at: time.Now()}
	if len(s.runacked) > maxUnacked {
		oldest := s.rseq
		for k := range s.runacked {
			oldest = min(oldest, k)
		}
		n := int64(len(s.runacked[oldest].reconciles))
		s.droppedReconciles.Add(n)
		s.outstanding.Add(-n)
		delete(s.runacked, oldest)
	}
	return s.rseq
}

// eagerReconcileBatches is how many reconcile batches may wait for their
// ack while new reconciliations are still sent the moment they arrive.
const eagerReconcileBatches = 4

// reconcileBatchesInFlight returns how many reconcile batches wait for
// their ack.
func (s *Stream) reconcileBatchesInFlight() int {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	return len(s.runacked)
}

// ackedReconcile forgets an acknowledged reconcile batch, applied under the
// owner term term, and keeps it for the replay window.
func (s *Stream) ackedReconcile(seq uint64, term int64) {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	b := s.runacked[seq]
	if b == nil {
		return
	}
	s.outstanding.Add(-int64(len(b.reconciles)))
	delete(s.runacked, seq)
	s.keepApplied(b.reconciles, term)
}

// Applied stops declaring a reservation a Reconcile RPC closed, and keeps
// the reconciliation, applied under the owner term the answer named, for
// the replay window, as one acknowledged on the stream is kept. It never
// blocks for long.
func (s *Stream) Applied(r *switchboardv1.ReconcileRequest, term int64) {
	s.Forget(r.GetReservationId())
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.keepApplied([]*switchboardv1.ReconcileRequest{r}, term)
}

// keepApplied keeps reconciliations applied under term for the replay
// window. ackMu is held.
func (s *Stream) keepApplied(rs []*switchboardv1.ReconcileRequest, term int64) {
	now := time.Now()
	s.newerTerm(term, now)
	e := &ackedReconciles{reconciles: rs, at: now, term: term}
	if term < s.term {
		// Applied by an owner older than the newest this stream knows of
		// (the ack crossed the new owner's term on its way): the new one
		// may not have it.
		e.term, e.replay = s.term, true
		s.wakeReplay()
	}
	s.recent = append(s.recent, e)
	s.recentN += len(rs)
	s.prune(now)
}

// learnTerm records the broker owner's term the decider announced.
func (s *Stream) learnTerm(term int64) {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.newerTerm(term, time.Now())
}

// newerTerm records an owner term; when it is newer than the stream knew,
// every kept reconciliation sent to older terms only is marked for a replay,
// and, unless it is the stream's first term (its hello declared the held
// reservations already), so are the held reservations. ackMu is held.
func (s *Stream) newerTerm(term int64, now time.Time) {
	if term <= s.term {
		return
	}
	first := s.term == 0
	s.term = term
	s.prune(now)
	marked := false
	for _, e := range s.recent {
		if e.term < term {
			e.term, e.replay = term, true
			marked = true
		}
	}
	if !first {
		s.beat = true
	}
	if marked || !first {
		s.log.Info("broker owner changed; replaying what older owners applied lately", "owner_term", term)
		s.wakeReplay()
	}
}

// wakeReplay tells the session there is something to replay. ackMu is held.
func (s *Stream) wakeReplay() {
	select {
	case s.replayc <- struct{}{}:
	default: // already told
	}
}

// prune drops the kept reconciliations older than ReplayWindow, and the
// oldest beyond maxRecent. ackMu is held.
func (s *Stream) prune(now time.Time) {
	drop := 0
	for drop < len(s.recent) && (now.Sub(s.recent[drop].at) > s.opts.ReplayWindow || s.recentN > maxRecent) {
		s.recentN -= len(s.recent[drop].reconciles)
		drop++
	}
	if drop > 0 {
		s.recent = slices.Delete(s.recent, 0, drop)
	}
}

// newStream starts a stream's view of the owner's term afresh: what its
// decider announces, or names in its acks, is what counts.
func (s *Stream) newStream() {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.term = 0
	s.beat = false
}

// takeReplays returns the kept batches marked for a replay, within the
// window, and whether the held reservations are to be declared again; a
// replay that could not be sent is marked again (untake).
func (s *Stream) takeReplays() ([]*ackedReconciles, bool) {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.prune(time.Now())
	var out []*ackedReconciles
	for _, e := range s.recent {
		if e.replay {
			out = append(out, e)
			e.replay = false
		}
	}
	beat := s.beat
	s.beat = false
	return out, beat
}

// untake marks batches taken for a replay again, for the next stream: the
// stream broke before they were sent.
func (s *Stream) untake(taken []*ackedReconciles) {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	for _, e := range taken {
		e.replay = true // one pruned meanwhile is gone anyway
	}
}

// stale returns the reconcile batches sent before cutoff and not
// acknowledged, marking them sent now.
func (s *Stream) stale(cutoff, now time.Time) []*switchboardv1.ReconcileBatch {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	var out []*switchboardv1.ReconcileBatch
	for seq, b := range s.runacked {
		if b.at.Before(cutoff) {
			b.at = now
			out = append(out, &switchboardv1.ReconcileBatch{Reconciles: b.reconciles, Sequence: seq})
		}
	}
	slices.SortFunc(out, func(a, b *switchboardv1.ReconcileBatch) int { return cmp.Compare(a.GetSequence(), b.GetSequence()) })
	return out
}

// UnackedReconciles returns how many reconciliations wait for the decider's
// acknowledgement, queued ones included.
func (s *Stream) UnackedReconciles() int { return int(s.outstanding.Load()) }

// Hold declares a reservation in use by a call in flight: it is listed in
// every heartbeat until its reconciliation is queued (Reconcile) or it is
// forgotten (Forget). It never blocks.
func (s *Stream) Hold(id string) {
	if id == "" {
		return
	}
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	s.held[id] = struct{}{}
}

// Forget stops declaring a reservation that was closed another way (a
// Reconcile RPC that succeeded).
func (s *Stream) Forget(id string) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	delete(s.held, id)
}

// Held returns the reservations declared in heartbeats now.
func (s *Stream) Held() []string {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	out := make([]string, 0, len(s.held))
	for id := range s.held {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

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
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	return len(s.unacked)
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
		queue:    make(chan *switchboardv1.CallReport, o.QueueSize),
		activity: make(chan *switchboardv1.ActivityRecord, o.ActivityQueueSize),
		unacked:  map[uint64][]*switchboardv1.ActivityRecord{},

		reconciles: make(chan *switchboardv1.ReconcileRequest, o.ActivityQueueSize),
		runacked:   map[uint64]*sentReconciles{},
		replayc:    make(chan struct{}, 1),
		held:       map[string]struct{}{},
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

// session runs one stream. p holds what was taken off the queues but not yet
// sent; it survives into the next session when this one breaks.
func (s *Stream) session(ctx context.Context, p *pending) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// The stream outlives ctx by at most FinalFlushTimeout, so reports queued
	// during shutdown still reach the decider; it never outlives it longer.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var graceMu sync.Mutex
	var grace *time.Timer
	stopAfter := context.AfterFunc(ctx, func() {
		graceMu.Lock()
		defer graceMu.Unlock()
		grace = time.AfterFunc(s.opts.FinalFlushTimeout, cancel)
	})
	defer func() {
		stopAfter()
		graceMu.Lock()
		defer graceMu.Unlock()
		if grace != nil {
			grace.Stop()
		}
	}()

	stream, err := s.opts.Client.Report(sctx)
	if err != nil {
		return err
	}
	s.newStream()
	hello := proto.Clone(s.opts.Hello).(*switchboardv1.EdgeHello)
	if err := stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: hello}}); err != nil {
		return recvStatus(stream, err)
	}
	// The reservations of the calls in flight first: a new owner of the
	// broker keeps them open rather than let them expire mid-call.
	heartbeat := func() error {
		ids := s.Held()
		if len(ids) == 0 {
			return nil
		}
		return stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Heartbeat{
			Heartbeat: &switchboardv1.ReservationHeartbeat{ReservationIds: ids}}})
	}
	if err := heartbeat(); err != nil {
		return recvStatus(stream, err)
	}
	s.sessions.Add(1)
	s.log.Info("report stream open")
	// What the last stream sent but the decider never confirmed goes first.
	s.requeue(p)

	recvErr := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			s.handle(msg)
		}
	})

	var flushReconciles func() error
	flush := func() error {
		for len(p.reports) > 0 {
			n := min(len(p.reports), s.opts.BatchSize)
			batch := &switchboardv1.CallReportBatch{Reports: p.reports[:n]}
			if err := stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: batch}}); err != nil {
				return err
			}
			p.reports = p.reports[n:]
		}
		p.reports = nil
		for len(p.activity) > 0 {
			n := min(len(p.activity), s.opts.BatchSize)
			records := slices.Clone(p.activity[:n])
			batch := &switchboardv1.ActivityBatch{Records: records, Sequence: s.sent(records)}
			if err := stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: batch}}); err != nil {
				return err // the batch stays unacknowledged: sent again next stream
			}
			p.activity = p.activity[n:]
		}
		p.activity = nil
		return flushReconciles()
	}
	flushReconciles = func() error {
		for len(p.reconciles) > 0 {
			n := min(len(p.reconciles), s.opts.BatchSize)
			rs := slices.Clone(p.reconciles[:n])
			batch := &switchboardv1.ReconcileBatch{Reconciles: rs, Sequence: s.sentReconcile(rs)}
			if err := stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Reconcile{Reconcile: batch}}); err != nil {
				return err // unacknowledged: sent again next stream
			}
			p.reconciles = p.reconciles[n:]
		}
		p.reconciles = nil
		return nil
	}
	// replay sends the reconciliations marked for a newer owner again,
	// unnumbered (nobody waits for their ack), and declares the held
	// reservations to it when asked.
	replay := func() error {
		taken, beat := s.takeReplays()
		var again []*switchboardv1.ReconcileRequest
		for _, e := range taken {
			again = append(again, e.reconciles...)
		}
		for len(again) > 0 {
			n := min(len(again), s.opts.BatchSize)
			if err := stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Reconcile{
				Reconcile: &switchboardv1.ReconcileBatch{Reconciles: again[:n]}}}); err != nil {
				s.untake(taken) // some may have gone: sent twice, applied once
				return err
			}
			again = again[n:]
		}
		if beat {
			return heartbeat()
		}
		return nil
	}
	// resend sends again the reconcile batches the decider has not
	// acknowledged for ResendAfter (it may have had no room for them).
	resend := func() error {
		now := time.Now()
		for _, b := range s.stale(now.Add(-s.opts.ResendAfter), now) {
			if err := stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Reconcile{Reconcile: b}}); err != nil {
				return err
			}
		}
		return nil
	}
	// Replays the last stream had no time to send, then the reconcile
	// batches it sent and the decider never acknowledged, as they were
	// (same sequence).
	if err := replay(); err != nil {
		return err
	}
	if err := s.resendAll(stream); err != nil {
		return err
	}
	ticker := time.NewTicker(s.opts.FlushInterval)
	defer ticker.Stop()
	beat := time.NewTicker(s.opts.HeartbeatInterval)
	defer beat.Stop()
	lastDropped, lastDroppedActivity := s.dropped.Load(), s.droppedActivity.Load()
	for {
		select {
		case <-ctx.Done():
			for drained := false; !drained; {
				select {
				case r := <-s.queue:
					p.reports = append(p.reports, r)
				case r := <-s.activity:
					p.activity = append(p.activity, r)
				case r := <-s.reconciles:
					p.reconciles = append(p.reconciles, r)
				default:
					drained = true
				}
			}
			err := flush()
			_ = stream.CloseSend()
			if err == nil {
				// Returning cancels the stream, which can discard what was
				// just sent before the decider read it. The decider ends the
				// stream once it has read everything after our half-close;
				// wait for that, bounded by FinalFlushTimeout.
				select {
				case <-recvErr: //nolint:errcheck // only the end of the stream matters here
				case <-sctx.Done():
				}
			}
			return err
		case err := <-recvErr:
			return err
		case r := <-s.queue:
			p.reports = append(p.reports, r)
			if len(p.reports) >= s.opts.BatchSize {
				if err := flush(); err != nil {
					return err
				}
			}
		case r := <-s.activity:
			p.activity = append(p.activity, r)
			if len(p.activity) >= s.opts.BatchSize {
				if err := flush(); err != nil {
					return err
				}
			}
		case r := <-s.reconciles:
			p.reconciles = append(p.reconciles, r)
			// A reconciliation gives capacity back (a tenant's slot of
			// requests in flight), so it goes at once, with whatever queued
			// meanwhile, rather than at the next tick: a client at its
			// concurrency limit that sends its next request right away must
			// find the slot free. Only while few batches wait for their ack:
			// beyond that (a busy or ownerless decider) they wait for the
			// tick and travel in bigger batches.
			for more := true; more && len(p.reconciles) < s.opts.BatchSize; {
				select {
				case r := <-s.reconciles:
					p.reconciles = append(p.reconciles, r)
				default:
					more = false
				}
			}
			if len(p.reconciles) >= s.opts.BatchSize || s.reconcileBatchesInFlight() < eagerReconcileBatches {
				if err := flushReconciles(); err != nil {
					return err
				}
			}
		case <-beat.C:
			if err := heartbeat(); err != nil {
				return err
			}
		case <-s.replayc:
			if err := replay(); err != nil {
				return err
			}
		case <-ticker.C:
			if err := flush(); err != nil {
				return err
			}
			if err := resend(); err != nil {
				return err
			}
			if d := s.dropped.Load(); d != lastDropped {
				s.log.Warn("call reports dropped: queue full", "dropped_total", d)
				lastDropped = d
			}
			if d := s.droppedActivity.Load(); d != lastDroppedActivity {
				s.log.Error("activity records dropped: queue full", "dropped_total", d)
				lastDroppedActivity = d
			}
		}
	}
}

// resendAll sends every unacknowledged reconcile batch again, oldest first.
func (s *Stream) resendAll(stream switchboardv1.DeciderService_ReportClient) error {
	now := time.Now()
	for _, b := range s.stale(now.Add(time.Hour), now) {
		if err := stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Reconcile{Reconcile: b}}); err != nil {
			return err
		}
	}
	return nil
}

// recvStatus turns the io.EOF a Send returns on a stream the server closed
// into the server's actual status, which says why.
func recvStatus(stream interface {
	Recv() (*switchboardv1.ReportResponse, error)
}, err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	for {
		if _, rerr := stream.Recv(); rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return status.Error(codes.Unavailable, "report stream closed by the decider")
			}
			return rerr
		}
	}
}

func (s *Stream) handle(msg *switchboardv1.ReportResponse) {
	switch c := msg.GetCommand().(type) {
	case *switchboardv1.ReportResponse_Ack:
		// Call reports are best effort; an activity batch is kept until the
		// decider says it is durable.
		if seq := c.Ack.GetActivitySequence(); seq != 0 {
			s.acked(seq)
		}
		if seq := c.Ack.GetReconcileSequence(); seq != 0 {
			s.ackedReconcile(seq, c.Ack.GetOwnerTerm())
		}
	case *switchboardv1.ReportResponse_OwnerTerm:
		s.log.Debug("broker owner term", "owner_term", c.OwnerTerm.GetTerm())
		s.learnTerm(c.OwnerTerm.GetTerm())
	case *switchboardv1.ReportResponse_Probe:
		s.log.Debug("probe command", "probe_id", c.Probe.GetProbeId(), "endpoint", c.Probe.GetEndpoint().GetId())
		if s.opts.Handler != nil {
			s.opts.Handler.Probe(c.Probe)
		}
	case *switchboardv1.ReportResponse_Cooldown:
		s.log.Info("endpoint cooling down", "endpoint", c.Cooldown.GetEndpointId(),
			"until", c.Cooldown.GetUntil().AsTime(), "reason", c.Cooldown.GetReason())
		if s.opts.Handler != nil {
			s.opts.Handler.Cooldown(c.Cooldown)
		}
	case *switchboardv1.ReportResponse_KeySet:
		s.log.Debug("key set", "version", c.KeySet.GetVersion(), "keys", len(c.KeySet.GetKeyPrefixes()))
		if s.opts.Handler != nil {
			s.opts.Handler.KeySet(c.KeySet)
		}
	case *switchboardv1.ReportResponse_Config:
		// The edge holds no catalog: every decision comes from the decider,
		// so a catalog change needs no action here beyond a trace in the log.
		s.log.Info("catalog changed", "catalog_revision", c.Config.GetCatalogRevision())
	default:
		s.log.Debug("unknown report command ignored")
	}
}

// Sessions returns how many streams were opened (hello sent) so far.
func (s *Stream) Sessions() int64 { return s.sessions.Load() }
