// Package share carries what one decider replica learns from its edges to
// every other live replica, so each answers Decide as one decider fed by
// every edge would: the call reports a replica takes from its own Report
// streams (and ReportCall) are queued for each peer and streamed to it
// (ReplicaService.ShareObservations), where they are learned from as the
// peer's own (observe.Observer.IngestShared: statistics, outcomes,
// affinity, conversations, cool-downs pushed to its edges), never stored
// as activity nor settled again. The turns of named conversations a
// replica decides go the same way (PublishTurn, session.Table.KeepShared),
// so a conversation's next turn stays on its endpoint whichever replica
// decides it.
//
// Each peer has its own bounded queue and sender, so a slow or dead peer
// never slows the Report streams nor the other peers: Publish never
// blocks; a batch that does not fit in a peer's queue is dropped for that
// peer and counted (Dropped), as is a batch a broken stream lost. What a
// replica's crash loses is what its queues held: at most QueueBatches
// batches a peer, normally the last FlushEvery of reports.
package share

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/session"
)

// Defaults of Options.
const (
	// DefaultQueueBatches bounds the batches waiting for one peer.
	DefaultQueueBatches = 1024
	// DefaultMaxReports bounds the reports of one message to a peer.
	DefaultMaxReports = 512
	// DefaultFlushEvery is how long a sender gathers batches before it
	// sends what it has.
	DefaultFlushEvery = 20 * time.Millisecond
)

// Options configure a Sharer.
type Options struct {
	// Self is this replica's id, sent with every message. (Required)
	Self string
	// Conn returns the connection to the replica at addr. (Required)
	Conn func(addr string) (*grpc.ClientConn, error)
	// Logger logs peers that cannot be reached. (Required)
	Logger *slog.Logger
	// QueueBatches bounds each peer's queue. (Optional) Defaults to DefaultQueueBatches.
	QueueBatches int
	// MaxReports bounds the reports of one message. (Optional) Defaults to DefaultMaxReports.
	MaxReports int
	// FlushEvery is how long reports are gathered before they are sent.
	// (Optional) Defaults to DefaultFlushEvery.
	FlushEvery time.Duration
}

// Peers is where the live replicas are read from (replicas.Set.Live).
type Peers func() (map[string]string, <-chan struct{})

// Sharer queues this replica's observations for every live peer and
// streams them to it.
type Sharer struct {
	o Options

	mu    sync.Mutex
	peers map[string]*peer // by id

	shared  atomic.Int64 // batches a peer took
	dropped atomic.Int64 // batches a peer never got: queue full, stream broken
}

// New returns a sharer of o; Run starts its senders.
func New(o Options) *Sharer {
	if o.QueueBatches <= 0 {
		o.QueueBatches = DefaultQueueBatches
	}
	if o.MaxReports <= 0 {
		o.MaxReports = DefaultMaxReports
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = DefaultFlushEvery
	}
	return &Sharer{o: o, peers: map[string]*peer{}}
}

// item is one thing queued for a peer: a batch of reports or a turn.
type item struct {
	batch *switchboardv1.ObservedBatch
	turn  *switchboardv1.SessionTurn
}

// peer is one live replica: its queue and the sender draining it.
type peer struct {
	addr   string
	queue  chan item
	cancel context.CancelFunc
	done   chan struct{}
}

// Publish queues one batch an edge sent this replica for every live peer.
// It never blocks: a peer whose queue is full misses the batch (Dropped).
func (s *Sharer) Publish(edge *switchboardv1.EdgeHello, reports []*switchboardv1.CallReport) {
	if len(reports) == 0 {
		return
	}
	s.publish(item{batch: &switchboardv1.ObservedBatch{Edge: edge, Reports: reports}})
}

// PublishTurn queues a conversation's turn this replica decided for every
// live peer, as Publish does a batch (session.Options.Kept).
func (s *Sharer) PublishTurn(tu session.Turn) {
	s.publish(item{turn: &switchboardv1.SessionTurn{TenantId: tu.Tenant, Model: tu.Model, SessionId: tu.Session,
		RequestId: tu.RequestID, EndpointId: tu.Endpoint, DecideTime: timestamppb.New(tu.At)}})
}

func (s *Sharer) publish(it item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.peers {
		select {
		case p.queue <- it:
		default:
			s.dropped.Add(1)
		}
	}
}

// Run keeps one sender per live peer, as peers says, until ctx ends.
func (s *Sharer) Run(ctx context.Context, peers Peers) {
	defer s.apply(ctx, nil)
	for {
		live, changed := peers()
		s.apply(ctx, live)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// apply starts a sender for each peer of live that has none (or whose
// address changed) and stops those of peers gone, waiting for them.
func (s *Sharer) apply(ctx context.Context, live map[string]string) {
	s.mu.Lock()
	var stopped []*peer
	for id, p := range s.peers {
		if addr, ok := live[id]; !ok || addr != p.addr {
			p.cancel()
			stopped = append(stopped, p)
			s.dropped.Add(int64(len(p.queue)))
			delete(s.peers, id)
		}
	}
	for id, addr := range live {
		if _, ok := s.peers[id]; ok {
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		p := &peer{addr: addr, queue: make(chan item, s.o.QueueBatches), cancel: cancel, done: make(chan struct{})}
		s.peers[id] = p
		go func() {
			defer close(p.done)
			s.send(pctx, id, p)
		}()
	}
	s.mu.Unlock()
	for _, p := range stopped {
		<-p.done
	}
}

// send streams p's queue to it until ctx ends, opening the stream again
// (after a back-off of up to 2 s) when it breaks.
func (s *Sharer) send(ctx context.Context, id string, p *peer) {
	backoff := 100 * time.Millisecond
	var stream grpc.ClientStreamingClient[switchboardv1.ShareObservationsRequest, switchboardv1.ShareObservationsResponse]
	defer func() {
		if stream != nil {
			_, _ = stream.CloseAndRecv()
		}
	}()
	for {
		msg, n := s.gather(ctx, p)
		if msg == nil {
			return
		}
		if stream == nil {
			conn, err := s.o.Conn(p.addr)
			if err == nil {
				stream, err = switchboardv1.NewReplicaServiceClient(conn).ShareObservations(ctx)
			}
			if err != nil {
				s.lost(ctx, id, n, err, &backoff)
				continue
			}
		}
		if err := stream.Send(msg); err != nil {
			stream = nil
			s.lost(ctx, id, n, err, &backoff)
			continue
		}
		s.shared.Add(int64(n))
		backoff = 100 * time.Millisecond
	}
}

// lost counts n batches a peer did not get and waits the back-off.
func (s *Sharer) lost(ctx context.Context, id string, n int, err error, backoff *time.Duration) {
	s.dropped.Add(int64(n))
	if ctx.Err() != nil {
		return
	}
	s.o.Logger.Warn("sharing observations with a replica failed", "replica", id, "batches", n, "err", err, "retry_in", *backoff)
	select {
	case <-ctx.Done():
	case <-time.After(*backoff):
	}
	*backoff = min(2**backoff, 2*time.Second)
}

// gather waits for p's first queued item, then takes what comes within
// FlushEvery, up to MaxReports reports and turns, as one message of n
// items; nil when ctx ended.
func (s *Sharer) gather(ctx context.Context, p *peer) (msg *switchboardv1.ShareObservationsRequest, n int) {
	msg = &switchboardv1.ShareObservationsRequest{ReplicaId: s.o.Self}
	size := 0
	add := func(it item) {
		n++
		if it.turn != nil {
			msg.SessionTurns = append(msg.SessionTurns, it.turn)
			size++
			return
		}
		msg.Batches = append(msg.Batches, it.batch)
		size += len(it.batch.GetReports())
	}
	select {
	case <-ctx.Done():
		return nil, 0
	case it := <-p.queue:
		add(it)
	}
	flush := time.NewTimer(s.o.FlushEvery)
	defer flush.Stop()
	for size < s.o.MaxReports {
		select {
		case <-ctx.Done():
			return msg, n
		case <-flush.C:
			return msg, n
		case it := <-p.queue:
			add(it)
		}
	}
	return msg, n
}

// Shared returns how many batches (and conversations' turns) peers took,
// one per peer each.
func (s *Sharer) Shared() int64 { return s.shared.Load() }

// Dropped returns how many batches (and conversations' turns) a peer
// never got: its queue was full, its stream broke with them, or it left
// with them queued.
func (s *Sharer) Dropped() int64 { return s.dropped.Load() }

// Instrument reports Shared and Dropped on provider's meter, as
// switchboard_decider_observations_shared and
// switchboard_decider_observations_dropped.
func (s *Sharer) Instrument(provider metric.MeterProvider) error {
	mt := provider.Meter("github.com/switchboard-ai/switchboard/services/decider/internal/share")
	shared, err1 := mt.Int64ObservableCounter("switchboard_decider_observations_shared", metric.WithUnit("{batch}"),
		metric.WithDescription("Batches of call reports this replica's edges sent that another replica took (one per replica per batch)."))
	dropped, err2 := mt.Int64ObservableCounter("switchboard_decider_observations_dropped", metric.WithUnit("{batch}"),
		metric.WithDescription("Batches of call reports this replica's edges sent that another live replica never got: its queue was full, its stream broke, or it left."))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	_, err := mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(shared, s.Shared())
		o.ObserveInt64(dropped, s.Dropped())
		return nil
	}, shared, dropped)
	return err
}
