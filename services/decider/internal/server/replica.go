package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// The ReplicaService: a call another replica forwards to this one, the
// broker's owner, is the public RPC's own handler, run as the caller the
// replica names (auth.Authenticator.Forwarded), so a forwarded call and a
// direct one go through the same checks and the same admission policy.

var _ switchboardv1.ReplicaServiceServer = (*Server)(nil)

// forward runs h, the handler of the public RPC method, for the caller
// callerID a replica forwards req for.
func forward[Req, Resp any](ctx context.Context, s *Server, callerID, method string, req *Req, h func(context.Context, *Req) (*Resp, error)) (*Resp, error) {
	ctx, err := s.authn.Forwarded(ctx, callerID, method)
	if err != nil {
		return nil, err
	}
	if req == nil {
		return nil, status.Error(codes.InvalidArgument, "request is required")
	}
	return h(ctx, req)
}

// ForwardReserve implements [switchboardv1.ReplicaServiceServer.ForwardReserve].
func (s *Server) ForwardReserve(ctx context.Context, req *switchboardv1.ForwardReserveRequest) (*switchboardv1.ForwardReserveResponse, error) {
	resp, err := forward(ctx, s, req.GetCallerId(), switchboardv1.RouterService_Reserve_FullMethodName, req.GetRequest(), s.Reserve)
	if err != nil {
		return nil, err
	}
	return &switchboardv1.ForwardReserveResponse{Response: resp}, nil
}

// ForwardReconcile implements [switchboardv1.ReplicaServiceServer.ForwardReconcile].
func (s *Server) ForwardReconcile(ctx context.Context, req *switchboardv1.ForwardReconcileRequest) (*switchboardv1.ForwardReconcileResponse, error) {
	resp, err := forward(ctx, s, req.GetCallerId(), switchboardv1.RouterService_Reconcile_FullMethodName, req.GetRequest(), s.Reconcile)
	if err != nil {
		return nil, err
	}
	return &switchboardv1.ForwardReconcileResponse{Response: resp}, nil
}

// ForwardKeepReservations implements [switchboardv1.ReplicaServiceServer.ForwardKeepReservations].
func (s *Server) ForwardKeepReservations(ctx context.Context, req *switchboardv1.ForwardKeepReservationsRequest) (*switchboardv1.ForwardKeepReservationsResponse, error) {
	resp, err := forward(ctx, s, req.GetCallerId(), switchboardv1.RouterService_KeepReservations_FullMethodName, req.GetRequest(), s.KeepReservations)
	if err != nil {
		return nil, err
	}
	return &switchboardv1.ForwardKeepReservationsResponse{Response: resp}, nil
}

// ForwardAcquireHedge implements [switchboardv1.ReplicaServiceServer.ForwardAcquireHedge].
func (s *Server) ForwardAcquireHedge(ctx context.Context, req *switchboardv1.ForwardAcquireHedgeRequest) (*switchboardv1.ForwardAcquireHedgeResponse, error) {
	resp, err := forward(ctx, s, req.GetCallerId(), switchboardv1.EdgeService_AcquireHedge_FullMethodName, req.GetRequest(), s.AcquireHedge)
	if err != nil {
		return nil, err
	}
	return &switchboardv1.ForwardAcquireHedgeResponse{Response: resp}, nil
}

// ForwardSettleHedge implements [switchboardv1.ReplicaServiceServer.ForwardSettleHedge].
func (s *Server) ForwardSettleHedge(ctx context.Context, req *switchboardv1.ForwardSettleHedgeRequest) (*switchboardv1.ForwardSettleHedgeResponse, error) {
	resp, err := forward(ctx, s, req.GetCallerId(), switchboardv1.EdgeService_SettleHedge_FullMethodName, req.GetRequest(), s.SettleHedge)
	if err != nil {
		return nil, err
	}
	return &switchboardv1.ForwardSettleHedgeResponse{Response: resp}, nil
}

// RenewLeases implements [switchboardv1.ReplicaServiceServer.RenewLeases]:
// a replica's own call, answered by the broker's owner.
func (s *Server) RenewLeases(ctx context.Context, req *switchboardv1.RenewLeasesRequest) (*switchboardv1.RenewLeasesResponse, error) {
	if err := s.policy.Ready(); err != nil {
		return nil, err
	}
	return s.policy.Admission.RenewLeases(ctx, req)
}
