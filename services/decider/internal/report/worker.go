package report

// A stream's reservation worker: reconciliations and heartbeats applied on
// the broker's owner in order, retried while it cannot answer, and a
// reconcile batch acknowledged with the owner's term once applied.

import (
	"context"
	"errors"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// job is one unit of a stream's reservation work.
type job struct {
	reconciles []*switchboardv1.ReconcileRequest
	// ack is the reconcile batch's sequence, acknowledged once every
	// reconciliation is applied; 0 for reconciliations nobody waits for.
	ack  uint64
	keep []string
}

// queue hands reservation work to the stream's worker without waiting.
func (h *Hub) queue(c *conn, j job) {
	select {
	case c.jobs <- j:
	default:
		h.refused.Add(1)
		h.logger.Warn("reservation work queue full; not acknowledged, the edge sends it again",
			"edge", c.hello.GetEdgeId(), "reconciles", len(j.reconciles), "sequence", j.ack)
	}
}

// work applies the stream's reservation work in order until the stream ends.
func (h *Hub) work(c *conn) {
	for {
		select {
		case <-c.ctx.Done():
			return
		case j, ok := <-c.jobs:
			if !ok || !h.do(c, j) {
				return
			}
		}
	}
}

// do applies one job, retrying each failed step for a bounded time (a
// heartbeat twice as long as a reconciliation: long enough to outlast a new
// owner's takeover, so what an edge declares on reconnecting reaches it
// before the restored reservations expire); false when the stream ended.
func (h *Hub) do(c *conn, j job) bool {
	if len(j.keep) > 0 {
		done, alive := h.retry(c, "keep reservations", 2*h.giveUp, func(ctx context.Context, r Reservations) error { return r.Keep(ctx, j.keep) })
		if !alive {
			return false
		}
		if done {
			h.kept.Add(1)
		}
	}
	// The ack names the oldest term that applied any of the batch (0 if
	// one is unknown): the edge replays the whole batch to a newer owner,
	// and a reconciliation applied twice is applied once.
	term := int64(-1)
	for _, rq := range j.reconciles {
		var applied int64
		done, alive := h.retry(c, "reconcile", h.giveUp, func(ctx context.Context, r Reservations) (err error) {
			applied, err = r.Reconcile(ctx, rq)
			return err
		})
		if term < 0 || applied < term {
			term = applied
		}
		if !alive {
			return false
		}
		if !done {
			h.logger.Warn("reconciliation still failing; its batch is left for the edge to send again",
				"edge", c.hello.GetEdgeId(), "reservation", rq.GetReservationId(), "sequence", j.ack)
			return true
		}
	}
	if j.ack == 0 {
		return true
	}
	if term < 0 {
		// Nothing to apply (every item was invalid): the owner now.
		term = h.term.Load()
	}
	// The owner that applied the batch may be newer than the election
	// watch has told the hub yet (or the first one): the edges are told
	// its term before the ack that names it.
	h.SetOwnerTerm(term)
	ack := &switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Ack{Ack: &switchboardv1.ReportAck{
		Accepted: int64(len(j.reconciles)), ReconcileSequence: j.ack, OwnerTerm: term}}}
	select {
	case c.out <- ack:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// retry runs f until it succeeds (done), for at most giveUp; alive is false
// when the stream ended first.
func (h *Hub) retry(c *conn, what string, giveUp time.Duration, f func(context.Context, Reservations) error) (done, alive bool) {
	delay := h.retryMin
	deadline := time.Now().Add(giveUp)
	for {
		var err error
		if h.rsv != nil {
			ctx, cancel := context.WithTimeout(c.ctx, h.attempt)
			err = f(ctx, h.rsv)
			cancel()
			if err == nil {
				return true, true
			}
		} else {
			err = errors.New("no reservations to apply it with")
		}
		if c.ctx.Err() != nil {
			return false, false
		}
		if time.Now().After(deadline) {
			return false, true
		}
		h.retried.Add(1)
		h.logger.Debug(what+" failed; retrying", "edge", c.hello.GetEdgeId(), "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return false, false
		case <-t.C:
		}
		delay = min(2*delay, h.retryMax)
	}
}
