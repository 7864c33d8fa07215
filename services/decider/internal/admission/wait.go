package admission

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/reservation"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

// NoWait is the max_wait that asks for an answer at once, never a place in
// the class's queue (reservation.NoWait): what Decide uses to find the
// endpoint that can take a request now before it waits for one.
var NoWait = durationpb.New(reservation.NoWait)

// maxReplyMargin bounds the part of a call's deadline kept for the answer
// to travel back: a wait ends that long before the deadline, so the caller
// hears a refusal it can act on rather than its own deadline passing.
const maxReplyMargin = 250 * time.Millisecond

// waitFor is how long a Reserve may wait in its class's queue: max_wait
// (0 leaves it to the class), never past the call's deadline less a margin
// for the reply. A negative result means no wait at all.
func waitFor(ctx context.Context, maxWait *durationpb.Duration, now time.Time) time.Duration {
	wait := maxWait.AsDuration()
	if wait < 0 {
		return -1
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return wait
	}
	room := dl.Sub(now)
	room -= min(room/4, maxReplyMargin)
	if room <= 0 {
		return -1
	}
	if wait == 0 || wait > room {
		return room
	}
	return wait
}

// reserve is the owner's Reserve: at once when the caller will not wait,
// else through the class's queue. A reservation granted after the caller
// stopped waiting is released at once, so a wait that ends with the call
// holds no capacity.
func (a *Admission) reserve(ctx context.Context, req *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error) {
	r := broker.ReserveRequestFromProto(req)
	wait := waitFor(ctx, req.GetMaxWait(), a.o.Now())
	var (
		res *broker.Reservation
		ref *broker.Refusal
		q   *broker.QueueDecision
		err error
	)
	if wait < 0 {
		res, ref, err = a.o.Broker.Reserve(ctx, r)
	} else {
		r.MaxWait = wait
		res, ref, q, err = a.o.Broker.ReserveWait(ctx, r)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	if res != nil && ctx.Err() != nil {
		_, _ = a.o.Broker.Reconcile(context.WithoutCancel(ctx), broker.ReconcileRequest{
			ReservationID: res.ID, Outcome: broker.OutcomeCancelled,
		})
		return nil, toStatus(ctx.Err())
	}
	out := &switchboardv1.ReserveResponse{Queue: QueueProto(q)}
	if ref != nil {
		out.Refusal = RefusalProto(ref)
		return out, nil
	}
	out.Admitted, out.Reservation = true, res.Proto()
	return out, nil
}

// RefusalProto is the refusal as the caller sees it, with its stable code
// (Refusal.Code, or the one its reason, unit and bucket give) and the
// fallback model its class degrades to, if any.
func RefusalProto(ref *broker.Refusal) *switchboardv1.Refusal {
	out := ref.Proto()
	out.Code = broker.CodeOf(ref)
	out.FallbackModel = ref.FallbackModel
	return out
}

// QueueProto is a queue decision as Reserve and Decide answer it; nil for
// a request that did not wait.
func QueueProto(q *broker.QueueDecision) *switchboardv1.QueueDecision {
	if q == nil {
		return nil
	}
	out := &switchboardv1.QueueDecision{
		QueueId: q.ID, WorkloadClass: switchboardv1.WorkloadClass(q.Class),
		Position: int64(q.Position), Waited: durationpb.New(q.Waited),
	}
	if q.EstimatedWait > 0 {
		out.EstimatedWait = durationpb.New(q.EstimatedWait)
	}
	return out
}

// awaitDurable waits until the broker's state may be saved again, or ctx
// ends (false): on the owner until it is saved, elsewhere (the owner
// refused) for retryAfter.
func (a *Admission) awaitDurable(ctx context.Context, retryAfter time.Duration) bool {
	if a.Owner() {
		return a.o.Broker.AwaitDurable(ctx)
	}
	t := time.NewTimer(max(retryAfter, 10*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
