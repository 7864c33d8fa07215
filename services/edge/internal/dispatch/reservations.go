package dispatch

import switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"

// reservations is the reservation bookkeeping of one request: which
// reservations it holds and on which endpoint, which of them legs were sent
// under, and which endpoints the broker refused it. Every reservation
// granted is declared to the Ledger while the request may use it. It is
// used on the request's goroutine only.
type reservations struct {
	ledger Ledger
	// held maps an endpoint to a reservation granted on it that no leg
	// uses yet (at first, Decide's); spare holds granted reservations that
	// can no longer be used. Both are released when the request ends.
	held  map[string]string
	spare []string
	// used are the reservations legs were sent under; they are reconciled
	// when their legs are reported, so they are never released.
	used map[string]bool
	// refused are endpoints the broker refused (or could not be asked
	// about) for this request; they are not asked again.
	//
	// The maps are made when first written: most requests use one
	// reservation, on one endpoint, and are refused none.
	refused map[string]bool
}

// newReservations starts the bookkeeping of a request, holding Decide's
// reservation on its endpoint when there is one.
func newReservations(ledger Ledger, a *Admission) *reservations {
	r := &reservations{ledger: ledger}
	if a != nil && a.ReservationID != "" && a.EndpointID != "" {
		r.held = map[string]string{a.EndpointID: a.ReservationID}
		r.granted(a.ReservationID)
	}
	return r
}

// granted declares a reservation the broker granted to the ledger,
// so it stays open however long the request runs.
func (r *reservations) granted(id string) {
	if id != "" {
		r.ledger.Hold(id)
	}
}

// take takes the reservation held on an endpoint, if any.
func (r *reservations) take(endpointID string) (string, bool) {
	id, ok := r.held[endpointID]
	if ok {
		delete(r.held, endpointID)
	}
	return id, ok
}

// keep holds a granted reservation that no leg uses (yet): a later attempt
// on the same endpoint takes it, else it is released when the request ends.
func (r *reservations) keep(endpointID, id string) {
	if id == "" || r.used[id] {
		return
	}
	if old, ok := r.held[endpointID]; ok && old != id {
		r.spare = append(r.spare, old)
	}
	if r.held == nil {
		r.held = map[string]string{}
	}
	r.held[endpointID] = id
}

// use marks a reservation a leg is sent under: it is reconciled with the
// leg's report, never released.
func (r *reservations) use(id string) {
	if id != "" {
		r.markUsed(id)
	}
}

// markUsed records id among the used reservations.
func (r *reservations) markUsed(id string) {
	if r.used == nil {
		r.used = map[string]bool{}
	}
	r.used[id] = true
}

// closed marks a used reservation reconciled by a Reconcile RPC (rq,
// applied under the owner term term), and tells the ledger.
func (r *reservations) closed(rq *switchboardv1.ReconcileRequest, term int64) {
	r.markUsed(rq.GetReservationId())
	r.applied(rq, term)
}

// applied tells the ledger a reservation was closed by a Reconcile RPC, rq,
// applied under the owner term term.
func (r *reservations) applied(rq *switchboardv1.ReconcileRequest, term int64) {
	if rq.GetReservationId() != "" {
		r.ledger.Applied(rq, term)
	}
}

// refuse remembers an endpoint the broker refused for this request.
func (r *reservations) refuse(endpointID string) {
	if r.refused == nil {
		r.refused = map[string]bool{}
	}
	r.refused[endpointID] = true
}

// isRefused reports whether the broker refused an endpoint for this request.
func (r *reservations) isRefused(endpointID string) bool { return r.refused[endpointID] }

// unused returns, and stops holding, every reservation granted for the
// request that no leg used: Decide's when its endpoint was never called, a
// hedge's that did not start.
func (r *reservations) unused() []string {
	var ids []string
	for _, id := range r.spare {
		if !r.used[id] {
			ids = append(ids, id)
		}
	}
	for _, id := range r.held {
		if !r.used[id] {
			ids = append(ids, id)
		}
	}
	r.held, r.spare = nil, nil
	return ids
}
