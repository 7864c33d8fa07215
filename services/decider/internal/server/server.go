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
func (s *Server) Decide(_ context.Context, req *pb.DecideRequest) (*pb.DecideResponse, error) {
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
	return resp, nil
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
func (s *Server) AcquireHedge(_ context.Context, req *pb.AcquireHedgeRequest) (*pb.AcquireHedgeResponse, error) {
	if req.GetRequestId() == "" {
		return nil, status.Error(codes.InvalidArgument, "request_id is required")
	}
	ok, left, reset := s.budget.Acquire(req.GetRequestId(), req.GetEstimatedCostUsd())
	return &pb.AcquireHedgeResponse{Granted: ok, RemainingUsd: left, ResetTime: timestamppb.New(reset)}, nil
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

// Reserve implements [pb.DeciderServiceServer.Reserve]. The rate-limit broker
// is not part of this version: the RPC says so rather than admitting blindly.
func (s *Server) Reserve(context.Context, *pb.ReserveRequest) (*pb.ReserveResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Reserve: the rate-limit broker is not enabled in this version")
}

// Reconcile implements [pb.DeciderServiceServer.Reconcile].
func (s *Server) Reconcile(context.Context, *pb.ReconcileRequest) (*pb.ReconcileResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Reconcile: the rate-limit broker is not enabled in this version")
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
