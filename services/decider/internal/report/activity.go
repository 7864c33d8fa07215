package report

// A stream's activity writer: activity batches stored off the receive loop,
// several per write, each acknowledged once durable.

import (
	"slices"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// takeActivity takes an activity batch from the receive loop: its valid
// records are stored and acknowledged off the loop (store), so a commit's
// fsync never holds up the call reports and reconciliations behind it, and
// batches that arrive meanwhile share the next commit. A batch with nothing
// to store is acknowledged at once.
func (h *Hub) takeActivity(c *conn, a *switchboardv1.ActivityBatch) error {
	a = h.validActivity(c, a)
	if h.activity != nil && len(a.GetRecords()) > 0 {
		select {
		case c.activity <- a:
			return nil
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
	}
	return h.ackActivity(c, a)
}

// validActivity is the batch a with its invalid records dropped.
func (h *Hub) validActivity(c *conn, a *switchboardv1.ActivityBatch) *switchboardv1.ActivityBatch {
	recs := keep(h, c, "activity record", a.GetRecords(), validate.ActivityRecord)
	if len(recs) == len(a.GetRecords()) {
		return a
	}
	return &switchboardv1.ActivityBatch{Records: recs, Sequence: a.GetSequence()}
}

// store writes a stream's activity batches, each write taking every batch
// queued by then, and acknowledges each batch once its records are
// durable. A batch whose write failed is not acknowledged: the edge sends
// it again on its next stream.
func (h *Hub) store(c *conn) {
	for {
		var a *switchboardv1.ActivityBatch
		select {
		case b, ok := <-c.activity:
			if !ok {
				return // the edge half-closed: everything queued is stored
			}
			a = b
		case <-c.ctx.Done():
			return
		}
		// Fresh slices each time: the sink may keep the records.
		batches, records := []*switchboardv1.ActivityBatch{a}, slices.Clone(a.GetRecords())
	more:
		for len(records) < maxActivityWrite {
			select {
			case a, ok := <-c.activity:
				if !ok {
					break more
				}
				batches, records = append(batches, a), append(records, a.GetRecords()...)
			default:
				break more
			}
		}
		if err := h.activity(c.ctx, c.hello, records); err != nil {
			h.logger.Error("activity batches not stored", "edge", c.hello.GetEdgeId(), "batches", len(batches), "err", err)
			continue
		}
		for _, a := range batches {
			if h.ackActivity(c, a) != nil {
				return
			}
		}
	}
}

// ackActivity acknowledges a stored activity batch. Unlike a call-report
// ack it is never dropped: the edge keeps the batch until it sees it.
func (h *Hub) ackActivity(c *conn, a *switchboardv1.ActivityBatch) error {
	ack := &switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Ack{Ack: &switchboardv1.ReportAck{
		Accepted: int64(len(a.GetRecords())), ActivitySequence: a.GetSequence()}}}
	select {
	case c.out <- ack:
		return nil
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
}
