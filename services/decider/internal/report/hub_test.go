package report

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

type hubService struct {
	switchboardv1.UnimplementedEdgeServiceServer
	h *Hub
}

func (s hubService) Report(stream switchboardv1.EdgeService_ReportServer) error {
	return s.h.Serve(stream)
}

// serveHub serves h on a real gRPC server on loopback and returns a client.
func serveHub(t *testing.T, h *Hub) switchboardv1.EdgeServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	switchboardv1.RegisterEdgeServiceServer(srv, hubService{h: h})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		h.Close()
		srv.Stop()
		<-done
	})
	return switchboardv1.NewEdgeServiceClient(conn)
}

// fakeReservations records what the hub applies; gate, when set, holds
// every call until it is closed; fail makes the first n calls fail.
type fakeReservations struct {
	mu         sync.Mutex
	reconciled []*switchboardv1.ReconcileRequest
	kept       [][]string
	fail       int
	poison     string // always fails
	attempts   int
	gate       chan struct{}
	// term is the owner's term reconciliations are applied under, unless
	// termOf names another for a reservation.
	term   int64
	termOf map[string]int64
}

func (f *fakeReservations) wait(ctx context.Context) error {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeReservations) Reconcile(ctx context.Context, req *switchboardv1.ReconcileRequest) (int64, error) {
	if err := f.wait(ctx); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if req.GetReservationId() == f.poison {
		return 0, status.Error(codes.Internal, "rate-limit broker error")
	}
	if f.fail > 0 {
		f.fail--
		return 0, status.Error(codes.Unavailable, "no rate-limit broker owner is elected")
	}
	f.reconciled = append(f.reconciled, req)
	if term, ok := f.termOf[req.GetReservationId()]; ok {
		return term, nil
	}
	return f.term, nil
}

func (f *fakeReservations) Keep(ctx context.Context, ids []string) error {
	if err := f.wait(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kept = append(f.kept, ids)
	return nil
}

func (f *fakeReservations) reconciledIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, r := range f.reconciled {
		ids = append(ids, r.GetReservationId())
	}
	return ids
}

// newTestHub is a hub whose broker has an owner, of term 1: a stream is
// sent nothing but its key set before it was told an owner's term.
func newTestHub(sink Sink, activity ActivitySink, rsv ...Reservations) *Hub {
	h := newOwnerlessHub(sink, activity, rsv...)
	h.SetOwnerTerm(1)
	return h
}

// newOwnerlessHub is a hub before the broker's first owner is elected.
func newOwnerlessHub(sink Sink, activity ActivitySink, rsv ...Reservations) *Hub {
	o := Options{Logger: slog.New(slog.DiscardHandler), Sink: sink, Activity: activity}
	if len(rsv) > 0 {
		o.Reservations = rsv[0]
	}
	h := NewHub(o)
	h.SetRetry(time.Millisecond, 5*time.Millisecond, time.Minute)
	return h
}

func open(t *testing.T, c switchboardv1.EdgeServiceClient, hello *switchboardv1.EdgeHello) switchboardv1.EdgeService_ReportClient {
	t.Helper()
	stream, err := c.Report(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: hello}}))
	return stream
}

var acked = &switchboardv1.EdgeHello{EdgeId: "edge-1"}

func reconcileBatch(seq uint64, ids ...string) *switchboardv1.ReportRequest {
	b := &switchboardv1.ReconcileBatch{Sequence: seq}
	for _, id := range ids {
		b.Reconciles = append(b.Reconciles, &switchboardv1.ReconcileRequest{ReservationId: id, Outcome: switchboardv1.Outcome_OUTCOME_OK})
	}
	return &switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Reconcile{Reconcile: b}}
}

// recvAck returns the next ack on the stream, skipping other commands.
func recvAck(t *testing.T, stream switchboardv1.EdgeService_ReportClient) *switchboardv1.ReportAck {
	t.Helper()
	for {
		m, err := stream.Recv()
		require.NoError(t, err)
		if a := m.GetAck(); a != nil {
			return a
		}
	}
}

func TestHubRequiresAHello(t *testing.T) {
	c := serveHub(t, newTestHub(nil, nil))
	for name, first := range map[string]*switchboardv1.ReportRequest{
		"a batch":            {Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{}}},
		"a hello without id": {Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{Region: "eu"}}},
		"a reconcile batch":  reconcileBatch(1, "r1"),
		"an empty message":   {},
	} {
		t.Run(name, func(t *testing.T) {
			stream, err := c.Report(t.Context())
			require.NoError(t, err)
			require.NoError(t, stream.Send(first))
			_, err = stream.Recv()
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		})
	}
}

func TestHubAcknowledgesActivityOnlyWhenStored(t *testing.T) {
	var mu sync.Mutex
	fails := 1
	var stored []string
	h := newTestHub(nil, func(_ context.Context, _ *switchboardv1.EdgeHello, rs []*switchboardv1.ActivityRecord) error {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return errors.New("disk full")
		}
		for _, r := range rs {
			stored = append(stored, r.GetId())
		}
		return nil
	})
	stream := open(t, serveHub(t, h), acked)
	send := func(seq uint64, id string) {
		require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: &switchboardv1.ActivityBatch{
			Sequence: seq, Records: []*switchboardv1.ActivityRecord{{Id: id}}}}}))
	}
	send(1, "a") // not stored: not acknowledged
	// Batches queued while a write runs share the next write (and its
	// failure): let the first write fail alone.
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return fails == 0 }, 10*time.Second, time.Millisecond)
	send(2, "b")
	a := recvAck(t, stream)
	require.Equal(t, uint64(2), a.GetActivitySequence(), "only the stored batch is acknowledged")
	mu.Lock()
	require.Equal(t, []string{"b"}, stored)
	mu.Unlock()
}

func TestHubAcknowledgesReconcilesOnceApplied(t *testing.T) {
	rsv := &fakeReservations{fail: 3} // no owner yet for the first three attempts
	h := newTestHub(nil, nil, rsv)
	stream := open(t, serveHub(t, h), acked)
	require.NoError(t, stream.Send(reconcileBatch(7, "r1", "r2")))
	a := recvAck(t, stream)
	require.Equal(t, uint64(7), a.GetReconcileSequence())
	require.Equal(t, int64(2), a.GetAccepted())
	require.Equal(t, []string{"r1", "r2"}, rsv.reconciledIDs(), "acknowledged only after both were applied")
	require.Equal(t, int64(3), h.Retried(), "failures are retried, not dropped")
}

func TestHubSlowReservationsDoNotBlockReceiving(t *testing.T) {
	gate := make(chan struct{})
	rsv := &fakeReservations{gate: gate}
	var mu sync.Mutex
	var reports int
	h := newTestHub(func(_ *switchboardv1.EdgeHello, rs []*switchboardv1.CallReport) {
		mu.Lock()
		defer mu.Unlock()
		reports += len(rs)
	}, func(context.Context, *switchboardv1.EdgeHello, []*switchboardv1.ActivityRecord) error { return nil }, rsv)
	stream := open(t, serveHub(t, h), acked)
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Heartbeat{Heartbeat: &switchboardv1.ReservationHeartbeat{ReservationIds: []string{"r0"}}}}))
	require.NoError(t, stream.Send(reconcileBatch(1, "r1")))
	for i := range 100 {
		require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{
			Reports: []*switchboardv1.CallReport{{EndpointId: "a/m", ReservationId: "ignored"}}}}}))
		require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: &switchboardv1.ActivityBatch{
			Sequence: uint64(i + 1), Records: []*switchboardv1.ActivityRecord{{Id: "x"}}}}}))
	}
	var activityAcks int
	for activityAcks < 100 {
		a := recvAck(t, stream)
		require.Zero(t, a.GetReconcileSequence(), "the reconcile is not applied yet")
		if a.GetActivitySequence() != 0 {
			activityAcks++
		}
	}
	mu.Lock()
	require.Equal(t, 100, reports, "every call report was taken while the broker was stuck")
	mu.Unlock()
	require.Empty(t, rsv.reconciledIDs())

	close(gate)
	for {
		if a := recvAck(t, stream); a.GetReconcileSequence() == 1 {
			break
		}
	}
	require.Equal(t, []string{"r1"}, rsv.reconciledIDs(), "an edge that acknowledges reconciles is never reconciled from its call reports")
	rsv.mu.Lock()
	require.Equal(t, [][]string{{"r0"}}, rsv.kept)
	rsv.mu.Unlock()
}

// More reservation work than a stream's queue holds is refused, not
// acknowledged, rather than blocking the stream; the edge resends it.
func TestHubRefusesWorkBeyondItsQueue(t *testing.T) {
	gate := make(chan struct{})
	rsv := &fakeReservations{gate: gate}
	h := newTestHub(nil, nil, rsv)
	stream := open(t, serveHub(t, h), acked)
	n := workQueue + 10
	for i := range n {
		require.NoError(t, stream.Send(reconcileBatch(uint64(i+1), "r")))
	}
	require.Eventually(t, func() bool { return h.Refused() > 0 }, 10*time.Second, time.Millisecond)
	close(gate)
	seen := map[uint64]bool{}
	deadline := time.After(10 * time.Second)
	for len(seen) < n-int(h.Refused()) {
		select {
		case <-deadline:
			t.Fatalf("only %d acks", len(seen))
		default:
		}
		seen[recvAck(t, stream).GetReconcileSequence()] = true
	}
	require.Less(t, len(seen), n, "what was refused is not acknowledged")
}

func TestHubCloseEndsStreams(t *testing.T) {
	gate := make(chan struct{}) // a worker stuck on the broker must not hold Close up either
	defer close(gate)
	rsv := &fakeReservations{gate: gate}
	h := newTestHub(nil, nil, rsv)
	c := serveHub(t, h)
	stream := open(t, c, acked)
	require.NoError(t, stream.Send(reconcileBatch(1, "r1")))
	require.Eventually(t, func() bool { return len(h.Edges()) == 1 }, 10*time.Second, time.Millisecond)
	h.Close()
	for {
		_, err := stream.Recv()
		if err != nil {
			require.NotErrorIs(t, err, io.EOF)
			require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
			break
		}
	}
	require.Eventually(t, func() bool { return len(h.Edges()) == 0 }, 10*time.Second, time.Millisecond)
	again := open(t, c, acked)
	_, err := again.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err), "a closed hub takes no new stream")
}

// A replay (sequence 0) is applied like any batch and never acknowledged.
func TestHubAppliesReplaysWithoutAck(t *testing.T) {
	rsv := &fakeReservations{}
	h := newTestHub(nil, nil, rsv)
	stream := open(t, serveHub(t, h), acked)
	require.NoError(t, stream.Send(reconcileBatch(0, "replayed")))
	require.NoError(t, stream.Send(reconcileBatch(5, "new")))
	require.Equal(t, uint64(5), recvAck(t, stream).GetReconcileSequence(), "the first ack is the numbered batch's")
	require.Equal(t, []string{"replayed", "new"}, rsv.reconciledIDs())
}

// A reconciliation that keeps failing is given up after a while, its batch
// left unacknowledged for the edge to send again; the work behind it goes on.
func TestHubGivesUpAPoisonedBatch(t *testing.T) {
	rsv := &fakeReservations{poison: "poison"}
	h := newTestHub(nil, nil, rsv)
	h.SetRetry(time.Millisecond, 5*time.Millisecond, 50*time.Millisecond)
	stream := open(t, serveHub(t, h), acked)
	require.NoError(t, stream.Send(reconcileBatch(1, "poison", "after-poison")))
	require.NoError(t, stream.Send(reconcileBatch(2, "fine")))
	require.Equal(t, uint64(2), recvAck(t, stream).GetReconcileSequence(), "the poisoned batch is not acknowledged")
	require.Equal(t, []string{"fine"}, rsv.reconciledIDs())
}

// An edge that stops sends its last batches and half-closes: they are
// applied, and acknowledged, before the stream ends.
func TestHubAppliesTheLastBatchesOfAClosingEdge(t *testing.T) {
	gate := make(chan struct{})
	rsv := &fakeReservations{gate: gate}
	h := newTestHub(nil, nil, rsv)
	stream := open(t, serveHub(t, h), acked)
	require.NoError(t, stream.Send(reconcileBatch(1, "last")))
	require.NoError(t, stream.CloseSend())
	close(gate) // the broker answers only now
	require.Equal(t, uint64(1), recvAck(t, stream).GetReconcileSequence())
	_, err := stream.Recv()
	require.ErrorIs(t, err, io.EOF, "then the stream ends")
	require.Equal(t, []string{"last"}, rsv.reconciledIDs())
}

// recvKeySet returns the next key set on the stream, skipping other commands.
func recvKeySet(t *testing.T, stream switchboardv1.EdgeService_ReportClient) *switchboardv1.KeySet {
	t.Helper()
	for {
		m, err := stream.Recv()
		require.NoError(t, err)
		if ks := m.GetKeySet(); ks != nil {
			return ks
		}
	}
}

func TestHubSendsKeySets(t *testing.T) {
	var keys atomic.Pointer[switchboardv1.KeySet]
	h := NewHub(Options{Logger: slog.New(slog.DiscardHandler), Keys: keys.Load})
	c := serveHub(t, h)
	// A stream opened before there is a set gets it when it comes, then
	// every newer set; one opened later gets the latest first.
	early := open(t, c, &switchboardv1.EdgeHello{EdgeId: "early"})
	require.Eventually(t, func() bool { return len(h.Edges()) == 1 }, 5*time.Second, 5*time.Millisecond)
	setKeys := func(ks *switchboardv1.KeySet) { keys.Store(ks); h.KeysChanged() }
	setKeys(&switchboardv1.KeySet{KeyPrefixes: []uint64{1, 2}, Version: 7})
	require.Equal(t, uint64(7), recvKeySet(t, early).GetVersion())
	// Sets are never dropped for a slow edge: many in a row leave the
	// latest as the last one sent.
	for v := uint64(8); v <= 8+2*sendBuffer; v++ {
		setKeys(&switchboardv1.KeySet{KeyPrefixes: []uint64{v}, Version: v})
	}
	last := uint64(8 + 2*sendBuffer)
	for got := recvKeySet(t, early); got.GetVersion() != last; got = recvKeySet(t, early) {
		require.Less(t, got.GetVersion(), last)
	}

	late := open(t, c, &switchboardv1.EdgeHello{EdgeId: "late"})
	m, err := late.Recv()
	require.NoError(t, err)
	require.Equal(t, []uint64{last}, m.GetKeySet().GetKeyPrefixes(), "the latest set is the first thing a new stream gets")
}

// A slow activity write (a commit's fsync) holds up neither the stream's
// reconciliations nor its call reports, and the batches that arrive
// meanwhile are stored together in the next write, each acknowledged once
// durable.
func TestHubSlowActivityWriteDoesNotBlockTheStream(t *testing.T) {
	gate, writing := make(chan struct{}), make(chan struct{}, 8)
	var mu sync.Mutex
	var writes []int // records per write
	rsv := &fakeReservations{}
	h := newTestHub(nil, func(_ context.Context, _ *switchboardv1.EdgeHello, rs []*switchboardv1.ActivityRecord) error {
		writing <- struct{}{}
		<-gate
		mu.Lock()
		defer mu.Unlock()
		writes = append(writes, len(rs))
		return nil
	}, rsv)
	stream := open(t, serveHub(t, h), acked)
	activity := func(seq uint64) *switchboardv1.ReportRequest {
		return &switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: &switchboardv1.ActivityBatch{
			Sequence: seq, Records: []*switchboardv1.ActivityRecord{{Id: "a"}, {Id: "b"}}}}}
	}
	require.NoError(t, stream.Send(activity(1)))
	<-writing // the first write started and blocks on the gate
	for seq := uint64(2); seq <= 5; seq++ {
		require.NoError(t, stream.Send(activity(seq)))
	}
	require.NoError(t, stream.Send(reconcileBatch(1, "r1")))
	a := recvAck(t, stream)
	require.Equal(t, uint64(1), a.GetReconcileSequence(), "the reconcile is acknowledged while the activity write is stuck")
	require.Zero(t, a.GetActivitySequence())

	close(gate)
	acks := map[uint64]int64{}
	for len(acks) < 5 {
		a := recvAck(t, stream)
		if s := a.GetActivitySequence(); s != 0 {
			acks[s] = a.GetAccepted()
		}
	}
	require.Equal(t, map[uint64]int64{1: 2, 2: 2, 3: 2, 4: 2, 5: 2}, acks)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{2, 8}, writes, "the four batches queued behind the first write share the next")
}

// recvOwnerTerm returns the next owner term on the stream, skipping other
// commands.
func recvOwnerTerm(t *testing.T, stream switchboardv1.EdgeService_ReportClient) int64 {
	t.Helper()
	for {
		m, err := stream.Recv()
		require.NoError(t, err)
		if ot := m.GetOwnerTerm(); ot != nil {
			return ot.GetTerm()
		}
	}
}

// Every edge is told the broker owner's term: when its stream opens, and
// each time a newer one is set; an older or the same term is not sent again,
// and a newer one is never dropped for a slow edge.
func TestHubTellsEdgesTheOwnerTerm(t *testing.T) {
	h := newOwnerlessHub(nil, nil)
	c := serveHub(t, h)
	early := open(t, c, &switchboardv1.EdgeHello{EdgeId: "early"})
	require.Eventually(t, func() bool { return len(h.Edges()) == 1 }, 5*time.Second, 5*time.Millisecond)
	h.SetOwnerTerm(5)
	require.Equal(t, int64(5), recvOwnerTerm(t, early))
	h.SetOwnerTerm(5)
	h.SetOwnerTerm(3) // a watch that lags: not a new owner
	h.SetOwnerTerm(9)
	require.Equal(t, int64(9), recvOwnerTerm(t, early), "neither the same term nor an older one is sent")
	for term := int64(10); term <= 10+2*sendBuffer; term++ {
		h.SetOwnerTerm(term)
	}
	last := int64(10 + 2*sendBuffer)
	for got := recvOwnerTerm(t, early); got != last; got = recvOwnerTerm(t, early) {
		require.Less(t, got, last)
	}

	late := open(t, c, &switchboardv1.EdgeHello{EdgeId: "late"})
	m, err := late.Recv()
	require.NoError(t, err)
	require.Equal(t, last, m.GetOwnerTerm().GetTerm(), "a new stream is told the term at once")
}

// FollowOwnerTerm tells the edges each term its source reports, as the
// election watch changes it.
func TestHubFollowsTheOwnerTerm(t *testing.T) {
	h := newOwnerlessHub(nil, nil)
	stream := open(t, serveHub(t, h), acked)
	var mu sync.Mutex
	term, changed := int64(0), make(chan struct{})
	set := func(v int64) {
		mu.Lock()
		defer mu.Unlock()
		term = v
		close(changed)
		changed = make(chan struct{})
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.FollowOwnerTerm(ctx, func() (int64, <-chan struct{}) { mu.Lock(); defer mu.Unlock(); return term, changed })
	}()
	defer func() { cancel(); <-done }()
	set(41)
	require.Equal(t, int64(41), recvOwnerTerm(t, stream))
	set(0) // nobody owns the state for a moment: nothing to tell
	set(42)
	require.Equal(t, int64(42), recvOwnerTerm(t, stream))
}

// A reconcile batch's ack names the lowest term its reconciliations were
// applied under (0 when one is unknown), so the edge replays the batch to
// any newer owner; a batch with nothing left to apply names the owner now.
func TestHubAcksNameTheOwnerTermTheyWereAppliedUnder(t *testing.T) {
	rsv := &fakeReservations{term: 9, termOf: map[string]int64{"by-the-old-owner": 7, "unknown": 0}}
	h := newTestHub(nil, nil, rsv)
	h.SetOwnerTerm(11)
	stream := open(t, serveHub(t, h), acked)
	require.NoError(t, stream.Send(reconcileBatch(1, "r1")))
	require.NoError(t, stream.Send(reconcileBatch(2, "r2", "by-the-old-owner", "r3")))
	require.NoError(t, stream.Send(reconcileBatch(3, "r4", "unknown")))
	require.NoError(t, stream.Send(reconcileBatch(4, strings.Repeat("x", 200)))) // invalid: dropped
	want := map[uint64]int64{1: 9, 2: 7, 3: 0, 4: 11}
	for range want {
		a := recvAck(t, stream)
		require.Equal(t, want[a.GetReconcileSequence()], a.GetOwnerTerm(), "batch %d", a.GetReconcileSequence())
	}
}

// Before a broker owner is elected a stream is sent its key set and
// nothing else: an ack, of whatever kind, comes after the owner's term,
// as the edge reads a reconcile ack against the owner it was told. The
// reconciliation that the first owner applies tells the stream its term
// before its ack, even before the election watch does.
func TestHubSendsNoAckBeforeAnOwnerTerm(t *testing.T) {
	rsv := &fakeReservations{term: 4, fail: math.MaxInt} // no owner until fail is 0
	h := NewHub(Options{Logger: slog.New(slog.DiscardHandler),
		Sink:         func(*switchboardv1.EdgeHello, []*switchboardv1.CallReport) {},
		Activity:     func(context.Context, *switchboardv1.EdgeHello, []*switchboardv1.ActivityRecord) error { return nil },
		Reservations: rsv,
		Keys:         func() *switchboardv1.KeySet { return &switchboardv1.KeySet{KeyPrefixes: []uint64{1}, Version: 1} },
	})
	h.SetRetry(time.Millisecond, 5*time.Millisecond, time.Minute)
	stream := open(t, serveHub(t, h), acked)
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{
		Reports: []*switchboardv1.CallReport{{RequestId: "r", Model: "m", EndpointId: "e", Outcome: switchboardv1.Outcome_OUTCOME_OK}}}}}))
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: &switchboardv1.ActivityBatch{
		Sequence: 1, Records: []*switchboardv1.ActivityRecord{{Id: "a"}}}}}))
	require.NoError(t, stream.Send(reconcileBatch(1, "r1")))
	// No owner: the reconciliation is retried, and nothing is acknowledged.
	require.Eventually(t, func() bool { return h.Retried() > 0 }, 10*time.Second, time.Millisecond)
	rsv.mu.Lock()
	rsv.fail = 0 // the first owner, of term 4
	rsv.mu.Unlock()

	var kinds []string
	acks := 0
	for acks < 3 {
		m, err := stream.Recv()
		require.NoError(t, err)
		switch {
		case m.GetKeySet() != nil:
			kinds = append(kinds, "key_set")
		case m.GetOwnerTerm() != nil:
			require.Equal(t, int64(4), m.GetOwnerTerm().GetTerm())
			kinds = append(kinds, "owner_term")
		case m.GetAck() != nil:
			acks++
			kinds = append(kinds, "ack")
			if m.GetAck().GetReconcileSequence() == 1 {
				require.Equal(t, int64(4), m.GetAck().GetOwnerTerm())
			}
		}
	}
	require.Equal(t, []string{"key_set", "owner_term", "ack", "ack", "ack"}, kinds)
}
