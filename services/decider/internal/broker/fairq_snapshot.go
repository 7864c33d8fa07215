package broker

import (
	"cmp"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
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
	size := queueBaseSize
	for _, f := range sq.flows {
		size += flowSize(f)
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

// queueBaseSize bounds what the queue takes in a snapshot without its
// flows and requests: its field's tag and length, and the virtual time.
var queueBaseSize = 1 + int64(uvarintLen(maxQueueSnapBytes)) + dblField

// flowSize bounds what f takes in a snapshot.
func flowSize(f snapFlow) int64 {
	return msgField(intField + strField(len(f.key.tenant)) + dblField)
}

// queuedSize bounds what e takes in a snapshot.
func queuedSize(e *qentry) int64 {
	r := &e.req
	n := identitySize(&r.Identity)
	for _, s := range [...]string{r.RequestID, r.IdempotencyKey, r.Model, r.EndpointID, e.fallback} {
		n += strField(len(s))
	}
	n += intField + demandField + 6*intField // the queue's class, the demand, ttl … deadline
	n += msgField(strField(len(e.decision.ID)) + 2*intField)
	return msgField(n)
}

func encodeQueue(sq snapQueue) *statev1.BrokerQueue {
	pq := &statev1.BrokerQueue{VirtualTime: sq.vt, Flows: make([]*statev1.BrokerFlow, len(sq.flows))}
	for i, f := range sq.flows {
		pf := &statev1.BrokerFlow{Class: int32(f.key.class), TenantId: safe(f.key.tenant)}
		if !math.IsInf(f.vfin, -1) {
			pf.VirtualFinish = proto.Float64(f.vfin)
		}
		pq.Flows[i] = pf
	}
	pq.Requests = make([]*statev1.BrokerQueued, len(sq.entries))
	for i, e := range sq.entries {
		r := &e.req
		pq.Requests[i] = &statev1.BrokerQueued{
			RequestId: safe(r.RequestID), IdempotencyKey: safe(r.IdempotencyKey), Identity: encodeIdentity(r.Identity),
			Model: safe(r.Model), EndpointId: safe(r.EndpointID), FallbackModel: safe(e.fallback),
			QueueClass: int32(e.class), Demand: encodeDemand(r.Demand),
			TtlNano: int64(r.TTL), MaxWaitNano: int64(r.MaxWait), Attempt: int64(r.Attempt),
			PreviousFailure: int32(r.PreviousFailure), EnqueuedUnixNano: e.enq, DeadlineUnixNano: e.deadline,
			Decision: &statev1.BrokerQueueDecision{
				Id: safe(e.decision.ID), Position: int64(e.decision.Position), EstimatedWaitNano: int64(e.decision.EstimatedWait),
			},
		}
	}
	return pq
}

// decodeQueue reads the queue's part of a snapshot.
func decodeQueue(pq *statev1.BrokerQueue) (snapQueue, error) {
	sq := snapQueue{vt: pq.GetVirtualTime()}
	if !finite(sq.vt) {
		return sq, corrupt("non-finite number")
	}
	for _, pf := range pq.GetFlows() {
		cls, err := decodeClass(pf.GetClass())
		if err != nil {
			return sq, err
		}
		f := snapFlow{key: flowKey{class: cls, tenant: pf.GetTenantId()}, vfin: math.Inf(-1)}
		if pf.VirtualFinish != nil {
			if f.vfin = pf.GetVirtualFinish(); !finite(f.vfin) {
				return sq, corrupt("non-finite number")
			}
		}
		sq.flows = append(sq.flows, f)
	}
	for _, pr := range pq.GetRequests() {
		var e snapQueued
		rq := &e.req
		rq.RequestID, rq.IdempotencyKey = pr.GetRequestId(), pr.GetIdempotencyKey()
		rq.Model, rq.EndpointID, e.fallback = pr.GetModel(), pr.GetEndpointId(), pr.GetFallbackModel()
		var err error
		if rq.Identity, err = decodeIdentity(pr.GetIdentity()); err != nil {
			return sq, err
		}
		if e.class, err = decodeClass(pr.GetQueueClass()); err != nil {
			return sq, err
		}
		if rq.Demand, err = decodeDemand(pr.GetDemand()); err != nil {
			return sq, err
		}
		rq.TTL, rq.MaxWait = time.Duration(pr.GetTtlNano()), time.Duration(pr.GetMaxWaitNano())
		rq.Attempt, rq.PreviousFailure = int(pr.GetAttempt()), RefusalReason(pr.GetPreviousFailure())
		e.enq, e.deadline = pr.GetEnqueuedUnixNano(), pr.GetDeadlineUnixNano()
		pd := pr.GetDecision()
		e.decision.ID, e.decision.Position, e.decision.EstimatedWait = pd.GetId(), int(pd.GetPosition()), time.Duration(pd.GetEstimatedWaitNano())
		e.decision.Class = e.class
		if rq.IdempotencyKey == "" || rq.TTL < 0 || rq.MaxWait < 0 || e.decision.Position < 0 || e.decision.EstimatedWait < 0 ||
			rq.PreviousFailure < 0 || rq.PreviousFailure > ReasonDeadline || pd.GetPosition() > math.MaxInt32 ||
			pr.GetAttempt() < math.MinInt32 || pr.GetAttempt() > math.MaxInt32 {
			return sq, corrupt("bad queued request")
		}
		sq.entries = append(sq.entries, e)
	}
	return sq, nil
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
