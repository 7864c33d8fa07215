package report

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakedecider"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type handler struct {
	mu        sync.Mutex
	probes    []*switchboardv1.ProbeCommand
	cooldowns []*switchboardv1.CooldownCommand
}

func (h *handler) Probe(c *switchboardv1.ProbeCommand) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.probes = append(h.probes, c)
}

func (h *handler) Cooldown(c *switchboardv1.CooldownCommand) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cooldowns = append(h.cooldowns, c)
}

func (h *handler) KeySet(*switchboardv1.KeySet) {}

func (h *handler) counts() (int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.probes), len(h.cooldowns)
}

func dial(t *testing.T, addr string) switchboardv1.EdgeServiceClient {
	t.Helper()
	return switchboardv1.NewEdgeServiceClient(dialConn(t, addr))
}

func dialConn(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond,
		}, MinConnectTimeout: time.Second}),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// run starts s in the background and returns a function that stops it and
// waits for it.
func run(t *testing.T, s *Stream) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

var hello = &switchboardv1.EdgeHello{EdgeId: "edge-1", Region: "eu", Version: "test"}

func TestStreamHelloAndBatches(t *testing.T) {
	tests := []struct {
		name      string
		interval  time.Duration
		batchSize int
		n         int
	}{
		{name: "flushed by interval", interval: 20 * time.Millisecond, batchSize: 64, n: 3},
		{name: "flushed by batch size", interval: time.Hour, batchSize: 4, n: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd := fakedecider.Start(t)
			s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: tt.interval, BatchSize: tt.batchSize})
			run(t, s)
			for i := range tt.n {
				s.Report(&switchboardv1.CallReport{RequestId: string(rune('a' + i))})
			}
			require.Eventually(t, func() bool { return len(fd.CallReports()) == tt.n }, 5*time.Second, 10*time.Millisecond)
			msgs := fd.Received()
			require.Equal(t, "edge-1", msgs[0].GetHello().GetEdgeId())
			require.Equal(t, "eu", msgs[0].GetHello().GetRegion())
			for _, m := range msgs[1:] {
				require.LessOrEqual(t, len(m.GetBatch().GetReports()), tt.batchSize)
			}
			require.Equal(t, "a", fd.CallReports()[0].GetRequestId())
		})
	}
}

func TestStreamFinalFlush(t *testing.T) {
	fd := fakedecider.Start(t)
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: time.Hour})
	stop := run(t, s)
	require.Eventually(t, func() bool { return s.Sessions() == 1 }, 5*time.Second, 10*time.Millisecond)
	s.Report(&switchboardv1.CallReport{RequestId: "last"})
	s.Activity(&switchboardv1.ActivityRecord{Id: "gen-last"})
	stop()
	require.Eventually(t, func() bool { return len(fd.CallReports()) == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return len(fd.ActivityRecords()) == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, "gen-last", fd.ActivityRecords()[0].GetId())
}

func TestStreamActivityBatches(t *testing.T) {
	tests := []struct {
		name      string
		interval  time.Duration
		batchSize int
		n         int
	}{
		{name: "flushed by interval", interval: 20 * time.Millisecond, batchSize: 64, n: 3},
		{name: "flushed by batch size", interval: time.Hour, batchSize: 4, n: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd := fakedecider.Start(t)
			s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: tt.interval, BatchSize: tt.batchSize})
			run(t, s)
			for i := range tt.n {
				s.Activity(&switchboardv1.ActivityRecord{Id: string(rune('a' + i))})
			}
			require.Eventually(t, func() bool { return len(fd.ActivityRecords()) == tt.n }, 5*time.Second, 10*time.Millisecond)
			for _, m := range fd.Received()[1:] {
				require.LessOrEqual(t, len(m.GetActivity().GetRecords()), tt.batchSize)
				require.False(t, m.GetActivity() != nil && m.GetBatch() != nil)
			}
			var ids []string
			for _, r := range fd.ActivityRecords() {
				ids = append(ids, r.GetId())
			}
			require.Equal(t, "a", ids[0], "in order")
			require.Zero(t, s.DroppedActivity())
		})
	}
}

func TestActivitySurvivesReconnect(t *testing.T) {
	fd := fakedecider.Start(t)
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: 10 * time.Millisecond})
	run(t, s)
	require.Eventually(t, func() bool { return s.Sessions() == 1 }, 5*time.Second, 10*time.Millisecond)
	fd.Stop()
	// Queued while the decider is away, sent once it is back.
	s.Activity(&switchboardv1.ActivityRecord{Id: "while-down"})
	fd.Restart()
	require.Eventually(t, func() bool {
		for _, r := range fd.ActivityRecords() {
			if r.GetId() == "while-down" {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
}

func TestStreamReconnects(t *testing.T) {
	fd := fakedecider.Start(t)
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: 10 * time.Millisecond})
	run(t, s)
	s.Report(&switchboardv1.CallReport{RequestId: "before"})
	require.Eventually(t, func() bool { return len(fd.CallReports()) == 1 }, 5*time.Second, 10*time.Millisecond)

	fd.Restart()
	require.Eventually(t, func() bool { return fd.Streams() >= 2 }, 10*time.Second, 10*time.Millisecond)
	s.Report(&switchboardv1.CallReport{RequestId: "after"})
	require.Eventually(t, func() bool {
		for _, r := range fd.CallReports() {
			if r.GetRequestId() == "after" {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	hellos := 0
	for _, m := range fd.Received() {
		if m.GetHello() != nil {
			hellos++
		}
	}
	require.GreaterOrEqual(t, hellos, 2, "every new stream starts with a hello")
}

func TestStreamCommands(t *testing.T) {
	fd := fakedecider.Start(t)
	h := &handler{}
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, Handler: h})
	run(t, s)
	require.Eventually(t, func() bool { return s.Sessions() == 1 }, 5*time.Second, 10*time.Millisecond)
	fd.Send(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Ack{Ack: &switchboardv1.ReportAck{Accepted: 1}}})
	fd.Send(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Config{Config: &switchboardv1.ConfigCommand{CatalogRevision: 3}}})
	fd.Send(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Probe{Probe: &switchboardv1.ProbeCommand{ProbeId: "p"}}})
	fd.Send(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Cooldown{Cooldown: &switchboardv1.CooldownCommand{
		EndpointId: "a/m", Until: timestamppb.New(time.Now().Add(time.Minute)),
	}}})
	require.Eventually(t, func() bool { p, c := h.counts(); return p == 1 && c == 1 }, 5*time.Second, 10*time.Millisecond)
}

func TestReportNeverBlocks(t *testing.T) {
	// No Run at all: nothing drains the queue, as when the decider is down.
	s := New(Options{Client: nil, Hello: hello, QueueSize: 4})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			s.Report(&switchboardv1.CallReport{})
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Report blocked")
	}
	require.EqualValues(t, 96, s.Dropped())
}

func TestActivityNeverBlocks(t *testing.T) {
	s := New(Options{Client: nil, Hello: hello, ActivityQueueSize: 4})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			s.Activity(&switchboardv1.ActivityRecord{})
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Activity blocked")
	}
	require.EqualValues(t, 96, s.DroppedActivity())
	require.Zero(t, s.Dropped(), "activity has its own queue")
}

func TestRunWithoutDecider(t *testing.T) {
	// A closed port: every connect fails; Run must wait for the decider
	// and stop promptly when asked.
	fd := fakedecider.Start(t)
	addr := fd.Addr()
	fd.Stop()
	client := &countingClient{EdgeServiceClient: dial(t, addr)}
	s := New(Options{Client: client, Hello: hello, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		FinalFlushTimeout: 100 * time.Millisecond})
	stop := run(t, s)
	require.Eventually(t, func() bool { return client.opened.Load() >= 1 }, 20*time.Second, 5*time.Millisecond, "Run opens a stream")
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stop()
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second): // a hang guard, not a timing
		t.Fatal("Run did not stop while waiting for the decider")
	}
	require.Zero(t, s.Sessions())
}

// TestStreamOpensWhenTheDeciderIsBack: while the decider is down the stream
// waits for the connection instead of failing and backing off on a clock of
// its own, so it opens as soon as the decider serves again. (It used to fail
// fast on a connection in TRANSIENT_FAILURE and double its own delay each
// time: after a decider restart an edge could wait both back-offs, ~7 s,
// before its reconciliations gave the restarted decider its slots back.)
func TestStreamOpensWhenTheDeciderIsBack(t *testing.T) {
	fd := fakedecider.Start(t)
	fd.Stop()
	var dials atomic.Int64
	conn := dialConn(t, fd.Addr(), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		defer dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}))
	conn.Connect()
	require.Eventually(t, func() bool { return dials.Load() >= 1 }, 20*time.Second, time.Millisecond)
	client := &countingClient{EdgeServiceClient: switchboardv1.NewEdgeServiceClient(conn)}
	s := New(Options{Client: client, Hello: hello, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		FinalFlushTimeout: 100 * time.Millisecond})
	run(t, s)
	require.Eventually(t, func() bool { return client.opened.Load() >= 1 }, 20*time.Second, time.Millisecond)
	// Two more reconnection attempts of the connection's (≥ 50 ms apart):
	// a stream failing fast would have been tried again many times at its
	// 1–2 ms delays meanwhile.
	seen := dials.Load()
	require.Eventually(t, func() bool { return dials.Load() >= seen+2 }, 20*time.Second, time.Millisecond)
	fd.Restart()
	require.Eventually(t, func() bool { return s.Sessions() == 1 }, 20*time.Second, time.Millisecond)
	require.EqualValues(t, 1, client.opened.Load(), "streams tried while the decider was down")
}

// countingClient counts the Report streams Run tries to open.
type countingClient struct {
	switchboardv1.EdgeServiceClient
	opened atomic.Int64
}

func (c *countingClient) Report(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[switchboardv1.ReportRequest, switchboardv1.ReportResponse], error) {
	c.opened.Add(1)
	return c.EdgeServiceClient.Report(ctx, opts...)
}

// TestUnacknowledgedActivityIsResent: a batch the decider never confirmed
// durable is sent again on the next stream; a confirmed one is not.
func TestUnacknowledgedActivityIsResent(t *testing.T) {
	fd := fakedecider.Start(t)
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: 10 * time.Millisecond})
	run(t, s)
	count := func(id string) int { return activityCount(fd, id) }
	s.Activity(&switchboardv1.ActivityRecord{Id: "acked"})
	require.Eventually(t, func() bool { return count("acked") == 1 && s.Unacked() == 0 }, 5*time.Second, 10*time.Millisecond)

	fd.WithholdActivityAcks(true)
	s.Activity(&switchboardv1.ActivityRecord{Id: "lost-ack"})
	require.Eventually(t, func() bool { return count("lost-ack") == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, s.Unacked())

	fd.WithholdActivityAcks(false)
	fd.Restart()
	require.Eventually(t, func() bool { return count("lost-ack") == 2 && s.Unacked() == 0 }, 10*time.Second, 10*time.Millisecond,
		"resent on the new stream, then acknowledged")
	require.Equal(t, 1, count("acked"), "an acknowledged batch is not resent")
}

// activityCount returns how many activity records with id the decider got.
func activityCount(fd *fakedecider.Server, id string) int {
	n := 0
	for _, r := range fd.ActivityRecords() {
		if r.GetId() == id {
			n++
		}
	}
	return n
}
