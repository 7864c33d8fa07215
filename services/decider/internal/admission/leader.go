package admission

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
)

// state returns the known owner's address and a channel closed at the next change.
func (a *Admission) state() (string, <-chan struct{}) {
	a.smu.Lock()
	defer a.smu.Unlock()
	return a.leader, a.changed
}

// notify wakes everyone waiting for a change of owner or leader.
func (a *Admission) notify() {
	a.smu.Lock()
	close(a.changed)
	a.changed = make(chan struct{})
	a.smu.Unlock()
}

// OwnerTerm returns the term of the broker's owner, as this replica's
// election watch last saw it: the revision of the owner's election key (the
// revision its writes are fenced with, and TermKey records), 0 before any
// owner was seen. It only grows, and stays while nobody owns the state. The
// channel is closed at the next change of owner (or of this replica's
// ownership); the Report stream tells edges of each new term from it.
func (a *Admission) OwnerTerm() (int64, <-chan struct{}) {
	a.smu.Lock()
	defer a.smu.Unlock()
	return a.leaderTerm, a.changed
}

// setLeader records the owner's address and term from the watch and wakes
// waiters on a change; term 0 (no owner) keeps the last term.
func (a *Admission) setLeader(addr string, term int64) {
	a.smu.Lock()
	if a.leader == addr && term <= a.leaderTerm {
		a.smu.Unlock()
		return
	}
	a.leader = addr
	a.leaderSince.Store(time.Now().UnixNano())
	a.leaderTerm = max(a.leaderTerm, term)
	close(a.changed)
	a.changed = make(chan struct{})
	a.smu.Unlock()
}

// watchLeader keeps the owner's address from a watch of the election, so
// forwarding never reads etcd per request. Like Election.Observe it follows
// the oldest key under the prefix; unlike it, it also reports "no owner"
// while the prefix is empty.
func (a *Admission) watchLeader(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := a.followLeader(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			a.o.Logger.Warn("watching the broker owner", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

// followLeader reads the current owner and watches until it changes.
func (a *Admission) followLeader(ctx context.Context) error {
	resp, err := a.o.Client.Get(ctx, ElectionPrefix, append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	if len(resp.Kvs) == 0 {
		a.setLeader("", 0)
		// Wait for the first key under the prefix, then read again.
		for wr := range a.o.Client.Watch(wctx, ElectionPrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if err := wr.Err(); err != nil {
				return err
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					return nil
				}
			}
		}
		return ctx.Err()
	}
	kv := resp.Kvs[0]
	a.setLeader(string(kv.Value), kv.CreateRevision)
	for wr := range a.o.Client.Watch(wctx, string(kv.Key), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				a.setLeader("", 0)
				return nil
			}
			a.setLeader(string(ev.Kv.Value), ev.Kv.CreateRevision)
		}
	}
	return ctx.Err()
}

// OnOwner runs call against the broker's owner when this replica is not
// it, and reports local when it is (call is then not run: the caller does
// the work here), so the central decisions that must be atomic across
// edges — reservations, the hedge budget — are taken in one place.
//
// A call to an owner that stops answering (paused, cut off) would wait for
// as long as the caller's deadline, which for a queued reservation is long:
// so when the owner changes while call waits, call's context is cancelled
// and call runs again on the new owner (or here, local). A call cancelled
// so was not answered; the new owner has the snapshot and learning mode
// for anything the old one did with it.
func (a *Admission) OnOwner(ctx context.Context, call func(context.Context, OwnerClient) error) (local bool, _ error) {
	for {
		if a.owner.Load() {
			return true, nil
		}
		c, changed, err := a.ownerClient(ctx)
		if errors.Is(err, errRetryLocally) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		cctx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() {
			select {
			case <-changed:
				cancel()
			case <-stop:
			}
		}()
		err = call(cctx, c)
		close(stop)
		moved := err != nil && cctx.Err() != nil && ctx.Err() == nil
		cancel()
		if !moved {
			return false, err
		}
		a.o.Logger.Info("the broker owner changed during a forwarded call; calling the new owner")
	}
}

// ownerClient returns a client of the owner from the cached address and a
// channel closed when the owner changes. While nobody owns the state, or
// this replica is taking over, it waits for a change within the caller's
// deadline and OwnerWait.
func (a *Admission) ownerClient(ctx context.Context) (OwnerClient, <-chan struct{}, error) {
	var wait <-chan time.Time
	for {
		leader, ch := a.state()
		if a.owner.Load() {
			return OwnerClient{}, nil, errRetryLocally
		}
		if leader != "" && leader != a.o.Addr {
			c, err := a.client(leader)
			return c, ch, err
		}
		if wait == nil {
			t := time.NewTimer(a.o.OwnerWait)
			defer t.Stop()
			wait = t.C
		}
		select {
		case <-ch:
			continue
		case <-ctx.Done():
			return OwnerClient{}, nil, status.FromContextError(ctx.Err()).Err()
		case <-wait:
		}
		if leader == a.o.Addr {
			return OwnerClient{}, nil, status.Error(codes.Unavailable, "this replica is taking over the rate-limit broker")
		}
		return OwnerClient{}, nil, status.Error(codes.Unavailable, "no rate-limit broker owner is elected")
	}
}

// OwnerClient is a client of the broker's owner's ReplicaService: the
// reservations and the hedge budget a replica forwards there. Each call is
// forwarded on behalf of the caller of its context (auth.FromContext), whom
// it names in caller_id: work a replica does on its own behalf must carry
// the caller it is done for (auth.NewContext), since the owner refuses a
// call naming nobody.
type OwnerClient struct {
	c switchboardv1.ReplicaServiceClient
}

// Reserve forwards a Reserve.
func (o OwnerClient) Reserve(ctx context.Context, req *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error) {
	resp, err := o.c.ForwardReserve(ctx, &switchboardv1.ForwardReserveRequest{CallerId: auth.CallerID(ctx), Request: req})
	return resp.GetResponse(), err
}

// Reconcile forwards a Reconcile.
func (o OwnerClient) Reconcile(ctx context.Context, req *switchboardv1.ReconcileRequest) (*switchboardv1.ReconcileResponse, error) {
	resp, err := o.c.ForwardReconcile(ctx, &switchboardv1.ForwardReconcileRequest{CallerId: auth.CallerID(ctx), Request: req})
	return resp.GetResponse(), err
}

// KeepReservations forwards a KeepReservations.
func (o OwnerClient) KeepReservations(ctx context.Context, req *switchboardv1.KeepReservationsRequest) (*switchboardv1.KeepReservationsResponse, error) {
	resp, err := o.c.ForwardKeepReservations(ctx, &switchboardv1.ForwardKeepReservationsRequest{CallerId: auth.CallerID(ctx), Request: req})
	return resp.GetResponse(), err
}

// AcquireHedge forwards an AcquireHedge.
func (o OwnerClient) AcquireHedge(ctx context.Context, req *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error) {
	resp, err := o.c.ForwardAcquireHedge(ctx, &switchboardv1.ForwardAcquireHedgeRequest{CallerId: auth.CallerID(ctx), Request: req})
	return resp.GetResponse(), err
}

// SettleHedge forwards a SettleHedge.
func (o OwnerClient) SettleHedge(ctx context.Context, req *switchboardv1.SettleHedgeRequest) (*switchboardv1.SettleHedgeResponse, error) {
	resp, err := o.c.ForwardSettleHedge(ctx, &switchboardv1.ForwardSettleHedgeRequest{CallerId: auth.CallerID(ctx), Request: req})
	return resp.GetResponse(), err
}

func (a *Admission) client(addr string) (OwnerClient, error) {
	conn, err := a.conn(addr)
	if err != nil {
		return OwnerClient{}, err
	}
	return OwnerClient{switchboardv1.NewReplicaServiceClient(conn)}, nil
}

// conn is the connection to the replica at addr, made once.
func (a *Admission) conn(addr string) (*grpc.ClientConn, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conns == nil {
		return nil, status.Error(codes.Unavailable, "this replica is stopping")
	}
	conn, ok := a.conns[addr]
	if !ok {
		var err error
		creds := a.o.Creds
		if creds == nil {
			creds = insecure.NewCredentials()
		}
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithChainUnaryInterceptor(ownRefusal)}, a.o.DialOptions...)
		conn, err = grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "reach the broker owner: %v", err)
		}
		a.conns[addr] = conn
	}
	return conn, nil
}

// ownRefusal answers UNAVAILABLE when the owner refuses this replica's own
// credential. The caller whose call is forwarded was authenticated here:
// an UNAUTHENTICATED passed on would read as its credential (or its
// client's API key) being refused, when the fault is this replica's
// --token-file or certificate, which the catalog must list as a caller of
// role replica.
func ownRefusal(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if status.Code(err) == codes.Unauthenticated {
		return status.Errorf(codes.Unavailable, "the rate-limit broker's owner refused this replica's credential (its --token-file or certificate must be a caller of role replica): %s", status.Convert(err).Message())
	}
	return err
}

// Addr is this replica's gRPC address, as it advertises it to the others.
func (a *Admission) Addr() string { return a.o.Addr }
