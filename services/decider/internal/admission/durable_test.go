package admission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/readiness"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// failingClient dials the cluster with every etcd transaction failing while
// *fail is set, as a write to an etcd that refuses or cannot be reached.
func (c *cluster) failingClient(t *testing.T, fail *atomic.Bool) *clientv3.Client {
	t.Helper()
	txn := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if fail.Load() && method == "/etcdserverpb.KV/Txn" {
			return errors.New("test: etcd write refused")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{c.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(txn)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// startWith starts a replica with its own broker, budget and etcd client.
func startWith(t *testing.T, c *cluster, cli *clientv3.Client, b *broker.Broker, budget *hedge.Budget) *replica {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	fs := &fwdServer{}
	switchboardv1.RegisterReplicaServiceServer(srv, fs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	r := &replica{broker: b, addr: lis.Addr().String()}
	r.adm, err = Start(t.Context(), Options{
		Broker: b, Budget: budget, Client: cli, Addr: r.addr, Every: 50 * time.Millisecond, LeaseTTL: 2,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	fs.adm.Store(r.adm)
	t.Cleanup(r.adm.Close)
	return r
}

// TestFailingSnapshotsNeverOverAdmitAfterACrash: while the owner cannot
// write its snapshot it admits nothing (broker_not_durable) and says so in
// its health; killed then, the replica that takes over from the last
// durable snapshot in learning mode keeps the tenant within its limit.
// Before, the owner went on admitting on a state it could not save, and the
// new owner, restoring the stale snapshot, admitted the limit again.
func TestFailingSnapshotsNeverOverAdmitAfterACrash(t *testing.T) {
	c := newCluster(t)
	var fail atomic.Bool
	a := startWith(t, c, c.failingClient(t, &fail), newBroker(t), nil)
	require.True(t, a.adm.Owner())
	b := startReplica(t, c, nil)
	require.False(t, b.adm.Owner())

	admitted := 0
	require.True(t, a.admitted(t))
	admitted++
	c.snapshotSaved(t)
	require.NoError(t, a.adm.Healthy())

	// etcd refuses the owner's writes: once it has seen that, the owner
	// refuses every reservation and reports itself unhealthy.
	fail.Store(true)
	require.Eventually(t, func() bool { return a.adm.Healthy() != nil }, 10*time.Second, 10*time.Millisecond,
		"the owner reports its failing snapshots")
	require.Positive(t, a.adm.Snapshots().Failures)
	require.Positive(t, a.adm.Snapshots().Age)
	for range 2 * tenantPerDay {
		resp, err := a.adm.Reserve(t.Context(), reserveReq())
		require.NoError(t, err)
		if resp.GetAdmitted() {
			admitted++
			continue
		}
		require.Equal(t, broker.CodeNotDurable, resp.GetRefusal().GetCode())
	}
	// Through the other replica, forwarded to the owner: refused too.
	resp, err := b.adm.Reserve(t.Context(), reserveReq())
	require.NoError(t, err)
	require.Equal(t, broker.CodeNotDurable, resp.GetRefusal().GetCode())

	// The owner dies; the other replica restores the last durable snapshot.
	a.adm.Abandon()
	require.Eventually(t, b.adm.Owner, 20*time.Second, 20*time.Millisecond, "the other replica takes over")
	for range 2 * tenantPerDay {
		if b.admitted(t) {
			admitted++
		}
	}
	require.LessOrEqual(t, admitted, tenantPerDay, "over-admission after the crash")
	t.Logf("admitted %d of the tenant's %d", admitted, tenantPerDay)
}

// TestSnapshotAtItsBoundsIsWritten: a broker filled to its state limit with
// reservations whose ids and keys are as long as allowed, and a hedge
// budget filled to its own, are saved in one transaction that a default
// etcd (1.5 MiB request limit) accepts.
func TestSnapshotAtItsBoundsIsWritten(t *testing.T) {
	c := newCluster(t)
	bk, err := broker.New(broker.Config{
		Buckets: []broker.Spec{
			{Scope: broker.ScopeTenant, Key: "acme", Unit: broker.UnitRequests, Window: broker.WindowDay, Capacity: 1e9},
			{Scope: broker.ScopeAPIKey, Key: "key-1", Unit: broker.UnitConcurrentRequests, Capacity: 1e9},
			{Scope: broker.ScopeModelRoute, Key: "alpha/m1", Unit: broker.UnitTotalTokens, Window: broker.WindowMinute, Capacity: 1e12},
		},
		Routes: []broker.Route{{EndpointID: "alpha/m1", Model: "m1"}},
	}, broker.Options{DisableCorrection: true})
	require.NoError(t, err)
	budget := hedge.New(1e9, time.Now)
	r := startWith(t, c, c.client(t, nil), bk, budget)
	require.True(t, r.adm.Owner())

	pad := func(prefix string, i, n int) string {
		s := fmt.Sprintf("%s%d-", prefix, i)
		return s + strings.Repeat("<", n-len(s))
	}
	n := 0
	for ; ; n++ {
		require.Less(t, n, 1<<20, "the broker never refused")
		req := reserveReq()
		req.RequestId, req.IdempotencyKey = pad("req", n, validate.MaxIDLen), pad("key", n, validate.MaxKeyLen)
		resp, err := r.adm.Reserve(t.Context(), req)
		require.NoError(t, err)
		if !resp.GetAdmitted() {
			require.Equal(t, broker.CodeStateFull, resp.GetRefusal().GetCode())
			break
		}
	}
	h := 0
	for ; ; h++ {
		require.Less(t, h, 1<<20, "the budget never refused")
		if ok, _, _ := budget.Acquire(pad("hedge", h, validate.MaxIDLen), 0.001); !ok {
			break
		}
	}
	c.snapshotSaved(t)
	get, err := c.client(t, nil).Get(t.Context(), SnapshotKey)
	require.NoError(t, err)
	require.Len(t, get.Kvs, 1)
	bget, err := c.client(t, nil).Get(t.Context(), BudgetKey)
	require.NoError(t, err)
	require.Len(t, bget.Kvs, 1)
	size := len(get.Kvs[0].Value) + len(bget.Kvs[0].Value)
	t.Logf("%d reservations, %d pending hedges: %d bytes in one transaction", n, h, size)
	require.Greater(t, size, broker.DefaultMaxStateBytes*3/4, "the test filled the state")
	// Refused never; a write that ran out of its time on a loaded machine
	// is tried again, and the whole state was saved (above).
	st := r.adm.Snapshots()
	require.Zero(t, st.Failures-st.Slow, "snapshot writes refused")
	require.NoError(t, r.adm.Healthy())

	// The snapshot holds every reservation: a new broker restores them.
	nb := newBroker(t)
	require.NoError(t, nb.Restore(get.Kvs[0].Value, time.Now()))
	require.Equal(t, n, nb.Open())
}

// TestHealthy: the owner is unhealthy while its snapshots fail past the
// bound; any replica while no owner is known for longer than the session's
// TTL.
func TestHealthy(t *testing.T) {
	a := &Admission{o: Options{Addr: "10.0.0.1:9090", LeaseTTL: 3, Broker: newBroker(t),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, changed: make(chan struct{})}
	a.leaderSince.Store(time.Now().UnixNano())
	require.NoError(t, a.Healthy(), "no owner yet, but not for long")
	a.leaderSince.Store(time.Now().Add(-4 * time.Second).UnixNano())
	require.ErrorContains(t, a.Healthy(), "no broker owner known")
	a.setLeader("10.0.0.2:9090", 2)
	require.NoError(t, a.Healthy(), "another replica owns the broker")
	a.setLeader("10.0.0.1:9090", 3)
	a.leaderSince.Store(time.Now().Add(-4 * time.Second).UnixNano())
	require.ErrorContains(t, a.Healthy(), "no broker owner known", "this replica has been taking over for too long")

	a.owner.Store(true)
	a.saved(nil)
	require.NoError(t, a.Healthy())
	for range FailingWrites - 1 {
		a.saved(errors.New("etcd refused"))
	}
	require.NoError(t, a.Healthy(), "a failure or two is an alarm, not yet unhealthy")
	a.saved(errors.New("etcd refused"))
	require.ErrorContains(t, a.Healthy(), "broker snapshots failing")
	a.saved(nil)
	require.NoError(t, a.Healthy())
	require.Equal(t, int64(FailingWrites), a.Snapshots().Failures)

	// One failure that lasts: unhealthy after FailingAfter.
	a.saved(errors.New("etcd refused"))
	a.durableAt.Store(time.Now().Add(-FailingAfter - time.Second).UnixNano())
	require.ErrorContains(t, a.Healthy(), "broker snapshots failing")
}

// TestCheckOwner: a non-owner forwards every reservation, so it admits only
// what the owner admits. An owner whose admission health is NOT_SERVING (its
// snapshots failing) makes the others unready at once; an owner that does
// not answer only once that lasted past the session TTL.
func TestCheckOwner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	h := health.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	a := &Admission{o: Options{Addr: "10.0.0.1:9090", LeaseTTL: 3, Broker: newBroker(t),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, changed: make(chan struct{}), conns: map[string]*grpc.ClientConn{}}
	defer func() {
		for _, c := range a.conns {
			_ = c.Close()
		}
	}()
	require.NoError(t, a.CheckOwner(t.Context(), time.Second), "no owner known: Healthy answers for that")
	a.setLeader(ln.Addr().String(), 1)
	h.SetServingStatus(readiness.AdmissionService, healthpb.HealthCheckResponse_SERVING)
	require.NoError(t, a.CheckOwner(t.Context(), time.Second))
	h.SetServingStatus(readiness.AdmissionService, healthpb.HealthCheckResponse_NOT_SERVING)
	require.ErrorContains(t, a.CheckOwner(t.Context(), time.Second), "cannot admit")
	h.SetServingStatus(readiness.AdmissionService, healthpb.HealthCheckResponse_SERVING)
	require.NoError(t, a.CheckOwner(t.Context(), time.Second))

	srv.Stop()
	require.NoError(t, a.CheckOwner(t.Context(), 100*time.Millisecond), "an owner just gone: its successor is on the way")
	a.ownerSilentSince.Store(time.Now().Add(-4 * time.Second).UnixNano())
	require.ErrorContains(t, a.CheckOwner(t.Context(), 100*time.Millisecond), "has not answered its health")
}

// TestNoConnectionAfterShutdown: a forwarded call or a health check racing
// the replica's stop makes no connection to the owner, which nothing would
// close (a connection dialled after shutdown closed the others leaked its
// goroutines past the decider's Close).
func TestNoConnectionAfterShutdown(t *testing.T) {
	a := &Admission{o: Options{Addr: "10.0.0.1:9090", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		changed: make(chan struct{}), conns: map[string]*grpc.ClientConn{}, cancel: func() {}}
	_, err := a.conn("127.0.0.1:1")
	require.NoError(t, err)
	a.shutdown()
	_, err = a.conn("127.0.0.1:2")
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Empty(t, a.conns, "the connection made before shutdown was closed and forgotten")
}
