package server

import (
	"google.golang.org/grpc"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Register registers s as every service of the decider on gs.
func Register(gs *grpc.Server, s *Server) {
	switchboardv1.RegisterRouterServiceServer(gs, s)
	switchboardv1.RegisterEdgeServiceServer(gs, s)
	switchboardv1.RegisterOperatorServiceServer(gs, s)
	switchboardv1.RegisterReplicaServiceServer(gs, s)
}

// Services are the names of the services Register registers, for the
// health service.
var Services = []string{
	switchboardv1.RouterService_ServiceDesc.ServiceName, switchboardv1.EdgeService_ServiceDesc.ServiceName,
	switchboardv1.OperatorService_ServiceDesc.ServiceName, switchboardv1.ReplicaService_ServiceDesc.ServiceName,
}

// HotMethods are the RPCs called on every request, directly or forwarded
// to the broker's owner (grpcserver.Options.HotMethods).
var HotMethods = []string{
	switchboardv1.RouterService_Decide_FullMethodName, switchboardv1.RouterService_Reserve_FullMethodName,
	switchboardv1.RouterService_Reconcile_FullMethodName, switchboardv1.EdgeService_AcquireHedge_FullMethodName,
	switchboardv1.ReplicaService_ForwardReserve_FullMethodName, switchboardv1.ReplicaService_ForwardReconcile_FullMethodName,
	switchboardv1.ReplicaService_ForwardAcquireHedge_FullMethodName,
}
