package server

import (
	"context"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/metrics"
)

// SetMetrics makes the server record admission metrics; nil (the default)
// records none.
func (s *Server) SetMetrics(m *metrics.Admission) { s.metrics.Store(m) }

// local reports whether a's broker answers here rather than on the owner,
// and the metrics to record the answer with: nil when metrics are off or the
// owner records it (a forwarded call reaches the owner's own Reserve or
// Reconcile, which counts it there). Ownership may change during the call;
// a decision made around a handover may then be counted twice or not at all.
func (s *Server) local(a *admission.Admission) *metrics.Admission {
	m := s.metrics.Load()
	if m == nil || !a.Owner() {
		return nil
	}
	return m
}

// reserveLocal is a.Reserve, recorded when this replica's broker answers.
func (s *Server) reserveLocal(ctx context.Context, a *admission.Admission, req *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error) {
	m := s.local(a)
	resp, err := a.Reserve(ctx, req)
	m.Reserved(ctx, req, resp, err)
	return resp, err
}

// reconcileLocal runs reconcile, recorded when this replica's broker
// answers: the reservation is looked up before it closes, for its tenant,
// route and estimate.
func (s *Server) reconcileLocal(ctx context.Context, a *admission.Admission, req *switchboardv1.ReconcileRequest, reconcile func() error) error {
	m := s.local(a)
	if m == nil {
		return reconcile()
	}
	info, ok := m.Lookup(req.GetReservationId())
	err := reconcile()
	m.Reconciled(ctx, req, info, ok, err)
	return err
}
