package admission

import (
	"context"

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
	local, err := a.OnOwner(ctx, func(ctx context.Context, c OwnerClient) (err error) {
		resp, err = c.KeepReservations(ctx, &switchboardv1.KeepReservationsRequest{ReservationIds: ids})
		return err
	})
	if !local {
		return int64(leased) + resp.GetKept(), err
	}
	n, err := a.o.Broker.Extend(ctx, ids, allow)
	if err != nil {
		return 0, toStatus(err)
	}
	return int64(leased + n), nil
}
