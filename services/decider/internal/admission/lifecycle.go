package admission

import (
	"context"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

// ReconcileOnce applies a reconciliation an edge sent on its Report stream,
// on the broker's owner, checked with allow as [Admission.Reconcile] does.
// It returns nil once the reconciliation is applied or can never apply (the
// owner does not know the reservation, reconciled it already, the request is
// invalid, or the reservation is another tenant's): the edge may then forget
// it. Any other error (no owner elected yet, an owner still taking over or
// unreachable) means it must be tried again.
//
// term is the term of the owner that answered, for the edge's replay window:
// an owner of a newer term must be sent the reconciliation again. When the
// owner's answer names none (a forwarded refusal carries no answer), it is
// the term this replica's election watch saw before the call, never newer
// than the owner's, so the edge replays rather than misses.
func (a *Admission) ReconcileOnce(ctx context.Context, req *switchboardv1.ReconcileRequest, allow broker.Allow) (term int64, _ error) {
	seen, _ := a.OwnerTerm()
	_, term, err := a.reconcile(ctx, req, allow, false)
	if term == 0 {
		term = seen
	}
	switch status.Code(err) {
	case codes.OK, codes.NotFound, codes.InvalidArgument, codes.PermissionDenied:
		return term, nil
	}
	return 0, err
}

// Keep extends the open reservations among ids by their TTL, on the
// broker's owner, and returns how many it extended. allow is checked on the
// owner as [Admission.Reconcile] does: when any of the reservations is
// another tenant's, none is extended and the error is PERMISSION_DENIED.
func (a *Admission) Keep(ctx context.Context, ids []string, allow broker.Allow) (int64, error) {
	var leased int
	if a.hold != nil {
		n, rest, err := a.hold.Extend(ids, allow)
		if err != nil {
			return 0, toStatus(err)
		}
		if len(rest) == 0 {
			return int64(n), nil
		}
		leased, ids = n, rest
	}
	var resp *switchboardv1.KeepReservationsResponse
	var n int
	local, err := a.onOwnerOrHere(ctx, func(ctx context.Context, c OwnerClient) (err error) {
		resp, err = c.KeepReservations(ctx, &switchboardv1.KeepReservationsRequest{ReservationIds: ids})
		return err
	}, func(ctx context.Context) (err error) {
		if n, err = a.o.Broker.Extend(ctx, ids, allow); err != nil {
			return toStatus(err)
		}
		return nil
	})
	if !local {
		return int64(leased) + resp.GetKept(), err
	}
	return int64(leased + n), err
}

// onOwnerOrHere runs forward against the broker's owner as OnOwner does, or
// here when this replica owns the state, within the admission gate: a
// Handover that begins meanwhile cuts here's context and waits for it to
// return before the final snapshot. Work here cut so, which must then keep
// nothing (a reservation granted as its wait was cut is released), runs
// again on the new owner, as work reaching the gate after the Handover
// began does. local reports whether it ran here.
func (a *Admission) onOwnerOrHere(ctx context.Context, forward func(context.Context, OwnerClient) error, here func(context.Context) error) (local bool, _ error) {
	for {
		local, err := a.OnOwner(ctx, forward)
		if !local {
			return false, err
		}
		hctx, done, ok := a.admit(ctx)
		if !ok {
			continue // this replica no longer owns the state: OnOwner forwards
		}
		err = here(hctx)
		cut := err != nil && hctx.Err() != nil && ctx.Err() == nil
		done()
		if cut {
			a.o.Logger.Info("the broker's state was handed over during a call; calling the new owner")
			continue
		}
		return true, err
	}
}

// admit lets the owner's work in: its context ends with ctx or when a
// Handover begins, and done must be called when it returns. It refuses
// (false) once a Handover began.
func (a *Admission) admit(ctx context.Context) (context.Context, func(), bool) {
	a.gmu.Lock()
	defer a.gmu.Unlock()
	if a.handing {
		return nil, nil, false
	}
	a.busy.Add(1)
	hctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(a.handCtx, cancel)
	return hctx, func() {
		stop()
		cancel()
		a.busy.Done()
	}, true
}

// Handover ends this replica's part in the broker's ownership, first of
// all at a stop: it stops admitting (every call taking a decision here,
// a queued Reserve among them, is cut and runs again on the next owner),
// waits for the calls under way here to return, saves the final snapshot
// with the clean-stop marker when this replica owns the state, resigns,
// and campaigns no more. So another replica takes over at once, at full
// capacity, and everything granted here is in the snapshot it restores.
// Afterwards calls are forwarded to the new owner until Close; call it
// before the gRPC server drains. The etcd client must still be open.
func (a *Admission) Handover() { a.handed.Do(a.handover) }

func (a *Admission) handover() {
	a.wmu.Lock()
	a.stopping = true
	owner := a.owner.Load()
	a.setOwner(false)
	a.gmu.Lock()
	a.handing = true // with owner false: work turned away here is forwarded
	a.gmu.Unlock()
	a.wmu.Unlock()
	a.notify()
	a.handCancel()
	a.busy.Wait()

	a.wmu.Lock()
	if t := a.cur; owner && t != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		// Two fenced writes: the state, then the marker naming the
		// revision of the snapshot (always written, so it is that of the
		// first write).
		a.lastBlob = ""
		rev, ok, err := a.write(ctx, t)
		if err == nil && ok {
			if _, err = a.fenced(ctx, t, clientv3.OpPut(CleanKey, strconv.FormatInt(rev, 10))); err != nil {
				a.o.Logger.Warn("broker clean-stop marker", "err", err)
			}
		} else if err != nil {
			a.o.Logger.Warn("broker final snapshot", "err", err)
		}
		_ = t.elect.Resign(ctx)
		cancel()
	}
	a.wmu.Unlock()
	a.campCancel()
}
