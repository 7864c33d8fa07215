package report

// One edge's stream: the hello, the receive loop that takes its messages
// without waiting on the broker, and the one goroutine that sends to it.

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// conn is one edge's stream as the hub holds it.
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

// Serve runs one edge's stream until it ends. The first message must be a hello.
func (h *Hub) Serve(stream switchboardv1.EdgeService_ReportServer) error {
	hello, err := recvHello(stream)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	c := newConn(ctx, cancel, hello)
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
	// pending Recv returns. stream.Send is only ever called from send.
	recvErr := make(chan error, 1)
	go func() { recvErr <- h.receive(stream, c) }()
	return h.send(stream, c, recvErr, worked)
}

// recvHello receives the stream's first message, which must be a valid
// hello.
func recvHello(stream switchboardv1.EdgeService_ReportServer) (*switchboardv1.EdgeHello, error) {
	first, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	hello := first.GetHello()
	if hello == nil || hello.GetEdgeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "the first Report message must be a hello with an edge_id")
	}
	if err := validate.EdgeHello(hello); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return hello, nil
}

// newConn is the connection of an edge that said hello; cancel ends it.
func newConn(ctx context.Context, cancel context.CancelFunc, hello *switchboardv1.EdgeHello) *conn {
	return &conn{ctx: ctx, hello: hello, since: time.Now(), out: make(chan *switchboardv1.ReportResponse, sendBuffer),
		keys: make(chan struct{}, 1), term: make(chan struct{}, 1), jobs: make(chan job, workQueue), activity: make(chan *switchboardv1.ActivityBatch, activityQueue),
		cancel: cancel}
}

// send is the stream's only sender: commands, acks, the key set and the
// owner's term, until the receive loop ends (recvErr) or the hub closes
// the stream. Nothing but the key set goes before the stream was told an
// owner's term: the edge reads every ack against the owner it was told
// (before the first election there is none), so a stream's first messages
// are the key set and the owner's term, whatever else waits. Meanwhile
// out fills: a call-report ack or a command past its buffer is dropped,
// as for a slow edge, and the activity and reconcile acks wait.
func (h *Hub) send(stream switchboardv1.EdgeService_ReportServer, c *conn, recvErr <-chan error, worked <-chan struct{}) error {
	var out <-chan *switchboardv1.ReportResponse // c.out once a term was sent
	for {
		if sent, term, err := h.sendFirst(stream, c); err != nil {
			return err
		} else if sent {
			if term {
				out = c.out
			}
			continue
		}
		select {
		case err := <-recvErr:
			return h.ended(stream, c, err, worked)
		case <-c.ctx.Done():
			return status.Error(codes.Unavailable, "decider is shutting down")
		case m := <-out:
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
			out = c.out
		}
	}
}

// sendFirst sends a new key set or owner term when one waits, and reports
// whether it sent one, and whether that was a term. A new key set goes
// before anything else waiting: it is the first thing a new stream is
// sent, and it precedes the catalog change announced with it. A new owner
// term goes next, before any ack the new owner's work produces.
func (h *Hub) sendFirst(stream switchboardv1.EdgeService_ReportServer, c *conn) (sent, term bool, _ error) {
	select {
	case <-c.keys:
		return true, false, h.sendKeys(stream)
	default:
	}
	select {
	case <-c.term:
		return true, true, h.sendTerm(stream)
	default:
	}
	return false, false, nil
}

// ended is how the stream ends once its receive loop returned err.
func (h *Hub) ended(stream switchboardv1.EdgeService_ReportServer, c *conn, err error, worked <-chan struct{}) error {
	h.logger.Info("edge disconnected", "edge", c.hello.GetEdgeId(), "err", err)
	if errors.Is(err, io.EOF) {
		// The edge is stopping and sent its last batches: apply them
		// before the stream ends (bounded), acknowledging what it still
		// waits for.
		close(c.jobs) // receive, the only sender, has returned
		close(c.activity)
		return h.drain(stream, c, worked)
	}
	if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// sendKeys sends the latest key set.
func (h *Hub) sendKeys(stream switchboardv1.EdgeService_ReportServer) error {
	ks := h.keys()
	if ks == nil {
		return nil
	}
	return stream.Send(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_KeySet{KeySet: ks}})
}

// sendTerm sends the broker owner's latest term.
func (h *Hub) sendTerm(stream switchboardv1.EdgeService_ReportServer) error {
	return stream.Send(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_OwnerTerm{
		OwnerTerm: &switchboardv1.OwnerTerm{Term: h.term.Load()}}})
}

// drainTimeout bounds how long a stream the edge closed waits for its
// last reservation work.
const drainTimeout = 5 * time.Second

// drain waits, after the edge's half-close, until the worker has applied
// what was queued, sending its acks, within drainTimeout. A new owner's
// term still goes before the acks its work produced; the acks of a
// stream never told a term go without one, as the edge is stopping.
func (h *Hub) drain(stream switchboardv1.EdgeService_ReportServer, c *conn, worked <-chan struct{}) error {
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	for {
		if _, _, err := h.sendFirst(stream, c); err != nil {
			return nil // the edge is gone
		}
		select {
		case <-worked:
			if _, _, err := h.sendFirst(stream, c); err != nil {
				return nil
			}
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
		case <-c.term:
			if err := h.sendTerm(stream); err != nil {
				return nil
			}
		case <-t.C:
			h.logger.Warn("reservation work left undone at the end of a stream", "edge", c.hello.GetEdgeId(), "queued", len(c.jobs))
			return nil
		case <-c.ctx.Done():
			return nil
		}
	}
}

// receive takes the edge's messages until the stream ends.
func (h *Hub) receive(stream switchboardv1.EdgeService_ReportServer, c *conn) error {
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		if err := h.take(c, m); err != nil {
			return err
		}
	}
}

// take handles one message of the edge's; an error ends the stream.
func (h *Hub) take(c *conn, m *switchboardv1.ReportRequest) error {
	switch {
	case m.GetActivity() != nil:
		return h.takeActivity(c, m.GetActivity())
	case m.GetReconcile() != nil:
		// Acknowledged by the worker once applied. A batch that does not
		// fit is not acknowledged: the edge sends it again.
		rb := m.GetReconcile()
		h.queue(c, job{reconciles: keep(h, c, "reconcile", rb.GetReconciles(), validate.Reconcile), ack: rb.GetSequence()})
	case m.GetHeartbeat() != nil:
		ids := keep(h, c, "heartbeat", m.GetHeartbeat().GetReservationIds(), func(id string) error { return validate.ID("reservation_id", id) })
		if len(ids) > 0 {
			h.queue(c, job{keep: ids})
		}
	case m.GetBatch() != nil:
		h.takeReports(c, m.GetBatch())
	}
	return nil
}

// takeReports hands a batch's valid call reports to the sink and
// acknowledges them (best effort: a call-report ack may be dropped).
func (h *Hub) takeReports(c *conn, batch *switchboardv1.CallReportBatch) {
	reports := keep(h, c, "call report", batch.GetReports(), validate.CallReport)
	n := int64(len(reports))
	h.received.Add(n)
	h.measureLag(reports)
	spans := h.startSpans(context.Background(), c.hello, reports)
	if h.sink != nil && n > 0 {
		h.sink(c.hello, reports)
	}
	endSpans(spans)
	h.trySend(c, &switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Ack{Ack: &switchboardv1.ReportAck{Accepted: n}}})
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

func (h *Hub) trySend(c *conn, m *switchboardv1.ReportResponse) {
	select {
	case c.out <- m:
	default:
		h.dropped.Add(1)
	}
}
