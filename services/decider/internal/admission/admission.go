// Package admission puts the rate-limit broker behind the decider's RPCs with
// the durability DESIGN.md asks for: one replica owns the buckets (an etcd
// election), the others forward Reserve and Reconcile to it; the owner keeps
// everything in memory and snapshots it to etcd about once a second, each
// write fenced by its election revision so a stale owner cannot overwrite a
// newer one's state. A new owner restores the last snapshot and, unless the
// previous owner stopped cleanly, admits conservatively ("learning mode")
// until every reservation the old owner could have granted has expired, so
// a failover never over-admits. Nothing here writes to etcd per request.
package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

// etcd keys of the broker's state.
const (
	ElectionPrefix = "/switchboard/v1/broker/owner"
	SnapshotKey    = "/switchboard/v1/broker/snapshot"
	CleanKey       = "/switchboard/v1/broker/clean" // the snapshot's revision after a clean stop
)

// Options configure an Admission.
type Options struct {
	Broker   *broker.Broker   // (Required)
	Client   *clientv3.Client // (Required)
	Addr     string           // this replica's gRPC address, advertised to the others (Required)
	Logger   *slog.Logger     // (Required)
	Now      func() time.Time // (Optional) Defaults to time.Now.
	Every    time.Duration    // snapshot interval (Optional) Defaults to 1s.
	LeaseTTL int              // election session TTL in seconds (Optional) Defaults to 5.
}

// Admission answers Reserve and Reconcile.
type Admission struct {
	o Options

	owner   atomic.Bool
	ownRev  atomic.Int64
	session *concurrency.Session
	elect   *concurrency.Election

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn

	cancel context.CancelFunc
	wg     sync.WaitGroup
	ready  chan struct{}
	once   sync.Once
	closed sync.Once
}

// Start joins the election and returns once this replica owns the broker or
// knows who does.
func Start(ctx context.Context, o Options) (*Admission, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 5
	}
	s, err := concurrency.NewSession(o.Client, concurrency.WithTTL(o.LeaseTTL))
	if err != nil {
		return nil, fmt.Errorf("broker election session: %w", err)
	}
	a := &Admission{o: o, session: s, elect: concurrency.NewElection(s, ElectionPrefix), conns: map[string]*grpc.ClientConn{}, ready: make(chan struct{})}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	a.wg.Go(func() { a.campaign(bg) })
	a.wg.Go(func() { a.watchLeader(bg) })
	select {
	case <-a.ready:
		return a, nil
	case <-ctx.Done():
		a.Close()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		a.Close()
		return nil, errors.New("broker: no owner elected within 30s")
	}
}

func (a *Admission) markReady() { a.once.Do(func() { close(a.ready) }) }

// campaign blocks until this replica owns the broker, then takes over.
func (a *Admission) campaign(ctx context.Context) {
	if err := a.elect.Campaign(ctx, a.o.Addr); err != nil {
		if ctx.Err() == nil {
			a.o.Logger.Error("broker election", "err", err)
		}
		return
	}
	rev := a.elect.Rev()
	if err := a.takeOver(ctx, rev); err != nil {
		a.o.Logger.Error("broker takeover", "err", err)
		return
	}
	a.ownRev.Store(rev)
	a.owner.Store(true)
	a.markReady()
	a.o.Logger.Info("broker owner", "election_revision", rev)
	a.snapshots(ctx)
}

// takeOver restores the last snapshot; after a crash it admits
// conservatively until every reservation the old owner could have granted
// has expired.
func (a *Admission) takeOver(ctx context.Context, rev int64) error {
	resp, err := a.o.Client.Txn(ctx).Then(clientv3.OpGet(SnapshotKey), clientv3.OpGet(CleanKey)).Commit()
	if err != nil {
		return fmt.Errorf("read broker snapshot: %w", err)
	}
	snap, clean := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	now := a.o.Now()
	cleanStop := len(snap) == 1 && len(clean) == 1 && string(clean[0].Value) == fmt.Sprint(snap[0].ModRevision)
	if len(snap) == 1 {
		if err := a.o.Broker.Restore(snap[0].Value, now); err != nil {
			a.o.Logger.Error("broker snapshot unreadable; starting empty in learning mode", "err", err)
			cleanStop = false
		}
	}
	if !cleanStop && len(snap) == 1 {
		until := now.Add(a.o.Broker.MaxTTL())
		a.o.Broker.SetConservative(until)
		a.o.Logger.Warn("broker in learning mode after an unclean takeover", "until", until)
	}
	// The clean marker is consumed: a later crash of this owner is unclean.
	_, err = a.fenced(ctx, rev, clientv3.OpDelete(CleanKey))
	return err
}

// snapshots saves the broker's state about once a second while this replica owns it.
func (a *Admission) snapshots(ctx context.Context) {
	t := time.NewTicker(a.o.Every)
	defer t.Stop()
	var last []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.session.Done():
			a.owner.Store(false)
			if ctx.Err() == nil {
				a.o.Logger.Error("broker ownership lost: session expired")
			}
			return
		case <-t.C:
		}
		blob := a.o.Broker.Snapshot()
		if string(blob) == string(last) {
			continue // nothing changed: no write
		}
		ok, err := a.fenced(ctx, a.ownRev.Load(), clientv3.OpPut(SnapshotKey, string(blob)))
		if err == nil && ok {
			last = blob
		}
		if err != nil {
			a.o.Logger.Warn("broker snapshot", "err", err)
			continue
		}
		if !ok {
			a.owner.Store(false)
			a.o.Logger.Error("broker ownership lost: a newer owner exists; stopped admitting")
			return
		}
	}
}

// fenced runs ops only if this replica still holds the election key created
// at rev.
func (a *Admission) fenced(ctx context.Context, rev int64, ops ...clientv3.Op) (bool, error) {
	resp, err := a.o.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(a.elect.Key()), "=", rev)).
		Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// watchLeader marks the admission ready once another replica is known to
// own the broker, so this one can start forwarding. When the leader key is
// this replica's own, it is still taking over: campaign marks it ready once
// the state is restored.
func (a *Admission) watchLeader(ctx context.Context) {
	for ctx.Err() == nil {
		if resp, err := a.elect.Leader(ctx); err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) != a.o.Addr {
			a.markReady()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Owner reports whether this replica owns the broker.
func (a *Admission) Owner() bool { return a.owner.Load() }

// errRetryLocally means the takeover finished while a call waited for it.
var errRetryLocally = errors.New("owner now")

// Reserve reserves locally when this replica owns the broker, else forwards.
func (a *Admission) Reserve(ctx context.Context, req *pb.ReserveRequest) (*pb.ReserveResponse, error) {
	if !a.owner.Load() {
		c, err := a.ownerClient(ctx)
		if err == nil {
			return c.Reserve(ctx, req)
		}
		if !errors.Is(err, errRetryLocally) {
			return nil, err
		}
	}
	res, ref, err := a.o.Broker.Reserve(ctx, broker.ReserveRequestFromProto(req))
	if err != nil {
		return nil, toStatus(err)
	}
	if ref != nil {
		return &pb.ReserveResponse{Admitted: false, Refusal: ref.Proto()}, nil
	}
	return &pb.ReserveResponse{Admitted: true, Reservation: res.Proto()}, nil
}

// Reconcile reconciles locally when this replica owns the broker, else forwards.
func (a *Admission) Reconcile(ctx context.Context, req *pb.ReconcileRequest) (*pb.ReconcileResponse, error) {
	if !a.owner.Load() {
		c, err := a.ownerClient(ctx)
		if err == nil {
			return c.Reconcile(ctx, req)
		}
		if !errors.Is(err, errRetryLocally) {
			return nil, err
		}
	}
	st, err := a.o.Broker.Reconcile(ctx, broker.ReconcileRequestFromProto(req))
	if err != nil {
		return nil, toStatus(err)
	}
	return st.Proto(), nil
}

// Forward returns a client of the broker's owner when this replica is not it
// (nil when it is), so other central decisions that must be atomic across
// edges — the hedge budget — are taken in one place too.
func (a *Admission) Forward(ctx context.Context) (pb.DeciderServiceClient, error) {
	if a.owner.Load() {
		return nil, nil
	}
	c, err := a.ownerClient(ctx)
	if errors.Is(err, errRetryLocally) {
		return nil, nil
	}
	return c, err
}

func (a *Admission) ownerClient(ctx context.Context) (pb.DeciderServiceClient, error) {
	resp, err := a.elect.Leader(ctx)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, status.Error(codes.Unavailable, "no rate-limit broker owner is elected")
	}
	addr := string(resp.Kvs[0].Value)
	if addr == a.o.Addr {
		// This replica won the election and is restoring the state: wait for
		// it, within the caller's deadline, rather than fail the request.
		select {
		case <-a.ready:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if a.owner.Load() {
			return nil, errRetryLocally
		}
		return nil, status.Error(codes.Unavailable, "this replica is taking over the rate-limit broker")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	conn, ok := a.conns[addr]
	if !ok {
		conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "reach the broker owner: %v", err)
		}
		a.conns[addr] = conn
	}
	return pb.NewDeciderServiceClient(conn), nil
}

func toStatus(err error) error {
	switch {
	case errors.Is(err, broker.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, broker.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, "rate-limit broker error")
}

// Abandon stops like a crash would: no final snapshot, no clean marker, the
// election session simply ends. For failover tests and drills.
func (a *Admission) Abandon() {
	a.closed.Do(func() {
		a.owner.Store(false)
		a.cancel()
		a.wg.Wait()
		_ = a.session.Close()
	})
}

// Close saves a final snapshot with the clean-stop marker when this replica
// owns the broker (call it after the gRPC server stopped admitting), then
// resigns so another replica takes over at once.
func (a *Admission) Close() { a.closed.Do(a.close) }

func (a *Admission) close() {
	if a.owner.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rev := a.ownRev.Load()
		// Two fenced writes: the snapshot, then the marker naming its revision.
		if ok, err := a.fenced(ctx, rev, clientv3.OpPut(SnapshotKey, string(a.o.Broker.Snapshot()))); err == nil && ok {
			if get, err := a.o.Client.Get(ctx, SnapshotKey); err == nil && len(get.Kvs) == 1 {
				_, _ = a.fenced(ctx, rev, clientv3.OpPut(CleanKey, fmt.Sprint(get.Kvs[0].ModRevision)))
			}
		}
		a.owner.Store(false)
		_ = a.elect.Resign(ctx)
		cancel()
	}
	a.cancel()
	a.wg.Wait()
	_ = a.session.Close()
	a.mu.Lock()
	for _, c := range a.conns {
		_ = c.Close()
	}
	a.mu.Unlock()
}
