// Package server is the DeciderService gRPC boundary: it turns requests into
// calls on routing and report, and their errors into gRPC statuses.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/activity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/report"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

// Server implements pb.DeciderServiceServer.
type Server struct {
	pb.UnimplementedDeciderServiceServer
	router   atomic.Pointer[routing.Router]
	hub      *report.Hub
	budget   *hedge.Budget
	activity atomic.Pointer[activity.Store]
	adm      atomic.Pointer[admission.Admission]
}

// SetAdmission enables Reserve, Reconcile and Decide's reserve option.
func (s *Server) SetAdmission(a *admission.Admission) { s.adm.Store(a) }

func (s *Server) admission() (*admission.Admission, error) {
	a := s.adm.Load()
	if a == nil {
		return nil, status.Error(codes.Unavailable, "the rate-limit broker is starting")
	}
	return a, nil
}

var _ pb.DeciderServiceServer = (*Server)(nil)

// New returns a server that answers UNAVAILABLE until SetRouter is called.
func New(hub *report.Hub, budget *hedge.Budget) *Server { return &Server{hub: hub, budget: budget} }

// SetActivity makes the activity log queryable.
func (s *Server) SetActivity(a *activity.Store) { s.activity.Store(a) }

// SetRouter makes the server ready.
func (s *Server) SetRouter(r *routing.Router) { s.router.Store(r) }

func (s *Server) ready() (*routing.Router, error) {
	r := s.router.Load()
	if r == nil {
		return nil, status.Error(codes.Unavailable, "decider is starting: catalog not loaded yet")
	}
	return r, nil
}

// Decide implements [pb.DeciderServiceServer.Decide].
func (s *Server) Decide(ctx context.Context, req *pb.DecideRequest) (*pb.DecideResponse, error) {
	r, err := s.ready()
	if err != nil {
		return nil, err
	}
	id, err := r.Authenticate(req.GetIdentity())
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetRequestId() == "" {
		req.RequestId = newID()
	}
	resp, err := r.Decide(req, id)
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetReserve() && !req.GetDryRun() {
		if err := s.reserve(ctx, req, resp); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// reserve walks the decided order and reserves on the first endpoint whose
// limits can take the request: an endpoint whose own
// provider limits are full is skipped — the request goes to the next one,
// not back to the client. Only the caller's own limits (API key, app,
// tenant, partner), or every endpoint being full, refuse the client.
func (s *Server) reserve(ctx context.Context, req *pb.DecideRequest, resp *pb.DecideResponse) error {
	a, err := s.admission()
	if err != nil {
		return err
	}
	out := req.GetTokens().GetMaxOutputTokens()
	if out <= 0 {
		out = routing.DefaultOutputTokens
	}
	eps := append([]*pb.Endpoint{resp.GetEndpoint()}, resp.GetFallbacks()...)
	var refusal *pb.Refusal
	for i, ep := range eps {
		d := &pb.Demand{InputTokens: req.GetTokens().GetInputTokens(), OutputTokens: out, Usd: ep.GetEstimatedCostUsd(), Requests: 1}
		key := ""
		if k := req.GetIdempotencyKey(); k != "" {
			key = k + "|" + ep.GetId()
		}
		rr, err := a.Reserve(ctx, &pb.ReserveRequest{
			RequestId: resp.GetRequestId(), IdempotencyKey: key, Identity: resp.GetIdentity(),
			Model: resp.GetModel(), EndpointId: ep.GetId(), Demand: d, Ttl: req.GetReservationTtl(),
		})
		if err != nil {
			return err
		}
		if rr.GetAdmitted() {
			resp.Endpoint, resp.Fallbacks = ep, eps[i+1:]
			resp.Reservation, resp.Demand = rr.GetReservation(), d
			if h := resp.GetHedge(); h.GetEndpoint().GetId() == ep.GetId() {
				resp.Hedge = &pb.HedgePlan{Mode: pb.HedgeMode_HEDGE_MODE_NONE}
			}
			return nil
		}
		ref := rr.GetRefusal()
		if callerScope(ref.GetScope()) {
			resp.Endpoint, resp.Fallbacks, resp.Refusal = nil, nil, ref
			return nil
		}
		if refusal == nil || earlier(ref, refusal) {
			refusal = ref
		}
	}
	resp.Endpoint, resp.Fallbacks, resp.Refusal = nil, nil, refusal
	resp.Hedge = &pb.HedgePlan{Mode: pb.HedgeMode_HEDGE_MODE_NONE}
	return nil
}

// callerScope reports whether a bucket belongs to the caller (its own
// limits) rather than to a provider.
func callerScope(sc pb.LimitScope) bool {
	switch sc {
	case pb.LimitScope_LIMIT_SCOPE_API_KEY, pb.LimitScope_LIMIT_SCOPE_APP, pb.LimitScope_LIMIT_SCOPE_TENANT, pb.LimitScope_LIMIT_SCOPE_PARTNER:
		return true
	}
	return false
}

// earlier prefers the refusal whose capacity comes back first.
func earlier(a, b *pb.Refusal) bool {
	if a.GetRetryAfter() == nil {
		return false
	}
	return b.GetRetryAfter() == nil || a.GetRetryAfter().AsDuration() < b.GetRetryAfter().AsDuration()
}

// ListModels implements [pb.DeciderServiceServer.ListModels].
func (s *Server) ListModels(_ context.Context, req *pb.ListModelsRequest) (*pb.ListModelsResponse, error) {
	r, err := s.ready()
	if err != nil {
		return nil, err
	}
	if _, err := r.Authenticate(req.GetIdentity()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ListModelsResponse{Models: r.ListModels()}, nil
}

// AcquireHedge implements [pb.DeciderServiceServer.AcquireHedge].
// The budget is held by the replica that owns the rate-limit broker, so the
// decision is atomic across every edge and replica; others forward.
func (s *Server) AcquireHedge(ctx context.Context, req *pb.AcquireHedgeRequest) (*pb.AcquireHedgeResponse, error) {
	if req.GetRequestId() == "" {
		return nil, status.Error(codes.InvalidArgument, "request_id is required")
	}
	if a := s.adm.Load(); a != nil {
		c, err := a.Forward(ctx)
		if err != nil {
			return nil, err
		}
		if c != nil {
			return c.AcquireHedge(ctx, req)
		}
	}
	ok, left, reset := s.budget.Acquire(req.GetRequestId(), req.GetEstimatedCostUsd())
	return &pb.AcquireHedgeResponse{Granted: ok, RemainingUsd: left, ResetTime: timestamppb.New(reset)}, nil
}

// SettleHedge implements [pb.DeciderServiceServer.SettleHedge]: settled
// where the budget is held, like AcquireHedge.
func (s *Server) SettleHedge(ctx context.Context, req *pb.SettleHedgeRequest) (*pb.SettleHedgeResponse, error) {
	if a := s.adm.Load(); a != nil {
		c, err := a.Forward(ctx)
		if err != nil {
			return nil, err
		}
		if c != nil {
			return c.SettleHedge(ctx, req)
		}
	}
	for _, st := range req.GetSettlements() {
		s.budget.Settle(st.GetRequestId(), st.GetLoserCostUsd())
	}
	return &pb.SettleHedgeResponse{}, nil
}

// ListActivity implements [pb.DeciderServiceServer.ListActivity].
func (s *Server) ListActivity(ctx context.Context, req *pb.ListActivityRequest) (*pb.ListActivityResponse, error) {
	tenant, store, err := s.activityFor(req.GetIdentity())
	if err != nil {
		return nil, err
	}
	q := activity.Query{Tenant: tenant, Model: req.GetModel(), Limit: int(req.GetLimit()), Cursor: req.GetCursor()}
	if req.GetLimit() < 0 || req.GetLimit() > 500 {
		return nil, status.Error(codes.InvalidArgument, "limit must be between 1 and 500")
	}
	if t := req.GetStartTime(); t != nil {
		q.Start = t.AsTime()
	}
	if t := req.GetEndTime(); t != nil {
		q.End = t.AsTime()
	}
	recs, next, err := store.List(ctx, q)
	if errors.Is(err, activity.ErrBadCursor) {
		return nil, status.Error(codes.InvalidArgument, "invalid cursor")
	}
	if err != nil {
		return nil, status.Error(codes.Internal, "reading the activity log failed")
	}
	return &pb.ListActivityResponse{Records: recs, NextCursor: next}, nil
}

// GetActivity implements [pb.DeciderServiceServer.GetActivity].
func (s *Server) GetActivity(ctx context.Context, req *pb.GetActivityRequest) (*pb.GetActivityResponse, error) {
	tenant, store, err := s.activityFor(req.GetIdentity())
	if err != nil {
		return nil, err
	}
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id is required")
	}
	rec, err := store.Get(ctx, tenant, req.GetId())
	if errors.Is(err, activity.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "no generation %q", req.GetId())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, "reading the activity log failed")
	}
	return &pb.GetActivityResponse{Record: rec}, nil
}

// activityFor authenticates the caller: only its own tenant's records are read.
func (s *Server) activityFor(id *pb.Identity) (string, *activity.Store, error) {
	r, err := s.ready()
	if err != nil {
		return "", nil, err
	}
	who, err := r.Authenticate(id)
	if err != nil {
		return "", nil, toStatus(err)
	}
	store := s.activity.Load()
	if store == nil {
		return "", nil, status.Error(codes.Unavailable, "the activity log is not open yet")
	}
	return who.GetTenantId(), store, nil
}

// Reserve implements [pb.DeciderServiceServer.Reserve]. A caller that sends
// api_key_sha256 is authenticated and its identity resolved; a trusted
// caller's tenant_id must name a tenant.
func (s *Server) Reserve(ctx context.Context, req *pb.ReserveRequest) (*pb.ReserveResponse, error) {
	r, err := s.ready()
	if err != nil {
		return nil, err
	}
	a, err := s.admission()
	if err != nil {
		return nil, err
	}
	if req.GetEndpointId() == "" {
		return nil, status.Error(codes.InvalidArgument, "endpoint_id is required")
	}
	id, err := r.Authenticate(req.GetIdentity())
	if err != nil {
		return nil, toStatus(err)
	}
	req.Identity = id
	return a.Reserve(ctx, req)
}

// Reconcile implements [pb.DeciderServiceServer.Reconcile].
func (s *Server) Reconcile(ctx context.Context, req *pb.ReconcileRequest) (*pb.ReconcileResponse, error) {
	a, err := s.admission()
	if err != nil {
		return nil, err
	}
	if req.GetReservationId() == "" {
		return nil, status.Error(codes.InvalidArgument, "reservation_id is required")
	}
	return a.Reconcile(ctx, req)
}

// maxKeep bounds the ids of one KeepReservations call.
const maxKeep = 100_000

// KeepReservations implements [pb.DeciderServiceServer.KeepReservations].
func (s *Server) KeepReservations(ctx context.Context, req *pb.KeepReservationsRequest) (*pb.KeepReservationsResponse, error) {
	a, err := s.admission()
	if err != nil {
		return nil, err
	}
	if len(req.GetReservationIds()) > maxKeep {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d reservation ids per call", maxKeep)
	}
	n, err := a.Keep(ctx, req.GetReservationIds())
	if err != nil {
		return nil, err
	}
	return &pb.KeepReservationsResponse{Kept: n}, nil
}

// Reservations is what the report hub applies the edges' reconciliations
// and heartbeats with: the broker's owner, through this replica's
// admission once it is set (until then, every attempt fails and is retried).
func (s *Server) Reservations() report.Reservations { return reservations{s} }

type reservations struct{ s *Server }

func (r reservations) Reconcile(ctx context.Context, req *pb.ReconcileRequest) error {
	a, err := r.s.admission()
	if err != nil {
		return err
	}
	if req.GetReservationId() == "" {
		return nil // nothing to apply, ever
	}
	return a.ReconcileOnce(ctx, req)
}

func (r reservations) Keep(ctx context.Context, ids []string) error {
	a, err := r.s.admission()
	if err != nil {
		return err
	}
	_, err = a.Keep(ctx, ids)
	if status.Code(err) == codes.Unimplemented {
		return nil // an owner of an older version: nothing to keep them with
	}
	return err
}

// Report implements [pb.DeciderServiceServer.Report].
func (s *Server) Report(stream pb.DeciderService_ReportServer) error {
	return s.hub.Serve(stream)
}

func toStatus(err error) error {
	var re *routing.Error
	if !errors.As(err, &re) {
		return status.Error(codes.Internal, "internal error")
	}
	switch re.Kind {
	case routing.KindUnauthenticated:
		return status.Error(codes.Unauthenticated, re.Msg)
	case routing.KindNotFound:
		return status.Error(codes.NotFound, re.Msg)
	case routing.KindInvalid:
		return status.Error(codes.InvalidArgument, re.Msg)
	case routing.KindUnavailable:
		return status.Error(codes.FailedPrecondition, re.Msg)
	}
	return status.Error(codes.Internal, re.Msg)
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "gen-" + hex.EncodeToString(b[:])
}
