package admission

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

// cluster is an embedded etcd that several replicas share.
type cluster struct {
	endpoint string
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	e, err := store.StartEmbedded(t.Context(), store.EmbeddedOptions{DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return &cluster{endpoint: e.Endpoint()}
}

// client dials the cluster; ranges counts the etcd Range calls it makes.
func (c *cluster) client(t testing.TB, ranges *atomic.Int64) *clientv3.Client {
	t.Helper()
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if ranges != nil && method == "/etcdserverpb.KV/Range" {
			ranges.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{c.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// owner returns the election key that owns the broker: the address it names
// and its create revision (0 when nobody owns it).
func (c *cluster) owner(t *testing.T) (string, int64, clientv3.LeaseID) {
	t.Helper()
	cli := c.client(t, nil)
	resp, err := cli.Get(t.Context(), ElectionPrefix, append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
	require.NoError(t, err)
	if len(resp.Kvs) == 0 {
		return "", 0, 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].CreateRevision, clientv3.LeaseID(resp.Kvs[0].Lease)
}

// revokeOwner revokes the lease of the election key that owns the broker, as
// an etcd that saw no keep-alive for the session's TTL (a paused process)
// does, and returns the address it named and the key's revision.
func (c *cluster) revokeOwner(t *testing.T) (string, int64) {
	t.Helper()
	addr, rev, lease := c.owner(t)
	require.NotZero(t, rev, "an owner is elected")
	_, err := c.client(t, nil).Revoke(t.Context(), lease)
	require.NoError(t, err)
	return addr, rev
}

// snapshotSaved waits until the owner saved a snapshot taken after the call:
// the second write from now on (the first may have been taken before).
func (c *cluster) snapshotSaved(t *testing.T) {
	t.Helper()
	cli := c.client(t, nil)
	rev := func() int64 {
		get, err := cli.Get(t.Context(), SnapshotKey)
		require.NoError(t, err)
		if len(get.Kvs) == 0 {
			return 0
		}
		return get.Kvs[0].ModRevision
	}
	for range 2 {
		r0 := rev()
		require.Eventually(t, func() bool { return rev() > r0 }, 10*time.Second, 10*time.Millisecond, "a snapshot is saved")
	}
}

// newOwner waits until a key newer than rev owns the broker and returns its address.
func (c *cluster) newOwner(t *testing.T, rev int64) string {
	t.Helper()
	var addr string
	require.Eventually(t, func() bool {
		a, r, _ := c.owner(t)
		addr = a
		return r > rev
	}, 20*time.Second, 20*time.Millisecond, "a new owner is elected")
	return addr
}

// replica is one decider's admission with a gRPC server in front, so the
// others can forward to it.
type replica struct {
	adm    *Admission
	broker *broker.Broker
	addr   string
}

type fwdServer struct {
	switchboardv1.UnimplementedReplicaServiceServer
	adm atomic.Pointer[Admission]
}

func (s *fwdServer) ForwardReserve(ctx context.Context, req *switchboardv1.ForwardReserveRequest) (*switchboardv1.ForwardReserveResponse, error) {
	resp, err := s.adm.Load().Reserve(ctx, req.GetRequest())
	if err != nil {
		return nil, err
	}
	return &switchboardv1.ForwardReserveResponse{Response: resp}, nil
}

func (s *fwdServer) ForwardReconcile(ctx context.Context, req *switchboardv1.ForwardReconcileRequest) (*switchboardv1.ForwardReconcileResponse, error) {
	resp, err := s.adm.Load().Reconcile(ctx, req.GetRequest(), callerTenant(ctx))
	if err != nil {
		return nil, err
	}
	return &switchboardv1.ForwardReconcileResponse{Response: resp}, nil
}

func (s *fwdServer) ForwardKeepReservations(ctx context.Context, req *switchboardv1.ForwardKeepReservationsRequest) (*switchboardv1.ForwardKeepReservationsResponse, error) {
	n, err := s.adm.Load().Keep(ctx, req.GetRequest().GetReservationIds(), callerTenant(ctx))
	if err != nil {
		return nil, err
	}
	return &switchboardv1.ForwardKeepReservationsResponse{Response: &switchboardv1.KeepReservationsResponse{Kept: n}}, nil
}

// callerTenant stands for the caller's principal, which travels in the
// call's metadata: "x-test-tenant" names the one tenant it may act for.
func callerTenant(ctx context.Context) broker.Allow {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("x-test-tenant")
	if len(v) == 0 {
		return nil
	}
	return func(tenant string) bool { return tenant == v[0] }
}

// tenantPerDay is the tenant's daily request limit in these tests.
const tenantPerDay = 4

func newBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b, err := broker.New(broker.Config{
		Buckets: []broker.Spec{{Scope: broker.ScopeTenant, Key: "acme", Unit: broker.UnitRequests, Window: broker.WindowDay, Capacity: tenantPerDay}},
		Routes:  []broker.Route{{EndpointID: "alpha/m1", Model: "m1"}},
	}, broker.Options{DisableCorrection: true})
	require.NoError(t, err)
	return b
}

// startReplica starts a replica on its own etcd client; cli may be nil.
func startReplica(t *testing.T, c *cluster, cli *clientv3.Client) *replica {
	t.Helper()
	if cli == nil {
		cli = c.client(t, nil)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	fs := &fwdServer{}
	switchboardv1.RegisterReplicaServiceServer(srv, fs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	r := &replica{broker: newBroker(t), addr: lis.Addr().String()}
	r.adm, err = Start(t.Context(), Options{
		Broker: r.broker, Client: cli, Addr: r.addr, Every: 50 * time.Millisecond, LeaseTTL: 5, // no test here waits for a lease to expire
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	fs.adm.Store(r.adm)
	t.Cleanup(r.adm.Close)
	return r
}

var reqN atomic.Int64

func reserveReq() *switchboardv1.ReserveRequest {
	return &switchboardv1.ReserveRequest{
		RequestId: "r" + time.Now().Format("150405.000000000") + string(rune('a'+reqN.Add(1)%26)),
		Identity:  &switchboardv1.Identity{TenantId: "acme", ApiKeyId: "key-1"}, Model: "m1", EndpointId: "alpha/m1",
		Demand: &switchboardv1.Demand{Requests: 1},
	}
}

// admitted reserves one request through r and reports whether it was admitted
// (false also when no owner answered).
func (r *replica) admitted(t *testing.T) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := r.adm.Reserve(ctx, reserveReq())
	return err == nil && resp.GetAdmitted()
}

// refused reserves one request through r and reports whether the tenant's
// limit refused it (an answer, not an error).
func (r *replica) refused(t *testing.T) bool {
	t.Helper()
	resp, err := r.adm.Reserve(t.Context(), reserveReq())
	require.NoError(t, err)
	return !resp.GetAdmitted() && resp.GetRefusal() != nil
}

func TestOwnershipRegainedAfterSessionLoss(t *testing.T) {
	c := newCluster(t)
	r := startReplica(t, c, nil)
	require.True(t, r.adm.Owner())
	require.True(t, r.admitted(t))

	// The session's lease ends, as after a pause longer than its TTL: the
	// replica stops admitting, and with no other replica it must campaign
	// again and take the broker back without a restart.
	addr, rev := c.revokeOwner(t)
	require.Equal(t, r.addr, addr)
	require.Equal(t, r.addr, c.newOwner(t, rev), "the only replica campaigns again")
	require.Eventually(t, func() bool { return r.admitted(t) }, 20*time.Second, 20*time.Millisecond,
		"the only replica admits again after its session was lost")
	require.True(t, r.adm.Owner())

	// Nobody else owned the broker meanwhile, so what this replica granted
	// still counts and it runs at full capacity: 2 of 4 taken, 2 left.
	require.True(t, r.admitted(t))
	require.True(t, r.admitted(t))
	require.True(t, r.refused(t))
}

func TestSurvivorTakesOverAfterSessionLoss(t *testing.T) {
	c := newCluster(t)
	a := startReplica(t, c, nil)
	b := startReplica(t, c, nil)
	require.True(t, a.adm.Owner())
	require.False(t, b.adm.Owner())
	require.True(t, b.admitted(t), "forwarded to the owner")
	c.snapshotSaved(t)

	addr, rev := c.revokeOwner(t)
	require.Equal(t, a.addr, addr)
	require.Equal(t, b.addr, c.newOwner(t, rev))
	require.Eventually(t, b.adm.Owner, 20*time.Second, 20*time.Millisecond, "the survivor takes over")
	// The old owner campaigns again, now behind the new one, and forwards.
	require.Eventually(t, func() bool {
		local, err := a.adm.OnOwner(t.Context(), func(context.Context, OwnerClient) error { return nil })
		return err == nil && !local && !a.adm.Owner()
	}, 20*time.Second, 20*time.Millisecond)
	require.True(t, a.admitted(t), "forwarded to the new owner")
	c.snapshotSaved(t)

	// And when the new owner's session is lost in turn, the first one takes
	// the broker back.
	addr, rev = c.revokeOwner(t)
	require.Equal(t, b.addr, addr)
	require.Equal(t, a.addr, c.newOwner(t, rev))
	require.Eventually(t, a.adm.Owner, 20*time.Second, 20*time.Millisecond)
	// Forwarded to the owner again, which restored the lost owner's
	// snapshot in learning mode: half of the 4 are held back and 2 are
	// used, so the tenant is refused (an answer, not an error).
	require.True(t, b.refused(t))
}

func TestCleanHandoverWithoutLearningMode(t *testing.T) {
	c := newCluster(t)
	a := startReplica(t, c, nil)
	b := startReplica(t, c, nil)
	require.True(t, a.adm.Owner())
	require.True(t, a.admitted(t))

	a.adm.Close() // a clean stop: final snapshot, clean marker, resign
	require.Eventually(t, b.adm.Owner, 10*time.Second, 10*time.Millisecond)
	// Full capacity at once: 1 of 4 used before the handover, 3 left. In
	// learning mode half of 4 would be held back and only 1 more admitted.
	for range tenantPerDay - 1 {
		require.True(t, b.admitted(t))
	}
	require.True(t, b.refused(t))
}

// An owner still in learning mode does not know what its predecessor
// granted after its last snapshot; stopping cleanly must not make the next
// owner forget that: it keeps learning mode as long. (The chaos test's
// kill -9 of the owner, then SIGTERM of the next, let the third admit past
// the tenant's limit at full capacity.)
func TestCleanHandoverKeepsLearningMode(t *testing.T) {
	c := newCluster(t)
	a := startReplica(t, c, nil)
	b := startReplica(t, c, nil)
	require.True(t, a.admitted(t))
	c.snapshotSaved(t)

	// a's session ends as after a crash: b takes over in learning mode,
	// holding half of the 4 back: 1 more admitted (2 used), then refused.
	addr, rev := c.revokeOwner(t)
	require.Equal(t, a.addr, addr)
	require.Equal(t, b.addr, c.newOwner(t, rev))
	require.Eventually(t, b.adm.Owner, 20*time.Second, 20*time.Millisecond)
	// a hears of its session's end at its next keepalive: until then it
	// still owns in its own eyes, and Owner below would be its old term's.
	require.Eventually(t, func() bool { return !a.adm.Owner() }, 20*time.Second, 20*time.Millisecond)
	require.True(t, b.admitted(t))
	require.True(t, b.refused(t))

	// b stops cleanly; a, campaigning again behind it, takes over from its
	// final snapshot, still in learning mode: 2 used of 4, none more.
	b.adm.Close()
	require.Eventually(t, a.adm.Owner, 20*time.Second, 20*time.Millisecond)
	require.True(t, a.refused(t), "the next owner holds half back still")
}

func TestLeaderCacheServesForwarding(t *testing.T) {
	c := newCluster(t)
	a := startReplica(t, c, nil)
	var ranges atomic.Int64
	b := startReplica(t, c, c.client(t, &ranges))
	require.True(t, a.adm.Owner())
	require.True(t, b.admitted(t))

	// Forwarding reads the owner from a watch, not from etcd per request.
	// (The replica's own campaign may still read the election once or twice.)
	before := ranges.Load()
	for range tenantPerDay - 1 {
		require.True(t, b.admitted(t))
	}
	for range 20 {
		require.True(t, b.refused(t))
	}
	require.LessOrEqual(t, ranges.Load()-before, int64(2), "etcd reads while forwarding 23 calls")
}

func TestFencedWritesRefuseStaleOwner(t *testing.T) {
	c := newCluster(t)
	a := startReplica(t, c, nil)
	b := startReplica(t, c, nil)
	require.True(t, a.adm.Owner())
	a.adm.wmu.Lock()
	stale := a.adm.cur
	a.adm.wmu.Unlock()
	require.NotNil(t, stale)

	_, rev := c.revokeOwner(t)
	require.Equal(t, b.addr, c.newOwner(t, rev))
	require.Eventually(t, b.adm.Owner, 20*time.Second, 20*time.Millisecond)

	// The old term's writes are refused, whatever the old owner believes.
	ok, err := a.adm.fenced(t.Context(), stale, clientv3.OpPut(SnapshotKey, "stale"))
	require.NoError(t, err)
	require.False(t, ok)
	a.adm.wmu.Lock()
	a.adm.lastBlob = ""
	_, ok, err = a.adm.write(t.Context(), stale)
	a.adm.wmu.Unlock()
	require.NoError(t, err)
	require.False(t, ok)
	get, err := c.client(t, nil).Get(t.Context(), SnapshotKey)
	require.NoError(t, err)
	for _, kv := range get.Kvs {
		require.NotEqual(t, "stale", string(kv.Value))
	}
}

// TestTenantCheckedWhereTheReservationLives: a replica that does not own the
// broker forwards reservation operations; the owner checks the caller named
// in the call against the reservation's tenant, whatever the forwarding
// replica was given.
func TestTenantCheckedWhereTheReservationLives(t *testing.T) {
	c := newCluster(t)
	a := startReplica(t, c, nil)
	b := startReplica(t, c, nil)
	require.True(t, a.adm.Owner())
	require.False(t, b.adm.Owner())

	res, err := b.adm.Reserve(t.Context(), reserveReq())
	require.NoError(t, err)
	require.True(t, res.GetAdmitted())
	id := res.GetReservation().GetReservationId()
	everyone := broker.Allow(nil)
	globex := metadata.AppendToOutgoingContext(t.Context(), "x-test-tenant", "globex")
	acme := metadata.AppendToOutgoingContext(t.Context(), "x-test-tenant", "acme")

	_, err = b.adm.Reconcile(globex, &switchboardv1.ReconcileRequest{ReservationId: id}, everyone)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = b.adm.Keep(globex, []string{id}, everyone)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	term, err := b.adm.ReconcileOnce(globex, &switchboardv1.ReconcileRequest{ReservationId: id}, everyone)
	require.NoError(t, err, "refused for good: not to be retried")
	var ownerTerm int64
	require.Eventually(t, func() bool { ownerTerm, _ = a.adm.OwnerTerm(); return ownerTerm > 0 }, 10*time.Second, 5*time.Millisecond,
		"the owner's election watch sees its own term")
	require.Equal(t, ownerTerm, term, "a forwarded refusal names the owner's term as the election watch saw it")
	require.Equal(t, 1, a.broker.Open(), "untouched")

	// On the owner itself, the check given is the one applied.
	_, err = a.adm.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: id}, func(string) bool { return false })
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

	n, err := b.adm.Keep(acme, []string{id}, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	resp, err := b.adm.Reconcile(acme, &switchboardv1.ReconcileRequest{ReservationId: id}, nil)
	require.NoError(t, err)
	require.Equal(t, ownerTerm, resp.GetOwnerTerm(), "the owner's answer names its term")
	require.Equal(t, 0, a.broker.Open())
}

// Every replica knows the owner's term, the revision of its election key,
// from its election watch: it grows with each new owner, and the owner names
// its own in what it reconciles.
func TestOwnerTermFollowsTheElection(t *testing.T) {
	c := newCluster(t)
	a := startReplica(t, c, nil)
	b := startReplica(t, c, nil)
	require.True(t, a.adm.Owner())
	_, rev, _ := c.owner(t)
	for _, r := range []*replica{a, b} {
		require.Eventually(t, func() bool { term, _ := r.adm.OwnerTerm(); return term == rev }, 10*time.Second, 10*time.Millisecond)
	}
	res, err := a.adm.Reserve(t.Context(), reserveReq())
	require.NoError(t, err)
	term, err := a.adm.ReconcileOnce(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: res.GetReservation().GetReservationId()}, nil)
	require.NoError(t, err)
	require.Equal(t, rev, term, "applied on the owner, under its term")

	_, changed := b.adm.OwnerTerm()
	_, old := c.revokeOwner(t)
	newRev := func() int64 { _, r, _ := c.owner(t); return r }
	require.Equal(t, b.addr, c.newOwner(t, old))
	require.Eventually(t, b.adm.Owner, 20*time.Second, 20*time.Millisecond)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the owner's change is signalled")
	}
	for _, r := range []*replica{a, b} {
		require.Eventually(t, func() bool { term, _ := r.adm.OwnerTerm(); return term == newRev() && term > rev }, 10*time.Second, 10*time.Millisecond)
	}
	// Until the old owner notices its session ended it still applies, and
	// names its own, older term: what it applies then is replayed to the
	// new owner. Once it noticed, it forwards.
	require.Eventually(t, func() bool { return !a.adm.Owner() }, 20*time.Second, 10*time.Millisecond)
	res, err = a.adm.Reserve(t.Context(), reserveReq())
	require.NoError(t, err)
	resp, err := a.adm.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: res.GetReservation().GetReservationId()}, nil)
	require.NoError(t, err)
	require.Equal(t, newRev(), resp.GetOwnerTerm(), "forwarded to the new owner, which names its term")
}

// stallServer answers nothing: each Reserve waits until its caller gives
// up, as an owner that is paused or cut off does.
type stallServer struct {
	fwdServer
	entered chan struct{}
}

func (s *stallServer) ForwardReserve(ctx context.Context, _ *switchboardv1.ForwardReserveRequest) (*switchboardv1.ForwardReserveResponse, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestForwardedCallMovesToTheNewOwner: a reservation forwarded to an owner
// that stops answering is not left waiting on it for the rest of its
// deadline (a queued one's is half an hour): once another replica owns the
// broker, the call is made to it.
func TestForwardedCallMovesToTheNewOwner(t *testing.T) {
	c := newCluster(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	stall := &stallServer{entered: make(chan struct{}, 1)}
	switchboardv1.RegisterReplicaServiceServer(srv, stall)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	a := &replica{broker: newBroker(t), addr: lis.Addr().String()}
	a.adm, err = Start(t.Context(), Options{
		Broker: a.broker, Client: c.client(t, nil), Addr: a.addr, Every: 50 * time.Millisecond, LeaseTTL: 5,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	stall.adm.Store(a.adm)
	t.Cleanup(a.adm.Close)
	require.True(t, a.adm.Owner())
	b := startReplica(t, c, nil)
	startReplica(t, c, nil)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	type answer struct {
		resp *switchboardv1.ReserveResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := b.adm.Reserve(ctx, reserveReq())
		done <- answer{resp, err}
	}()
	<-stall.entered
	_, rev := c.revokeOwner(t)
	c.newOwner(t, rev)
	got := <-done
	require.NoError(t, got.err, "answered by the new owner, not left on the old one")
	require.True(t, got.resp.GetAdmitted(), "%v", got.resp.GetRefusal())
}
