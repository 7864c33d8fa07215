package admission

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

func TestWaitFor(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	none := context.Background()
	within := func(d time.Duration) context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(d))
		t.Cleanup(cancel)
		return ctx
	}
	for _, tt := range []struct {
		name string
		ctx  context.Context
		max  *durationpb.Duration
		want time.Duration
	}{
		{"the class's wait, no deadline", none, nil, 0},
		{"asked, no deadline", none, durationpb.New(3 * time.Second), 3 * time.Second},
		{"no wait asked", within(time.Hour), NoWait, -1},
		{"the class's wait, capped by the deadline less the reply's margin", within(10 * time.Second), nil, 10*time.Second - maxReplyMargin},
		{"asked, within the deadline", within(10 * time.Second), durationpb.New(time.Second), time.Second},
		{"asked past the deadline", within(10 * time.Second), durationpb.New(time.Minute), 10*time.Second - maxReplyMargin},
		{"a short deadline keeps a quarter for the reply", within(400 * time.Millisecond), nil, 300 * time.Millisecond},
		{"a deadline passed", within(-time.Second), nil, -1},
	} {
		require.Equal(t, tt.want, waitFor(tt.ctx, tt.max, now), tt.name)
	}
}

func TestRefusalProto(t *testing.T) {
	p := RefusalProto(&broker.Refusal{Reason: broker.ReasonRetryableCapacity, Unit: broker.UnitConcurrentRequests, FallbackModel: "m"})
	require.Equal(t, broker.CodeConcurrency, p.GetCode())
	require.Equal(t, "m", p.GetFallbackModel())
	require.Nil(t, QueueProto(nil), "no queue decision for a request that did not wait")
	q := QueueProto(&broker.QueueDecision{ID: "q1", Class: broker.ClassBatch, Position: 2, Waited: 1500 * time.Millisecond})
	require.Equal(t, "q1", q.GetQueueId())
	require.Equal(t, 1500*time.Millisecond, q.GetWaited().AsDuration())
	require.Nil(t, q.GetEstimatedWait(), "no estimate unless the broker can enforce it")
}

// deadlineServer is a replica's gRPC front that records the deadline of
// every Reserve it is forwarded.
type deadlineServer struct {
	fwdServer
	deadlines chan time.Time
}

func (s *deadlineServer) ForwardReserve(ctx context.Context, req *switchboardv1.ForwardReserveRequest) (*switchboardv1.ForwardReserveResponse, error) {
	dl, _ := ctx.Deadline() // zero when the forwarded call has none
	s.deadlines <- dl
	return s.fwdServer.ForwardReserve(ctx, req)
}

// TestForwardedReserveKeepsTheDeadline: a Reserve forwarded to the
// broker's owner waits within the caller's own deadline, which the owner
// sees, and the owner's answer keeps its refusal code and its no-wait
// request.
func TestForwardedReserveKeepsTheDeadline(t *testing.T) {
	c := newCluster(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	ds := &deadlineServer{deadlines: make(chan time.Time, 16)}
	switchboardv1.RegisterReplicaServiceServer(srv, ds)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	owner, err := Start(t.Context(), Options{
		Broker: newBroker(t), Client: c.client(t, nil), Addr: lis.Addr().String(), Every: 50 * time.Millisecond, LeaseTTL: 5,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	ds.adm.Store(owner)
	t.Cleanup(owner.Close)
	require.True(t, owner.Owner())
	b := startReplica(t, c, nil)
	require.False(t, b.adm.Owner())

	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	want, _ := ctx.Deadline()
	for i := range tenantPerDay + 1 {
		req := reserveReq()
		if i%2 == 1 {
			req.MaxWait = NoWait
		}
		resp, err := b.adm.Reserve(ctx, req)
		require.NoError(t, err)
		got := <-ds.deadlines
		require.False(t, got.IsZero(), "the owner sees the caller's deadline")
		// gRPC sends the time left, rounded up to its unit: the owner's
		// deadline is the caller's (an hour) give or take that rounding and
		// the trip, never a shorter one of the forwarding replica's.
		require.WithinDuration(t, want, got, 30*time.Second)
		if i < tenantPerDay {
			require.True(t, resp.GetAdmitted())
			continue
		}
		require.Equal(t, broker.CodeDailyQuota, resp.GetRefusal().GetCode(), "the owner's refusal code comes back")
		require.Nil(t, resp.GetQueue(), "a daily quota is not waited for")
	}
}
