package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// The operator's reads of the decider's state (GetEndpointStats,
// GetBroker, GetCatalog): answered from memory, the broker's on its owner.

// replica is this replica's address, "" while the broker is starting.
func (s *Server) replica() string {
	if a := s.policy.Admission; a != nil {
		return a.Addr()
	}
	return ""
}

// GetEndpointStats implements [switchboardv1.OperatorServiceServer.GetEndpointStats].
func (s *Server) GetEndpointStats(ctx context.Context, req *switchboardv1.GetEndpointStatsRequest) (*switchboardv1.GetEndpointStatsResponse, error) {
	if err := invalid(validate.Model("model", req.GetModel())); err != nil {
		return nil, err
	}
	v := s.views(ctx)
	var asked *switchboardv1.Identity
	if t := req.GetTenantId(); t != "" {
		asked = &switchboardv1.Identity{TenantId: t}
	}
	id := &switchboardv1.Identity{}
	if asked != nil {
		var err error
		if id, err = v.Auth.Identity(ctx, switchboardv1.OperatorService_GetEndpointStats_FullMethodName, asked); err != nil {
			return nil, err
		}
	}
	models := v.Routing.ModelIDs()
	if m := req.GetModel(); m != "" {
		models = []string{m}
	}
	resp := &switchboardv1.GetEndpointStatsResponse{Replica: s.replica(), ReadTime: timestamppb.Now()}
	for _, m := range models {
		ms, ok := s.router.ModelStats(v.Routing, m, id)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "model %q is not in the catalog", m)
		}
		resp.Models = append(resp.Models, ms)
	}
	return resp, nil
}

// GetBroker implements [switchboardv1.OperatorServiceServer.GetBroker]
// (see admission.Policy.GetBroker).
func (s *Server) GetBroker(ctx context.Context, req *switchboardv1.GetBrokerRequest) (*switchboardv1.GetBrokerResponse, error) {
	if n := req.GetMaxBuckets(); n < 0 {
		return nil, fieldStatus("max_buckets must not be negative", "max_buckets", "INVALID_VALUE")
	}
	return s.policy.GetBroker(ctx, req)
}

// GetCatalog implements [switchboardv1.OperatorServiceServer.GetCatalog].
func (s *Server) GetCatalog(ctx context.Context, _ *switchboardv1.GetCatalogRequest) (*switchboardv1.GetCatalogResponse, error) {
	v := s.views(ctx)
	data, err := catalog.Elide(v.Source)
	if err != nil {
		// The catalog applied was parsed from these bytes: this does not happen.
		return nil, status.Error(codes.Internal, "the catalog applied could not be read back")
	}
	return &switchboardv1.GetCatalogResponse{Revision: v.Revision, Yaml: string(data), Replica: s.replica()}, nil
}

// ForwardGetBroker implements [switchboardv1.ReplicaServiceServer.ForwardGetBroker].
func (s *Server) ForwardGetBroker(ctx context.Context, req *switchboardv1.ForwardGetBrokerRequest) (*switchboardv1.ForwardGetBrokerResponse, error) {
	resp, err := forward(ctx, s, req.GetCallerId(), switchboardv1.OperatorService_GetBroker_FullMethodName, req.GetRequest(), s.GetBroker)
	if err != nil {
		return nil, err
	}
	return &switchboardv1.ForwardGetBrokerResponse{Response: resp}, nil
}
