package broker

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Holder is a replica's side of its quota leases (lease.go): what it may
// still admit by itself on each bucket, the reservations it admitted so,
// and the demand and observations its next renewal carries. It does no
// I/O: the admission package renews through the owner and calls Granted.
//
// A request is admitted here only when every bucket it charges is leasable
// and leased to this replica with enough left, its endpoint is not one the
// owner keeps central (paused, or with limits learned from the provider),
// it is a first attempt (a retry's budget is the owner's) and the leases'
// term has not ended; anything else is forwarded to the owner as before.
// Reconcile settles such a reservation against the lease: what was not
// used goes back to the lease, an overrun is taken from it (it may go
// negative), and the next renewal gives the rest back or charges the
// overrun on the owner. A reservation that is never reconciled stays
// consumed when it expires.
type Holder struct {
	b *Broker // this replica's broker: the catalog's buckets, the clock

	mu      sync.Mutex
	avail   map[string]float64 // bucket id → what the lease has left
	until   int64              // the leases' term ends, Unix ns
	epoch   int64              // changes with the owner that granted the leases
	owner   int64              // the term of that owner
	demand  map[string]float64 // since the last renewal
	central map[string]bool    // endpoints to forward
	res     map[string]*heldRes
	bytes   int64               // what res would take in a snapshot: bounded as the owner's open reservations are
	closed  map[string]*heldRes // reconciled with a deferred failure
	idem    map[idemKey]string
	obs     []Observation
}

// heldRes is a reservation admitted on leases.
type heldRes struct {
	res     Reservation
	expires int64
	ttl     int64
	epoch   int64
	size    int64 // its part of Holder.bytes
}

// Observation is what a provider said of a call admitted on a lease that
// the owner must fold into the route: a failure, a pause, a 429.
type Observation struct {
	Endpoint, Model, Tenant string
	Req                     ReconcileRequest
}

// NewHolder returns the lease holder of a replica whose broker is b.
func (b *Broker) NewHolder() *Holder {
	return &Holder{b: b, avail: map[string]float64{}, demand: map[string]float64{}, central: map[string]bool{},
		res: map[string]*heldRes{}, closed: map[string]*heldRes{}, idem: map[idemKey]string{}}
}

// Reserve admits req on this replica's leases, or reports false: the
// caller forwards it to the owner. A leasable request counts as demand
// either way.
func (h *Holder) Reserve(req ReserveRequest) (*Reservation, bool) {
	if req.checkFields() != nil || req.Demand.validate() != nil {
		return nil, false // the owner answers what is wrong with it
	}
	charges, dem, est, ok := h.b.LeasePlan(&req)
	if !ok {
		return nil, false
	}
	now := h.b.nowNS()
	ttl := h.b.grantTTL(req.TTL)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range charges {
		h.demand[c.BucketID] += c.Amount
	}
	if h.central[req.EndpointID] || req.Attempt > 1 || now >= h.until {
		return nil, false
	}
	ik := idemKey{tenant: req.Identity.TenantID, key: req.IdempotencyKey}
	if ik.key != "" {
		if r := h.res[h.idem[ik]]; r != nil && r.expires > now {
			return &r.res, true
		}
	}
	for _, c := range charges {
		a, leased := h.avail[c.BucketID]
		if !leased || (c.Amount == 0 && a <= 0) || a-c.Amount < -1e-9 {
			return nil, false
		}
	}
	// The reservations held here take memory as the owner's take state: a
	// replica holds no more than the owner's snapshot could (MaxStateBytes),
	// and past that the owner (broker_full) answers.
	id := newID(int(h.b.seq.Add(1) % nShards))
	size := reservationSize(identitySize(&req.Identity), len(charges), len(id), len(req.RequestID), len(req.IdempotencyKey),
		len(req.Model), len(req.EndpointID))
	if h.bytes+size > int64(h.b.opts.MaxStateBytes) {
		return nil, false
	}
	h.bytes += size
	for _, c := range charges {
		h.avail[c.BucketID] -= c.Amount
	}
	r := &heldRes{expires: now + int64(ttl), ttl: int64(ttl), epoch: h.epoch, size: size}
	r.res = Reservation{
		ID: id, RequestID: req.RequestID, IdempotencyKey: req.IdempotencyKey,
		Identity: req.Identity, Model: req.Model, EndpointID: req.EndpointID, Estimate: est, Demand: dem,
		Charges: charges, Created: time.Unix(0, now).UTC(), Expires: time.Unix(0, r.expires).UTC(),
	}
	h.res[r.res.ID] = r
	if ik.key != "" {
		h.idem[ik] = r.res.ID
	}
	return &r.res, true
}

// Reconcile settles a reservation admitted on leases and reports whether
// it was one (false: the caller forwards the reconciliation). observe
// says the reconciliation carries what the owner must hear (a failure, a
// 429): it is queued for the next renewal, which the caller should send
// now, and until then the endpoint is forwarded.
func (h *Holder) Reconcile(req ReconcileRequest) (st *Settlement, mine, observe bool, err error) {
	if err := req.Usage.validate(); err != nil {
		return nil, false, false, fmt.Errorf("reconcile %s: %w", req.ReservationID, err)
	}
	now := h.b.nowNS()
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.res[req.ReservationID]
	if r == nil {
		// The second reconciliation of a deferred failure applies its
		// pause, as the owner's broker does.
		if c := h.closed[req.ReservationID]; c != nil && !req.FailureDeferred {
			if !req.Allow.allows(c.res.Identity.TenantID) {
				return nil, true, false, fmt.Errorf("reconcile %s: %w", req.ReservationID, ErrForbidden)
			}
			delete(h.closed, req.ReservationID)
			return &Settlement{Reservation: &c.res}, true, h.observe(&c.res, req), nil
		}
		return nil, false, false, nil
	}
	if !req.Allow.allows(r.res.Identity.TenantID) {
		return nil, true, false, fmt.Errorf("reconcile %s: %w", req.ReservationID, ErrForbidden)
	}
	h.drop(r)
	if req.FailureDeferred {
		h.closed[r.res.ID] = r
	}
	st = &Settlement{Reservation: &r.res, Released: make([]Charge, len(r.res.Charges))}
	for i, c := range r.res.Charges {
		delta := c.Amount - req.Usage.actual(c.Unit, c.Amount)
		if r.epoch != h.epoch || r.expires <= now {
			// What another owner's lease, or an expired reservation,
			// held is consumed; an overrun is still charged.
			delta = math.Min(delta, 0)
		}
		h.avail[c.BucketID] += delta
		st.Released[i] = Charge{BucketID: c.BucketID, Scope: c.Scope, Unit: c.Unit, Amount: delta}
	}
	if req.FailureDeferred {
		return st, true, false, nil
	}
	return st, true, h.observe(&r.res, req), nil
}

// observe queues what req says of r's route for the owner, and forwards
// the route until the owner answers; h.mu is held.
func (h *Holder) observe(r *Reservation, req ReconcileRequest) bool {
	if req.Outcome == OutcomeOK && req.Failure == ReasonUnspecified {
		return false
	}
	req.Usage, req.ReservationID, req.Allow = Usage{}, "", nil
	h.obs = append(h.obs, Observation{Endpoint: r.EndpointID, Model: r.Model, Tenant: r.Identity.TenantID, Req: req})
	h.central[r.EndpointID] = true
	return true
}

func (h *Holder) drop(r *heldRes) {
	if h.res[r.res.ID] == r {
		h.bytes -= r.size
	}
	delete(h.res, r.res.ID)
	ik := idemKey{tenant: r.res.Identity.TenantID, key: r.res.IdempotencyKey}
	if ik.key != "" && h.idem[ik] == r.res.ID {
		delete(h.idem, ik)
	}
}

// Extend keeps the reservations of ids admitted here open for another TTL
// and returns how many it extended and the ids that are not its own.
func (h *Holder) Extend(ids []string, allow Allow) (int, []string, error) {
	now := h.b.nowNS()
	h.mu.Lock()
	defer h.mu.Unlock()
	var rest []string
	for _, id := range ids {
		if r := h.res[id]; r != nil && !allow.allows(r.res.Identity.TenantID) {
			return 0, nil, fmt.Errorf("extend %s: %w", id, ErrForbidden)
		}
	}
	n := 0
	for _, id := range ids {
		r := h.res[id]
		if r == nil {
			rest = append(rest, id)
			continue
		}
		if r.expires > now {
			r.expires = max(r.expires, now+r.ttl)
			n++
		}
	}
	return n, rest, nil
}

// Renewal starts a renewal: for every bucket, what its lease has left —
// given back, so nothing more is admitted on it until Granted — and the
// demand since the last renewal, and the observations to send. A lease
// whose term ended gives back only its overrun: the owner counts the rest
// consumed. Expired reservations are forgotten (their charges stay
// consumed).
func (h *Holder) Renewal() ([]LeaseAsk, []Observation) {
	now := h.b.nowNS()
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, r := range h.res {
		if r.expires <= now {
			h.drop(r)
			delete(h.res, id)
		}
	}
	for id, r := range h.closed {
		if r.expires+int64(h.b.opts.Tombstone) <= now {
			delete(h.closed, id)
		}
	}
	live := now < h.until
	asks := make([]LeaseAsk, 0, len(h.avail)+len(h.demand))
	seen := map[string]bool{}
	for id, a := range h.avail {
		if !live {
			a = math.Min(a, 0)
		}
		asks = append(asks, LeaseAsk{BucketID: id, Returned: a, Demand: h.demand[id]})
		seen[id] = true
		h.avail[id] = 0
	}
	for id, d := range h.demand {
		if !seen[id] {
			asks = append(asks, LeaseAsk{BucketID: id, Demand: d})
		}
	}
	clear(h.demand)
	obs := h.obs
	h.obs = nil
	return asks, obs
}

// Granted applies the owner's answer to the renewal sent at sent: the new
// leases last until sent + term (the owner's term starts later, so this
// replica stops first). ownerTerm names the owner: leases of another
// owner give nothing back to the new ones. Buckets the answer does not
// name, and that have nothing to carry, are forgotten.
func (h *Holder) Granted(sent time.Time, term time.Duration, grants []LeaseGrant, central []string, ownerTerm int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ownerTerm != h.owner {
		h.owner = ownerTerm
		h.epoch++
	}
	for id, a := range h.avail {
		if a == 0 {
			delete(h.avail, id)
		}
	}
	for _, g := range grants {
		if g.Amount > 0 || h.b.Leasable(g.BucketID) {
			h.avail[g.BucketID] += math.Max(g.Amount, 0)
		}
	}
	h.until = sent.Add(min(term, h.b.opts.MaxLeaseTerm)).UnixNano()
	clear(h.central)
	for _, e := range central {
		h.central[e] = true
	}
}

// Failed puts back the observations of a renewal that did not reach the
// owner, for the next one.
func (h *Holder) Failed(obs []Observation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.obs = append(obs, h.obs...)
}

// Stop ends the use of the leases at once (this replica became the owner):
// what they had left is consumed.
func (h *Holder) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.until = 0
	clear(h.avail)
	clear(h.demand)
}

// Held is what the leases have left per bucket while their term lasts,
// for tests and views.
func (h *Holder) Held() map[string]float64 {
	now := h.b.nowNS()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]float64{}
	if now < h.until {
		for id, a := range h.avail {
			out[id] = a
		}
	}
	return out
}
