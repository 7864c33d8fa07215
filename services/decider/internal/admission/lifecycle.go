package admission

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// ReconcileOnce applies a reconciliation an edge sent on its Report stream,
// on the broker's owner. It returns nil once the reconciliation is applied
// or can never apply (the owner does not know the reservation, reconciled
// it already, or the request is invalid): the edge may then forget it. Any
// other error (no owner elected yet, an owner still taking over or
// unreachable) means it must be tried again.
func (a *Admission) ReconcileOnce(ctx context.Context, req *switchboardv1.ReconcileRequest) error {
	_, err := a.Reconcile(ctx, req)
	switch status.Code(err) {
	case codes.OK, codes.NotFound, codes.InvalidArgument:
		return nil
	}
	return err
}

// Keep extends the open reservations among ids by their TTL, on the
// broker's owner, and returns how many it extended.
func (a *Admission) Keep(ctx context.Context, ids []string) (int64, error) {
	c, err := a.Forward(ctx)
	if err != nil {
		return 0, err
	}
	if c != nil {
		resp, err := c.KeepReservations(ctx, &switchboardv1.KeepReservationsRequest{ReservationIds: ids})
		return resp.GetKept(), err
	}
	n, err := a.o.Broker.Extend(ctx, ids)
	if err != nil {
		return 0, toStatus(err)
	}
	return int64(n), nil
}
