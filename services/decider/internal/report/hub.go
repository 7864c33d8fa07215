// Package report serves the Report stream: it keeps one connection per edge,
// takes their batched call reports, and pushes commands (probes, cool-downs,
// configuration changes) back to them.
package report

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Sink takes the reports of one batch. It must not block for long: it runs
// on the stream's receive loop.
type Sink func(edge *pb.EdgeHello, reports []*pb.CallReport)

// ActivitySink takes the activity records of one batch and returns once they
// are durable, or an error; like Sink, it runs on the receive loop (blocking
// there is back-pressure on that edge). Only a durable batch is acknowledged.
type ActivitySink func(edge *pb.EdgeHello, records []*pb.ActivityRecord) error

// sendBuffer is how many commands may wait for a slow edge before new ones are
// dropped; a stuck edge must never stall the decider.
const sendBuffer = 256

// Hub tracks the connected edges.
type Hub struct {
	logger   *slog.Logger
	sink     Sink
	activity ActivitySink
	received atomic.Int64
	dropped  atomic.Int64

	mu     sync.Mutex
	edges  map[*conn]struct{}
	ring   []*conn // the edges in connection order, for SendOne
	next   int
	closed bool
}

type conn struct {
	ctx    context.Context
	hello  *pb.EdgeHello
	since  time.Time
	out    chan *pb.ReportResponse
	cancel context.CancelFunc
}

// NewHub returns a hub that hands reports to sink and activity records to
// activity (nil: they are only counted).
func NewHub(logger *slog.Logger, sink Sink, activity ActivitySink) *Hub {
	return &Hub{logger: logger, sink: sink, activity: activity, edges: map[*conn]struct{}{}}
}

// Serve runs one edge's stream until it ends. The first message must be a hello.
func (h *Hub) Serve(stream pb.DeciderService_ReportServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil || hello.GetEdgeId() == "" {
		return status.Error(codes.InvalidArgument, "the first Report message must be a hello with an edge_id")
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	c := &conn{ctx: ctx, hello: hello, since: time.Now(), out: make(chan *pb.ReportResponse, sendBuffer), cancel: cancel}
	if !h.add(c) {
		return status.Error(codes.Unavailable, "decider is shutting down")
	}
	defer h.remove(c)
	h.logger.Info("edge connected", "edge", hello.GetEdgeId(), "region", hello.GetRegion())

	// Receiving runs in its own goroutine so that Close can end the stream
	// by returning from this handler; gRPC then cancels the stream and the
	// pending Recv returns. stream.Send is only ever called from here.
	recvErr := make(chan error, 1)
	go func() { recvErr <- h.receive(stream, c) }()
	for {
		select {
		case err := <-recvErr:
			h.logger.Info("edge disconnected", "edge", hello.GetEdgeId(), "err", err)
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		case <-ctx.Done():
			return status.Error(codes.Unavailable, "decider is shutting down")
		case m := <-c.out:
			if err := stream.Send(m); err != nil {
				return err
			}
		}
	}
}

func (h *Hub) receive(stream pb.DeciderService_ReportServer, c *conn) error {
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		if a := m.GetActivity(); a != nil {
			n := int64(len(a.GetRecords()))
			if h.activity != nil && n > 0 {
				if err := h.activity(c.hello, a.GetRecords()); err != nil {
					// Not acknowledged: the edge sends the batch again on
					// its next stream.
					h.logger.Error("activity batch not stored", "edge", c.hello.GetEdgeId(), "err", err)
					continue
				}
			}
			// This ack must not be dropped like a call-report ack: the edge
			// keeps the batch until it sees it.
			ack := &pb.ReportResponse{Command: &pb.ReportResponse_Ack{Ack: &pb.ReportAck{Accepted: n, ActivitySequence: a.GetSequence()}}}
			select {
			case c.out <- ack:
			case <-c.ctx.Done():
				return c.ctx.Err()
			}
			continue
		}
		batch := m.GetBatch()
		if batch == nil {
			continue
		}
		n := int64(len(batch.GetReports()))
		h.received.Add(n)
		if h.sink != nil && n > 0 {
			h.sink(c.hello, batch.GetReports())
		}
		h.trySend(c, &pb.ReportResponse{Command: &pb.ReportResponse_Ack{Ack: &pb.ReportAck{Accepted: n}}})
	}
}

func (h *Hub) trySend(c *conn, m *pb.ReportResponse) {
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
func (h *Hub) SendOne(m *pb.ReportResponse) bool {
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

// Broadcast sends a command to every connected edge, dropping it for an edge
// whose buffer is full.
func (h *Hub) Broadcast(m *pb.ReportResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.edges {
		h.trySend(c, m)
	}
}

// Edges returns the hellos of the connected edges.
func (h *Hub) Edges() []*pb.EdgeHello {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*pb.EdgeHello, 0, len(h.edges))
	for c := range h.edges {
		out = append(out, c.hello)
	}
	return out
}

// Received returns how many call reports have arrived.
func (h *Hub) Received() int64 { return h.received.Load() }

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
