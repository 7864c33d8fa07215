// Package admission puts the decider's singleton state — the rate-limit
// broker and the daily hedge budget — under one owner: one replica owns them
// (an etcd election), the others forward Reserve, Reconcile and hedge calls
// to its ReplicaService (OwnerClient). The owner keeps everything in memory
// and snapshots it to etcd about once a second, each write fenced by its
// election revision so a stale owner cannot overwrite a newer one's state.
// Every replica campaigns for the life of the process: when its election
// session ends (a pause longer than the session's TTL, an etcd outage) it
// stops admitting, opens a new session and campaigns again. A new owner
// restores the last snapshot and, unless the previous owner stopped
// cleanly, admits conservatively ("learning mode") until every reservation
// the old owner could have granted has expired, so a failover never
// over-admits. Nothing here writes to etcd per request, and forwarding reads
// the owner's address from a watch, not from etcd.
//
// Policy (policy.go) is the admission policy on top of it: the walk over a
// decision's endpoints, the queue it waits in, the degrade to a class's
// fallback model, and the hedge budget's forwarding (hedge.go).
package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

// etcd keys of the singleton state.
const (
	ElectionPrefix = "/switchboard/v1/broker/owner"
	SnapshotKey    = "/switchboard/v1/broker/snapshot"
	CleanKey       = "/switchboard/v1/broker/clean" // the snapshot's revision after a clean stop
	// TermKey holds the election revision of the owner that took over last,
	// so a replica that regains ownership knows whether anyone else owned
	// the state meanwhile.
	TermKey = "/switchboard/v1/broker/term"
	// BudgetKey holds the hedge budget's state.
	BudgetKey = store.HedgeBudgetKey
)

// Options configure an Admission.
type Options struct {
	Broker *broker.Broker   // (Required)
	Budget *hedge.Budget    // the hedge budget, owned with the broker (Optional)
	Client *clientv3.Client // (Required) Must outlive Close.
	Addr   string           // this replica's gRPC address, advertised to the others (Required)
	Logger *slog.Logger     // (Required)
	Now    func() time.Time // (Optional) Defaults to time.Now.
	Every  time.Duration    // snapshot interval (Optional) Defaults to 1s.
	// LeaseTTL is the election session's TTL in seconds: after a crash the
	// other replicas wait this long for the owner's key to expire.
	// (Optional) Defaults to 3.
	LeaseTTL int
	// OwnerWait bounds how long a call waits for an owner to be elected
	// before it fails as Unavailable. (Optional) Defaults to 2s.
	OwnerWait time.Duration
	// DialOptions are added to the options of the connections to the
	// owner: this replica's credentials (a caller of role replica).
	// (Optional) Without them the owner refuses.
	DialOptions []grpc.DialOption
	// Creds secure the connections to the owner (TLS, with this replica's
	// certificate as client certificate). (Optional) Nil connects in plaintext.
	Creds credentials.TransportCredentials
	// MaxWriteBytes bounds one snapshot transaction (the broker's state and
	// the hedge budget's): a larger one is not sent and counts as a failed
	// write. Keep it below etcd's --max-request-bytes. (Optional) Defaults
	// to DefaultMaxWriteBytes.
	MaxWriteBytes int
	// Leases turns quota leases on: while another replica owns the broker,
	// this one admits on the leases it renews from the owner (lease.go).
	// The owner grants leases to whoever asks, whatever this says.
	// (Optional) Defaults to false: every reservation is forwarded.
	Leases bool
}

// term is one won election: the session, and the revision that fences writes.
type term struct {
	session *concurrency.Session
	elect   *concurrency.Election
	key     string // the election key; the Election forgets it on Resign
	rev     int64
}

// Admission answers Reserve and Reconcile.
type Admission struct {
	o Options

	owner atomic.Bool
	// ownerChanges counts owner's changes (OwnerChanges).
	ownerChanges atomic.Int64
	// term is the election revision of the term this replica serves as
	// owner, 0 when it owns nothing; set before owner, cleared after.
	term atomic.Int64

	// wmu serialises snapshot writes with Close, so no periodic write lands
	// after the final one.
	wmu       sync.Mutex
	cur       *term // the term being served, nil between terms
	stopping  bool
	abandoned bool
	lastBlob  string
	lastBudg  string

	// lastRev is the election revision of this replica's last term; only
	// the campaign goroutine uses it.
	lastRev int64

	// Snapshot health (durable.go): failures counts failed writes since
	// Start, failing those in a row; durableAt is when the state in memory
	// was last known saved, loggedAt when a failure was last logged (Unix
	// ns, wall clock).
	failures, failing   atomic.Int64
	slow                atomic.Int64 // failures that ran out of writeTimeout
	durableAt, loggedAt atomic.Int64
	// leaderSince is when the known owner last changed (Unix ns, wall clock).
	leaderSince atomic.Int64
	// ownerSilentSince is when the owner's health first went unanswered
	// (Unix ns; 0 while it answers), for CheckOwner.
	ownerSilentSince atomic.Int64

	smu     sync.Mutex
	leader  string        // the owner's address, from the watch; "" when none
	changed chan struct{} // closed and replaced when leader or owner changes
	// leaderTerm is the election revision of the latest owner the watch
	// saw; it only grows, and stays while nobody owns the state.
	leaderTerm int64

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn

	// hold is this replica's lease holder (nil with leases off), kick
	// asks its renewer for a renewal now, paths counts admissions.
	hold  *broker.Holder
	kick  chan struct{}
	paths paths

	// The admission gate (lifecycle.go): the owner's work in progress
	// (busy), which Handover cuts (handCancel) and waits for before the
	// final snapshot; handing refuses more. gmu guards handing and busy's
	// additions.
	gmu        sync.Mutex
	handing    bool
	busy       sync.WaitGroup
	handCtx    context.Context
	handCancel context.CancelFunc
	handed     sync.Once

	cancel     context.CancelFunc
	campCancel context.CancelFunc // ends the campaign alone (Handover)
	wg         sync.WaitGroup
	closed     sync.Once
}

// Start joins the election and returns once this replica owns the state or
// knows who does. It campaigns again, for as long as the Admission is open,
// whenever its session ends.
func Start(ctx context.Context, o Options) (*Admission, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 3
	}
	if o.OwnerWait <= 0 {
		o.OwnerWait = 2 * time.Second
	}
	if o.MaxWriteBytes <= 0 {
		o.MaxWriteBytes = DefaultMaxWriteBytes
	}
	a := &Admission{o: o, conns: map[string]*grpc.ClientConn{}, changed: make(chan struct{})}
	a.leaderSince.Store(time.Now().UnixNano())
	a.handCtx, a.handCancel = context.WithCancel(context.Background())
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	camp, campCancel := context.WithCancel(bg)
	a.campCancel = campCancel
	a.wg.Go(func() { a.campaign(camp) })
	a.wg.Go(func() { a.watchLeader(bg) })
	if o.Leases {
		a.hold, a.kick = o.Broker.NewHolder(), make(chan struct{}, 1)
		a.wg.Go(func() { a.renewLeases(bg) })
	}
	wait := time.NewTimer(30 * time.Second)
	defer wait.Stop()
	for {
		leader, ch := a.state()
		if a.owner.Load() || (leader != "" && leader != o.Addr) {
			return a, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			a.Close()
			return nil, ctx.Err()
		case <-wait.C:
			a.Close()
			return nil, errors.New("broker: no owner elected within 30s")
		}
	}
}

// campaign serves one term after another until ctx ends.
func (a *Admission) campaign(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil && !a.closing() {
		err := a.serveTerm(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = 100 * time.Millisecond
			continue
		}
		a.o.Logger.Warn("broker election; campaigning again", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// serveTerm opens a session, waits to win the election, takes over and
// snapshots until the session ends, a newer owner exists, or ctx ends.
func (a *Admission) serveTerm(ctx context.Context) error {
	s, err := concurrency.NewSession(a.o.Client, concurrency.WithTTL(a.o.LeaseTTL))
	if err != nil {
		return fmt.Errorf("election session: %w", err)
	}
	defer a.endSession(s)
	// The campaign and the term end with the session.
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.Ctx(), cancel)
	defer stop()

	e := concurrency.NewElection(s, ElectionPrefix)
	// A cancelled Campaign resigns on the client's own context, which no
	// deadline bounds: against an etcd that does not answer it would hold
	// Close for as long. So the campaign runs on its own and a stop does
	// not wait for it; it ends when etcd answers or the client closes.
	won := make(chan error, 1)
	go func() { won <- e.Campaign(tctx, a.o.Addr) }()
	select {
	case err = <-won:
	case <-ctx.Done():
		return nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("campaign: %w", err)
	}
	t := &term{session: s, elect: e, key: e.Key(), rev: e.Rev()}
	a.wmu.Lock()
	if a.stopping {
		a.wmu.Unlock()
		return nil
	}
	a.cur = t
	a.wmu.Unlock()
	defer func() {
		a.wmu.Lock()
		a.cur = nil
		a.wmu.Unlock()
	}()
	if err := a.takeOver(tctx, t); err != nil {
		a.resign(t)
		return fmt.Errorf("takeover: %w", err)
	}
	a.wmu.Lock()
	if a.stopping {
		a.wmu.Unlock()
		return nil
	}
	a.term.Store(t.rev)
	a.setOwner(true)
	a.wmu.Unlock()
	a.notify()
	a.o.Logger.Info("broker owner", "election_revision", t.rev)

	a.snapshots(tctx, t)

	a.setOwner(false)
	a.term.Store(0)
	a.notify()
	if ctx.Err() == nil {
		a.resign(t)
	}
	return nil
}

// endSession revokes the session's lease, or after Abandon leaves it to
// expire, as a crashed process would.
func (a *Admission) endSession(s *concurrency.Session) {
	a.wmu.Lock()
	abandoned := a.abandoned
	a.wmu.Unlock()
	if abandoned {
		s.Orphan()
		return
	}
	_ = s.Close()
}

func (a *Admission) resign(t *term) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.session.Ctx()), 2*time.Second)
	defer cancel()
	_ = t.elect.Resign(ctx)
}

// takeOver brings the singleton state up to date for the term t. When no
// other replica owned it since this one's previous term, the state in memory
// is complete and is kept. Otherwise the last snapshot is restored; after an
// unclean stop the broker admits conservatively until every reservation the
// old owner could have granted has expired.
func (a *Admission) takeOver(ctx context.Context, t *term) error {
	resp, err := a.o.Client.Txn(ctx).Then(
		clientv3.OpGet(SnapshotKey), clientv3.OpGet(CleanKey), clientv3.OpGet(TermKey), clientv3.OpGet(BudgetKey),
	).Commit()
	if err != nil {
		return fmt.Errorf("read broker snapshot: %w", err)
	}
	snap, clean := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	last, budget := resp.Responses[2].GetResponseRange().Kvs, resp.Responses[3].GetResponseRange().Kvs
	if a.lastRev != 0 && len(last) == 1 && string(last[0].Value) == strconv.FormatInt(a.lastRev, 10) {
		// What memory holds beyond the last durable snapshot stays
		// undurable (SetDurable as the last write left it) until saved.
		a.o.Logger.Info("broker ownership regained; nobody owned it meanwhile, the state in memory is kept")
	} else {
		a.restore(snap, clean, budget)
		a.saved(nil) // the state in memory is what is stored
	}
	// The clean marker is consumed: a later crash of this owner is unclean.
	ok, err := a.fenced(ctx, t, clientv3.OpDelete(CleanKey), clientv3.OpPut(TermKey, strconv.FormatInt(t.rev, 10)))
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("lost the election key while taking over")
	}
	a.lastRev = t.rev
	return nil
}

func (a *Admission) restore(snap, clean, budget []*mvccpb.KeyValue) {
	now := a.o.Now()
	cleanStop := len(snap) == 1 && len(clean) == 1 && string(clean[0].Value) == strconv.FormatInt(snap[0].ModRevision, 10)
	if len(snap) == 1 {
		if err := a.o.Broker.Restore(snap[0].Value, now); err != nil {
			a.o.Logger.Error("broker snapshot unreadable; starting empty in learning mode", "err", err)
			cleanStop = false
		}
	}
	if !cleanStop && len(snap) == 1 {
		until := a.o.Broker.LearningUntil(now)
		a.o.Broker.SetConservative(until)
		a.o.Logger.Warn("broker in learning mode after an unclean takeover", "until", until)
	} else if until := a.o.Broker.OldLearning(now); !until.IsZero() {
		// A clean stop hands over all its owner knew, but an owner still in
		// learning mode did not know what its predecessor granted after its
		// last snapshot: the next one holds back as long as it would have.
		a.o.Broker.SetConservative(until)
		a.o.Logger.Warn("broker in learning mode after a clean takeover from an owner in learning mode", "until", until)
	} else {
		a.o.Broker.SetConservative(time.Time{})
	}
	if a.o.Budget != nil && len(budget) == 1 {
		if err := a.o.Budget.Restore(budget[0].Value); err != nil {
			a.o.Logger.Error("hedge budget not restored; no hedges until the next UTC day", "err", err)
		}
	}
}

// snapshots saves the state about once a second while this replica owns
// it, and a failed save again within failRetry.
func (a *Admission) snapshots(ctx context.Context, t *term) {
	tick := time.NewTimer(a.o.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if t.session.Ctx().Err() != nil && !a.closing() {
				a.o.Logger.Error("broker ownership lost: election session ended; stopped admitting, campaigning again")
			}
			return
		case <-tick.C:
		}
		ok, err := a.save(ctx, t)
		if err != nil {
			tick.Reset(min(a.o.Every, failRetry))
			continue
		}
		tick.Reset(a.o.Every)
		if !ok {
			a.o.Logger.Error("broker ownership lost: a newer owner exists; stopped admitting, campaigning again")
			return
		}
	}
}

func (a *Admission) closing() bool {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return a.stopping
}

// save writes what changed of the state in one fenced transaction and
// reports whether this replica still owns it.
func (a *Admission) save(ctx context.Context, t *term) (bool, error) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if a.stopping {
		return true, nil // Close writes the final snapshot
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	_, ok, err := a.write(wctx, t)
	if err == nil && !ok {
		return false, nil // a newer owner: not a failure of this one's writes
	}
	a.saved(err)
	return ok, err
}

// write saves the broker's snapshot and the hedge budget when they changed,
// fenced by t, and returns the revision of the write (0 when nothing
// changed). Callers hold wmu.
func (a *Admission) write(ctx context.Context, t *term) (int64, bool, error) {
	blob := string(a.o.Broker.Snapshot())
	var ops []clientv3.Op
	if blob != a.lastBlob {
		ops = append(ops, clientv3.OpPut(SnapshotKey, blob))
	}
	var budg string
	encoded := true
	if a.o.Budget != nil {
		data, _ := a.o.Budget.Snapshot()
		// A state that cannot be encoded is never written over the last
		// good one: the budget refuses hedges until it can be saved.
		if data == nil {
			encoded, budg = false, a.lastBudg
			a.o.Budget.Durable(false)
		} else if budg = string(data); budg != a.lastBudg {
			ops = append(ops, clientv3.OpPut(BudgetKey, budg))
		}
	}
	if len(ops) == 0 {
		// Nothing unsaved: what is in memory is what is stored.
		if a.o.Budget != nil && encoded {
			a.o.Budget.Durable(true)
		}
		return 0, true, nil
	}
	// A transaction etcd would refuse is not sent: it is a failed write
	// (by construction of the broker's and the budget's bounds it does not
	// happen; this keeps it an alarm if it ever does).
	if size := len(blob) + len(budg) + len(SnapshotKey) + len(BudgetKey) + len(t.key); size > a.o.MaxWriteBytes {
		if a.o.Budget != nil {
			a.o.Budget.Durable(false)
		}
		return 0, false, fmt.Errorf("broker snapshot of %d bytes exceeds the write limit of %d", size, a.o.MaxWriteBytes)
	}
	resp, err := a.o.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)).
		Then(ops...).Commit()
	if err != nil {
		// What the budget grants now would not survive this owner: none
		// until a save succeeds.
		if a.o.Budget != nil {
			a.o.Budget.Durable(false)
		}
		return 0, false, err
	}
	if !resp.Succeeded {
		return 0, false, nil
	}
	if a.o.Budget != nil && encoded {
		a.o.Budget.Durable(true)
	}
	a.lastBlob, a.lastBudg = blob, budg
	return resp.Header.Revision, true, nil
}

// fenced runs ops only if this replica still holds the election key of t.
func (a *Admission) fenced(ctx context.Context, t *term, ops ...clientv3.Op) (bool, error) {
	resp, err := a.o.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)).
		Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Owner reports whether this replica owns the broker.
func (a *Admission) Owner() bool { return a.owner.Load() }

// setOwner records whether this replica owns the broker, counting the
// changes.
func (a *Admission) setOwner(v bool) {
	if a.owner.Swap(v) != v {
		a.ownerChanges.Add(1)
	}
}

// OwnerChanges counts the times this replica became the broker's owner or
// stopped being it since the start.
func (a *Admission) OwnerChanges() int64 { return a.ownerChanges.Load() }

// errRetryLocally means this replica became the owner while a call waited.
var errRetryLocally = errors.New("owner now")

// Reserve reserves locally when this replica owns the broker, else
// forwards. A request may wait in its workload class's queue for up to
// max_wait (0: the class's own wait; negative: not at all), never past the
// class's wait nor the call's deadline, which a forwarded call carries to
// the owner. The wait holds nothing of the server but the call itself: it
// ends with the call's context.
func (a *Admission) Reserve(ctx context.Context, req *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error) {
	if a.hold != nil && !a.owner.Load() {
		if res, ok := a.hold.Reserve(broker.ReserveRequestFromProto(req)); ok {
			a.paths[pathLease].Add(1)
			return &switchboardv1.ReserveResponse{Admitted: true, Reservation: res.Proto()}, nil
		}
	}
	var resp *switchboardv1.ReserveResponse
	local, err := a.onOwnerOrHere(ctx, func(ctx context.Context, c OwnerClient) (err error) {
		resp, err = c.Reserve(ctx, req)
		return err
	}, func(ctx context.Context) (err error) {
		resp, err = a.reserve(ctx, req)
		return err
	})
	if !local {
		a.count(resp, pathForwarded)
		return resp, err
	}
	a.count(resp, pathOwner)
	return resp, err
}

// Reconcile reconciles locally when this replica owns the broker, else
// forwards. allow is the caller's authorisation, checked against the
// reservation's tenant where the reservation lives: here on the owner (nil
// allows every tenant); a forwarded call is checked by the owner against the
// caller it names. A reservation of another tenant is PERMISSION_DENIED and
// left as it was. The answer names the owner's term (owner_term).
func (a *Admission) Reconcile(ctx context.Context, req *switchboardv1.ReconcileRequest, allow broker.Allow) (*switchboardv1.ReconcileResponse, error) {
	resp, _, err := a.reconcile(ctx, req, allow, true)
	return resp, err
}

// reconcile is Reconcile; answer false leaves out the answer of a
// reconciliation applied here (nil, nil), for a caller that only needs to
// know it was applied. term is the term of the owner that answered: this
// replica's, read before it applies (so never newer than the state it
// applied to), or the one a forwarded answer names; 0 when unknown.
func (a *Admission) reconcile(ctx context.Context, req *switchboardv1.ReconcileRequest, allow broker.Allow, answer bool) (_ *switchboardv1.ReconcileResponse, term int64, _ error) {
	if resp, term, mine, err := a.reconcileLeased(ctx, req, allow); mine {
		return resp, term, err
	}
	var resp *switchboardv1.ReconcileResponse
	local, err := a.onOwnerOrHere(ctx, func(ctx context.Context, c OwnerClient) (err error) {
		resp, err = c.Reconcile(ctx, req)
		return err
	}, func(ctx context.Context) error {
		term = a.term.Load()
		rr := broker.ReconcileRequestFromProto(req)
		rr.Allow = allow
		// A service moves only what its reservation's tenant sees of the
		// provider, unless the catalog trusts it for every tenant.
		rr.Scoped = !auth.SharesProviderState(ctx)
		st, err := a.o.Broker.Reconcile(ctx, rr)
		if err != nil {
			return toStatus(err)
		}
		if answer {
			resp = st.Proto()
			resp.OwnerTerm = term
		}
		return nil
	})
	if !local {
		return resp, resp.GetOwnerTerm(), err
	}
	if err != nil {
		return nil, term, err
	}
	return resp, term, nil
}

func toStatus(err error) error {
	switch {
	case errors.Is(err, broker.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, broker.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, broker.ErrForbidden):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, "rate-limit broker error")
}

// Abandon stops like a crash would: no final snapshot, no clean marker, no
// resignation; the election session's lease is left to expire. For failover
// tests and drills.
func (a *Admission) Abandon() {
	a.closed.Do(func() {
		a.wmu.Lock()
		a.stopping, a.abandoned = true, true
		a.setOwner(false)
		a.wmu.Unlock()
		a.shutdown()
	})
}

// Close hands the state over (Handover) when this replica owns it, then
// stops following the owner and closes the connections to it. The etcd
// client must still be open.
func (a *Admission) Close() {
	a.closed.Do(func() {
		a.Handover()
		a.shutdown()
	})
}

func (a *Admission) shutdown() {
	a.notify()
	a.cancel()
	a.wg.Wait()
	a.mu.Lock()
	for _, c := range a.conns {
		_ = c.Close()
	}
	a.conns = nil // conn makes no connection after this: none would be closed
	a.mu.Unlock()
}
