package share

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// peerServer is a replica's ShareObservations on bufconn, keeping what it
// took.
type peerServer struct {
	switchboardv1.UnimplementedReplicaServiceServer
	mu      sync.Mutex
	from    []string
	reports []string // request ids, in the order taken
}

func (p *peerServer) ShareObservations(stream grpc.ClientStreamingServer[switchboardv1.ShareObservationsRequest, switchboardv1.ShareObservationsResponse]) error {
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&switchboardv1.ShareObservationsResponse{})
		}
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.from = append(p.from, msg.GetReplicaId())
		for _, b := range msg.GetBatches() {
			for _, r := range b.GetReports() {
				p.reports = append(p.reports, b.GetEdge().GetEdgeId()+"/"+r.GetRequestId())
			}
		}
		p.mu.Unlock()
	}
}

func (p *peerServer) taken() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.reports...)
}

// servePeer serves a peerServer and returns it and a connection to it.
func servePeer(t *testing.T) (*peerServer, *grpc.ClientConn) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	p := &peerServer{}
	switchboardv1.RegisterReplicaServiceServer(gs, p)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return p, conn
}

func batch(ids ...string) []*switchboardv1.CallReport {
	var out []*switchboardv1.CallReport
	for _, id := range ids {
		out = append(out, &switchboardv1.CallReport{RequestId: id})
	}
	return out
}

// run starts s's senders for the peers live returns, stopped when the
// test ends.
func run(t *testing.T, s *Sharer, live map[string]string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, func() (map[string]string, <-chan struct{}) { return live, nil })
	}()
	t.Cleanup(func() { cancel(); <-done })
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestSharesEveryBatchInOrder: what an edge reported reaches the peer, in
// order, under the edge's id, from this replica.
func TestSharesEveryBatchInOrder(t *testing.T) {
	p, conn := servePeer(t)
	s := New(Options{Self: "a", Logger: quiet, Conn: func(string) (*grpc.ClientConn, error) { return conn, nil }})
	run(t, s, map[string]string{"b": "bufnet"})
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.peers) == 1 }, 5*time.Second, time.Millisecond)
	var want []string
	for i := range 50 {
		id := string(rune('A'+i%26)) + string(rune('a'+i/26))
		s.Publish(&switchboardv1.EdgeHello{EdgeId: "e1"}, batch(id))
		want = append(want, "e1/"+id)
	}
	require.Eventually(t, func() bool { return len(p.taken()) == len(want) }, 5*time.Second, time.Millisecond)
	require.Equal(t, want, p.taken())
	require.Equal(t, int64(50), s.Shared())
	require.Zero(t, s.Dropped())
	p.mu.Lock()
	require.Equal(t, "a", p.from[0])
	p.mu.Unlock()
}

// TestStuckPeerNeverHoldsPublish: a peer that cannot be reached holds
// nothing up. Its queue fills; what does not fit is dropped and counted;
// once it answers, what its queue held reaches it.
func TestStuckPeerNeverHoldsPublish(t *testing.T) {
	const queue = 8
	p, conn := servePeer(t)
	dialing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s := New(Options{Self: "a", Logger: quiet, QueueBatches: queue, MaxReports: 1, Conn: func(string) (*grpc.ClientConn, error) {
		once.Do(func() { close(dialing) })
		<-release // a dial that hangs
		return conn, nil
	}})
	run(t, s, map[string]string{"b": "bufnet"})
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.peers) == 1 }, 5*time.Second, time.Millisecond)
	edge := &switchboardv1.EdgeHello{EdgeId: "e1"}
	s.Publish(edge, batch("first"))
	<-dialing // the sender holds the first batch, dialling
	for range queue + 5 {
		s.Publish(edge, batch("more"))
	}
	require.Equal(t, int64(5), s.Dropped(), "what does not fit in the queue")
	close(release)
	require.Eventually(t, func() bool { return len(p.taken()) == queue+1 }, 5*time.Second, time.Millisecond)
	require.Equal(t, int64(queue+1), s.Shared())
}

// TestPeerGoneDropsItsQueue: a peer that leaves stops its sender, and
// what was queued for it is counted as dropped.
func TestPeerGoneDropsItsQueue(t *testing.T) {
	_, conn := servePeer(t)
	block := make(chan struct{})
	s := New(Options{Self: "a", Logger: quiet, MaxReports: 1, Conn: func(string) (*grpc.ClientConn, error) {
		<-block
		return conn, nil
	}})
	live := map[string]string{"b": "bufnet"}
	changed := make(chan struct{})
	var mu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, func() (map[string]string, <-chan struct{}) { mu.Lock(); defer mu.Unlock(); return live, changed })
	}()
	defer func() { cancel(); close(block); <-done }()
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.peers) == 1 }, 5*time.Second, time.Millisecond)
	for range 4 {
		s.Publish(&switchboardv1.EdgeHello{EdgeId: "e1"}, batch("x"))
	}
	mu.Lock()
	live = map[string]string{}
	close(changed)
	changed = make(chan struct{})
	mu.Unlock()
	require.Eventually(t, func() bool { return s.Dropped() >= 3 }, 5*time.Second, time.Millisecond, "the batches queued for the peer gone")
}
