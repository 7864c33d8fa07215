package broker

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"
	"time"
)

// maxSnapQueued bounds the queued requests a snapshot carries, the
// earliest queued first: a failover keeps the places of that many.
const maxSnapQueued = 4096

// snapQueue is the part of the admission queues a snapshot carries: the
// virtual time, each flow's virtual finish, and the waiting requests that
// have an idempotency key (only those can be re-attached to), in arrival
// order.
type snapQueue struct {
	vt      float64
	flows   []snapFlow
	entries []snapQueued
}

type snapFlow struct {
	key  flowKey
	vfin float64 // -Inf before its first admission
}

type snapQueued struct {
	req      ReserveRequest
	class    WorkloadClass // the queue it waits in
	enq      int64
	deadline int64
	fallback string
	decision QueueDecision
}

// captureQueue copies what a snapshot carries of the queues. It takes the
// queue mutex alone.
func (b *Broker) captureQueue() snapQueue {
	q := &b.q
	q.mu.Lock()
	defer q.mu.Unlock()
	sq := snapQueue{vt: q.vt}
	var es []*qentry
	for _, f := range q.flows {
		sq.flows = append(sq.flows, snapFlow{key: f.key, vfin: f.vfin})
		for _, e := range f.entries {
			if e.idem.key != "" {
				es = append(es, e)
			}
		}
	}
	slices.SortFunc(es, func(a, c *qentry) int { return cmp.Compare(a.seq, c.seq) })
	es = es[:min(len(es), maxSnapQueued)]
	// Queued requests are carried while they fit in their part of the
	// state; those beyond only lose their place after a failover.
	size := int64(8 + binary.MaxVarintLen64) // the virtual time, the flow count
	for _, f := range sq.flows {
		size += binary.MaxVarintLen64 + strSize(len(f.key.tenant)) + 1 + 8
	}
	for i, e := range es {
		if size += queuedSize(e); size > maxQueueSnapBytes {
			es = es[:i]
			break
		}
	}
	for _, e := range es {
		sq.entries = append(sq.entries, snapQueued{req: e.req, class: e.flow.key.class, enq: e.enq, deadline: e.deadline,
			fallback: e.fallback, decision: e.decision})
	}
	return sq
}

// queuedSize bounds what appendQueue writes for e.
func queuedSize(e *qentry) int64 {
	r := &e.req
	n := int64(0)
	for _, s := range [...]string{r.RequestID, r.IdempotencyKey, r.Identity.TenantID, r.Identity.APIKeyID,
		r.Identity.App, r.Identity.Environment, r.Identity.Partner, r.Model, r.EndpointID, e.fallback, e.decision.ID} {
		n += strSize(len(s))
	}
	const v = binary.MaxVarintLen64
	return n + 2*v + (3*v + 8) + 8*v
}

func appendQueue(w []byte, sq snapQueue) []byte {
	w = appendFloat(w, sq.vt)
	w = binary.AppendUvarint(w, uint64(len(sq.flows)))
	for _, f := range sq.flows {
		w = binary.AppendVarint(w, int64(f.key.class))
		w = appendString(w, f.key.tenant)
		w = appendBool(w, !math.IsInf(f.vfin, -1))
		if !math.IsInf(f.vfin, -1) {
			w = appendFloat(w, f.vfin)
		}
	}
	w = binary.AppendUvarint(w, uint64(len(sq.entries)))
	for _, e := range sq.entries {
		r := &e.req
		for _, s := range [...]string{r.RequestID, r.IdempotencyKey, r.Identity.TenantID, r.Identity.APIKeyID,
			r.Identity.App, r.Identity.Environment, r.Identity.Partner, r.Model, r.EndpointID, e.fallback, e.decision.ID} {
			w = appendString(w, s)
		}
		w = binary.AppendVarint(w, int64(r.Identity.Class))
		w = binary.AppendVarint(w, int64(e.class))
		w = appendDemand(w, r.Demand)
		w = binary.AppendVarint(w, int64(r.TTL))
		w = binary.AppendVarint(w, int64(r.MaxWait))
		w = binary.AppendVarint(w, int64(r.Attempt))
		w = binary.AppendVarint(w, int64(r.PreviousFailure))
		w = binary.AppendVarint(w, e.enq)
		w = binary.AppendVarint(w, e.deadline)
		w = binary.AppendVarint(w, int64(e.decision.Position))
		w = binary.AppendVarint(w, int64(e.decision.EstimatedWait))
	}
	return w
}

// queue reads the queue section.
func (r *reader) queue() snapQueue {
	sq := snapQueue{vt: r.float()}
	for n := r.count(1 + 1 + 1); n > 0 && r.err == nil; n-- {
		f := snapFlow{key: flowKey{class: r.class(), tenant: r.str()}, vfin: math.Inf(-1)}
		if r.byte1() != 0 {
			f.vfin = r.float()
		}
		sq.flows = append(sq.flows, f)
	}
	for n := r.count(11 + 2 + 11 + 8); n > 0 && r.err == nil; n-- {
		var e snapQueued
		rq := &e.req
		for _, p := range [...]*string{&rq.RequestID, &rq.IdempotencyKey, &rq.Identity.TenantID, &rq.Identity.APIKeyID,
			&rq.Identity.App, &rq.Identity.Environment, &rq.Identity.Partner, &rq.Model, &rq.EndpointID, &e.fallback, &e.decision.ID} {
			*p = r.str()
		}
		rq.Identity.Class, e.class = r.class(), r.class()
		rq.Demand = r.demand()
		rq.TTL, rq.MaxWait = time.Duration(r.varint()), time.Duration(r.varint())
		rq.Attempt, rq.PreviousFailure = int(r.varint()), RefusalReason(r.varint())
		e.enq, e.deadline = r.varint(), r.varint()
		e.decision.Position, e.decision.EstimatedWait = int(r.varint()), time.Duration(r.varint())
		e.decision.Class = e.class
		if rq.IdempotencyKey == "" || rq.TTL < 0 || rq.MaxWait < 0 || e.decision.Position < 0 || e.decision.EstimatedWait < 0 ||
			rq.PreviousFailure < 0 || rq.PreviousFailure > ReasonDeadline {
			r.fail("bad queued request")
		}
		sq.entries = append(sq.entries, e)
	}
	return sq
}

// class reads a workload class.
func (r *reader) class() WorkloadClass {
	c := r.varint()
	if c < 0 || c > int64(ClassBatch) {
		r.fail("bad workload class")
	}
	return WorkloadClass(c)
}

// restoreQueue adds the snapshot's queued requests, as of now, orphaned:
// nobody waits on them here yet, so each keeps its place for
// Options.QueueReattach for its caller's retry to re-attach (the old
// owner's callers see their calls fail and retry), and is dropped after.
// Without QueueReattach nothing is restored. Requests past their deadline,
// and those whose key already waits here, are skipped; the others keep
// their order, ids and positions, and the flows their virtual finish.
func (b *Broker) restoreQueue(sq snapQueue, now int64) {
	if b.opts.QueueReattach <= 0 {
		return
	}
	q := &b.q
	q.mu.Lock()
	defer q.mu.Unlock()
	q.vt = math.Max(q.vt, sq.vt)
	for _, sf := range sq.flows {
		f := q.flows[sf.key]
		if f == nil {
			f = &qflow{key: sf.key, vfin: sf.vfin}
			q.flows[sf.key] = f
		}
		f.vfin = math.Max(f.vfin, sf.vfin)
	}
	added := false
	for _, se := range sq.entries {
		ik := idemKey{tenant: se.req.Identity.TenantID, key: se.req.IdempotencyKey}
		if se.deadline <= now || q.idem[ik] != nil {
			continue
		}
		k := flowKey{class: se.class, tenant: se.req.Identity.TenantID}
		f := q.flows[k]
		if f == nil {
			f = &qflow{key: k, vfin: math.Inf(-1)}
			q.flows[k] = f
		}
		q.seq++
		e := &qentry{req: se.req, flow: f, idem: ik, seq: q.seq, cost: float64(se.req.Demand.normalized().Requests),
			enq: se.enq, deadline: se.deadline, retryAt: now, fallback: se.fallback, decision: se.decision,
			orphaned: now + int64(b.opts.QueueReattach), done: make(chan struct{})}
		f.entries = append(f.entries, e)
		q.idem[ik] = e
		q.depth[k.class]++
		q.n.Add(1)
		q.stats.Queued++
		q.soonest = min(q.soonest, e.end())
		q.next.Store(min(q.next.Load(), e.end()))
		added = true
	}
	if added && !q.running && !b.opts.ManualPump {
		q.running = true
		go b.runQueue()
	}
}
