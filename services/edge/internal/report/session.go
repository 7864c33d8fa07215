package report

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// eagerReconcileBatches is how many reconcile batches may wait for their
// ack while new reconciliations are still sent the moment they arrive.
const eagerReconcileBatches = 4

// session is one stream's life: the hello and the held reservations, what
// the last stream left unacknowledged, then the send loop, while a
// goroutine takes the decider's acks and commands (the key set and the
// owner's term among them) until the stream ends.
type session struct {
	s      *Stream
	stream switchboardv1.EdgeService_ReportClient
	// p holds what was taken off the queues but not yet sent; it survives
	// into the next session when this one breaks.
	p *pending
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
	defer graceAfter(ctx, s.opts.FinalFlushTimeout, cancel)()

	// Wait for the connection rather than fail fast while the decider is
	// down: the stream opens the moment it is back (after a restart, the
	// reconciliations it replays give back the slots of the calls that
	// ended meanwhile), not after a back-off of its own on top of the
	// connection's.
	stream, err := s.opts.Client.Report(sctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	ss := &session{s: s, stream: stream, p: p}
	if err := ss.open(); err != nil {
		return err
	}
	recvErr := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { recvErr <- ss.receive() })
	// Replays the last stream had no time to send, then the reconcile
	// batches it sent and the decider never acknowledged, as they were
	// (same sequence).
	if err := ss.replay(); err != nil {
		return err
	}
	if err := s.resendAll(stream); err != nil {
		return err
	}
	return ss.loop(ctx, sctx, recvErr)
}

// graceAfter calls cancel once timeout has passed since ctx ended; the
// function it returns stops that.
func graceAfter(ctx context.Context, timeout time.Duration, cancel context.CancelFunc) (stop func()) {
	var mu sync.Mutex
	var grace *time.Timer
	stopAfter := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		grace = time.AfterFunc(timeout, cancel)
	})
	return func() {
		stopAfter()
		mu.Lock()
		defer mu.Unlock()
		if grace != nil {
			grace.Stop()
		}
	}
}

// open says hello, declares the held reservations, and puts back in front
// of what is pending what the last stream sent but the decider never
// confirmed.
func (ss *session) open() error {
	s := ss.s
	s.newStream()
	hello := proto.Clone(s.opts.Hello).(*switchboardv1.EdgeHello)
	if err := ss.stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: hello}}); err != nil {
		return recvStatus(ss.stream, err)
	}
	// The reservations of the calls in flight first: a new owner of the
	// broker keeps them open rather than let them expire mid-call.
	if err := ss.heartbeat(); err != nil {
		return recvStatus(ss.stream, err)
	}
	s.sessions.Add(1)
	s.log.Info("report stream open")
	// What the last stream sent but the decider never confirmed goes first.
	s.requeue(ss.p)
	return nil
}

// receive hands the decider's messages to handle until the stream ends.
func (ss *session) receive() error {
	for {
		msg, err := ss.stream.Recv()
		if err != nil {
			return err
		}
		ss.s.handle(msg)
	}
}

// loop sends what is queued until the stream breaks (recvErr) or ctx ends,
// when it sends what is left (within sctx) and half-closes.
func (ss *session) loop(ctx, sctx context.Context, recvErr <-chan error) error {
	s, p := ss.s, ss.p
	ticker := time.NewTicker(s.opts.FlushInterval)
	defer ticker.Stop()
	beat := time.NewTicker(s.opts.HeartbeatInterval)
	defer beat.Stop()
	drops := dropCounts{reports: s.dropped.Load(), activity: s.droppedActivity.Load()}
	for {
		var err error
		select {
		case <-ctx.Done():
			return ss.close(sctx, recvErr)
		case err := <-recvErr:
			return err
		case r := <-s.queue:
			p.reports = append(p.reports, r)
			if len(p.reports) >= s.opts.BatchSize {
				err = ss.flush()
			}
		case r := <-s.activity:
			p.activity = append(p.activity, r)
			if len(p.activity) >= s.opts.BatchSize {
				err = ss.flush()
			}
		case r := <-s.reconciles:
			err = ss.reconcile(r)
		case <-beat.C:
			err = ss.heartbeat()
		case <-s.replayc:
			err = ss.replay()
		case <-ticker.C:
			err = ss.tick(&drops)
		}
		if err != nil {
			return err
		}
	}
}

// close sends everything still queued, half-closes the stream and waits,
// bounded by sctx, for the decider to end it.
func (ss *session) close(sctx context.Context, recvErr <-chan error) error {
	s, p := ss.s, ss.p
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
	err := ss.flush()
	_ = ss.stream.CloseSend()
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
}

// reconcile takes a queued reconciliation, with whatever queued meanwhile.
// A reconciliation gives capacity back (a tenant's slot of requests in
// flight), so it goes at once rather than at the next tick: a client at its
// concurrency limit that sends its next request right away must find the
// slot free. Only while few batches wait for their ack: beyond that (a busy
// or ownerless decider) they wait for the tick and travel in bigger
// batches.
func (ss *session) reconcile(r *switchboardv1.ReconcileRequest) error {
	s, p := ss.s, ss.p
	p.reconciles = append(p.reconciles, r)
	for more := true; more && len(p.reconciles) < s.opts.BatchSize; {
		select {
		case r := <-s.reconciles:
			p.reconciles = append(p.reconciles, r)
		default:
			more = false
		}
	}
	if len(p.reconciles) >= s.opts.BatchSize || s.reconcileBatchesInFlight() < eagerReconcileBatches {
		return ss.flushReconciles()
	}
	return nil
}

// dropCounts are the drop counters as last logged.
type dropCounts struct{ reports, activity int64 }

// tick sends what is pending and what the decider has not acknowledged for
// ResendAfter, and logs drops since the last tick.
func (ss *session) tick(last *dropCounts) error {
	s := ss.s
	if err := ss.flush(); err != nil {
		return err
	}
	if err := ss.resend(); err != nil {
		return err
	}
	if d := s.dropped.Load(); d != last.reports {
		s.log.Warn("call reports dropped: queue full", "dropped_total", d)
		last.reports = d
	}
	if d := s.droppedActivity.Load(); d != last.activity {
		s.log.Error("activity records dropped: queue full", "dropped_total", d)
		last.activity = d
	}
	return nil
}

// heartbeat declares the reservations of the calls in flight, if any.
func (ss *session) heartbeat() error {
	ids := ss.s.Held()
	if len(ids) == 0 {
		return nil
	}
	return ss.stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Heartbeat{
		Heartbeat: &switchboardv1.ReservationHeartbeat{ReservationIds: ids}}})
}

// flush sends everything pending: call reports, then activity batches and
// reconcile batches, each numbered and kept until acknowledged.
func (ss *session) flush() error {
	s, p := ss.s, ss.p
	for len(p.reports) > 0 {
		n := min(len(p.reports), s.opts.BatchSize)
		batch := &switchboardv1.CallReportBatch{Reports: p.reports[:n]}
		if err := ss.stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: batch}}); err != nil {
			return err
		}
		p.reports = p.reports[n:]
	}
	p.reports = nil
	for len(p.activity) > 0 {
		n := min(len(p.activity), s.opts.BatchSize)
		records := slices.Clone(p.activity[:n])
		batch := &switchboardv1.ActivityBatch{Records: records, Sequence: s.sent(records)}
		// Numbered, the batch is the ledger's until acknowledged; a failed
		// send is requeued from there for the next stream, once.
		p.activity = p.activity[n:]
		if err := ss.stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: batch}}); err != nil {
			return err
		}
	}
	p.activity = nil
	return ss.flushReconciles()
}

// flushReconciles sends the pending reconciliations in numbered batches.
func (ss *session) flushReconciles() error {
	s, p := ss.s, ss.p
	for len(p.reconciles) > 0 {
		n := min(len(p.reconciles), s.opts.BatchSize)
		rs := slices.Clone(p.reconciles[:n])
		batch := &switchboardv1.ReconcileBatch{Reconciles: rs, Sequence: s.sentReconcile(rs)}
		// Numbered, the batch is the ledger's until acknowledged: a failed
		// send is sent again, as it was, on the next stream (resendAll), so
		// it leaves the pending list either way (not sent twice, as two
		// batches).
		p.reconciles = p.reconciles[n:]
		if err := ss.stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Reconcile{Reconcile: batch}}); err != nil {
			return err
		}
	}
	p.reconciles = nil
	return nil
}

// replay sends the reconciliations marked for a newer owner again,
// unnumbered (nobody waits for their ack), and declares the held
// reservations to it when asked.
func (ss *session) replay() error {
	s := ss.s
	taken, beat := s.takeReplays()
	var again []*switchboardv1.ReconcileRequest
	for _, e := range taken {
		again = append(again, e.reconciles...)
	}
	for len(again) > 0 {
		n := min(len(again), s.opts.BatchSize)
		if err := ss.stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Reconcile{
			Reconcile: &switchboardv1.ReconcileBatch{Reconciles: again[:n]}}}); err != nil {
			s.untake(taken) // some may have gone: sent twice, applied once
			return err
		}
		again = again[n:]
	}
	if beat {
		return ss.heartbeat()
	}
	return nil
}

// resend sends again the reconcile batches the decider has not
// acknowledged for ResendAfter (it may have had no room for them).
func (ss *session) resend() error {
	now := time.Now()
	for _, b := range ss.s.stale(now.Add(-ss.s.opts.ResendAfter), now) {
		if err := ss.stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Reconcile{Reconcile: b}}); err != nil {
			return err
		}
	}
	return nil
}

// resendAll sends every unacknowledged reconcile batch again, oldest first.
func (s *Stream) resendAll(stream switchboardv1.EdgeService_ReportClient) error {
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

// handle acts on one message of the decider's.
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
