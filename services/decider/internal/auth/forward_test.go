package auth

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// forwardee answers Reserve and AcquireHedge as the broker's owner would
// check them, directly (RouterService, EdgeService) and forwarded by a
// replica (ReplicaService, acting as the caller it names: Forwarded):
// Reserve checks the identity by the caller's rules ([Index.Identity] of
// the catalog the call was authenticated by) and answers
// with the caller it acted as ("id/role/via") in the refusal's code;
// AcquireHedge only answers.
type forwardee struct {
	switchboardv1.UnimplementedRouterServiceServer
	switchboardv1.UnimplementedEdgeServiceServer
	switchboardv1.UnimplementedReplicaServiceServer
	a *Authenticator
	// idx is the catalog's auth index, as a handler reads it from its views.
	idx func() *Index
}

func (f forwardee) Reserve(ctx context.Context, req *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error) {
	if _, err := f.idx().Identity(ctx, switchboardv1.RouterService_Reserve_FullMethodName, req.GetIdentity()); err != nil {
		return nil, err
	}
	p := FromContext(ctx)
	return &switchboardv1.ReserveResponse{Refusal: &switchboardv1.Refusal{Code: p.ID + "/" + p.Role + "/" + p.Via}}, nil
}

func (f forwardee) ForwardReserve(ctx context.Context, req *switchboardv1.ForwardReserveRequest) (*switchboardv1.ForwardReserveResponse, error) {
	ctx, err := f.a.Forwarded(ctx, req.GetCallerId(), switchboardv1.RouterService_Reserve_FullMethodName)
	if err != nil {
		return nil, err
	}
	resp, err := f.Reserve(ctx, req.GetRequest())
	return &switchboardv1.ForwardReserveResponse{Response: resp}, err
}

func (forwardee) AcquireHedge(context.Context, *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error) {
	return &switchboardv1.AcquireHedgeResponse{Granted: true}, nil
}

func (f forwardee) ForwardAcquireHedge(ctx context.Context, req *switchboardv1.ForwardAcquireHedgeRequest) (*switchboardv1.ForwardAcquireHedgeResponse, error) {
	ctx, err := f.a.Forwarded(ctx, req.GetCallerId(), switchboardv1.EdgeService_AcquireHedge_FullMethodName)
	if err != nil {
		return nil, err
	}
	resp, err := f.AcquireHedge(ctx, req.GetRequest())
	return &switchboardv1.ForwardAcquireHedgeResponse{Response: resp}, err
}

// forwardCatalog is testCatalog's callers and a replica, "peers", and a
// second tenant, globex.
func forwardCatalog(t *testing.T) *catalog.Catalog {
	t.Helper()
	y := "models:\n  - id: m\n    endpoints: [{provider: a, base_url: http://127.0.0.1:1/v1, price: {input: 1, output: 1}}]\n" +
		"tenants:\n  - {id: acme, api_keys_sha256: [" + catalog.HashKey("k") + "]}\n  - {id: globex, api_keys_sha256: [" + catalog.HashKey("g") + "]}\ncallers:\n" +
		"  - {id: edges, role: edge, tokens_sha256: [" + catalog.HashKey("edge-token") + "]}\n" +
		"  - {id: billing, role: service, tenants: [acme], tokens_sha256: [" + catalog.HashKey("billing-token") + "]}\n" +
		"  - {id: ops, role: operator}\n" +
		"  - {id: peers, role: replica, tokens_sha256: [" + catalog.HashKey("replica-token") + "]}\n" +
		"  - {id: peers-b, role: replica}\n"
	c, err := catalog.Parse([]byte(y))
	require.NoError(t, err)
	return c
}

// dialForward connects to the forwardee at addr with token.
func dialForward(t *testing.T, addr, token string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer.Token(token)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestReplicaActsOnlyForTheCallerItNames: the replica credential reserves
// or spends the hedge budget, through ReplicaService, only on behalf of
// the caller its request names, and then by that caller's own rules;
// naming nobody, an unknown caller, another replica or a caller whose role
// may not call the RPC is PermissionDenied.
func TestReplicaActsOnlyForTheCallerItNames(t *testing.T) {
	var cur atomic.Pointer[Index]
	a := New(reads(cur.Load))
	cur.Store(NewIndex(forwardCatalog(t)))
	replica := switchboardv1.NewReplicaServiceClient(dialForward(t, serveWith(t, a, forwardee{a: a, idx: cur.Load}), "replica-token"))
	byKey := &switchboardv1.Identity{ApiKeySha256: catalog.HashKey("k")}
	byTenant := func(tenant string) *switchboardv1.Identity { return &switchboardv1.Identity{TenantId: tenant} }
	for _, tc := range []struct {
		name   string
		caller string // the caller_id sent
		id     *switchboardv1.Identity
		want   codes.Code
		as     string // the caller acted as, when allowed
	}{
		{name: "naming nobody", id: byTenant("globex"), want: codes.PermissionDenied},
		{name: "naming nobody, own tenant", id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "unknown caller", caller: "nobody", id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "itself", caller: "peers", id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "another replica", caller: "peers-b", id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "an operator, who may not reserve", caller: "ops", id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "service, its tenant", caller: "billing", id: byTenant("acme"), as: "billing/service/peers"},
		{name: "service, another tenant", caller: "billing", id: byTenant("globex"), want: codes.PermissionDenied},
		{name: "edge, by key", caller: "edges", id: byKey, as: "edges/edge/peers"},
		{name: "edge, by bare tenant id", caller: "edges", id: byTenant("globex"), want: codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := replica.ForwardReserve(t.Context(), &switchboardv1.ForwardReserveRequest{
				CallerId: tc.caller, Request: &switchboardv1.ReserveRequest{Identity: tc.id},
			})
			if tc.want != codes.OK {
				require.Equal(t, tc.want, status.Code(err), "%v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.as, resp.GetResponse().GetRefusal().GetCode())
		})
	}

	// AcquireHedge: an edge's, never a service's, and never the replica's own.
	hedge := func(caller string) (*switchboardv1.ForwardAcquireHedgeResponse, error) {
		return replica.ForwardAcquireHedge(t.Context(), &switchboardv1.ForwardAcquireHedgeRequest{
			CallerId: caller, Request: &switchboardv1.AcquireHedgeRequest{RequestId: "h"},
		})
	}
	_, err := hedge("")
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = hedge("billing")
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a service may not spend the hedge budget: %v", err)
	resp, err := hedge("edges")
	require.NoError(t, err)
	require.True(t, resp.GetResponse().GetGranted())
}

// TestOnBehalfOfIsNotHonouredOnPublicRPCs: the public services know no
// forwarding. A replica credential may call none of their RPCs, whatever
// caller its metadata names, and another caller's metadata naming someone
// else changes nothing: it acts as itself.
func TestOnBehalfOfIsNotHonouredOnPublicRPCs(t *testing.T) {
	var cur atomic.Pointer[Index]
	a := New(reads(cur.Load))
	cur.Store(NewIndex(forwardCatalog(t)))
	addr := serveWith(t, a, forwardee{a: a, idx: cur.Load})
	const onBehalfOf = "switchboard-on-behalf-of" // the metadata replicas once named their caller in
	naming := func(caller string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), onBehalfOf, caller)
	}
	replica := switchboardv1.NewDeciderClient(dialForward(t, addr, "replica-token"))
	byKey := &switchboardv1.Identity{ApiKeySha256: catalog.HashKey("k")}
	_, err := replica.Reserve(naming("edges"), &switchboardv1.ReserveRequest{Identity: byKey})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a replica naming an edge: %v", err)
	_, err = replica.Reserve(naming("billing"), &switchboardv1.ReserveRequest{Identity: &switchboardv1.Identity{TenantId: "acme"}})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a replica naming a service: %v", err)
	_, err = replica.AcquireHedge(naming("edges"), &switchboardv1.AcquireHedgeRequest{RequestId: "h"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = replica.Reconcile(naming("edges"), &switchboardv1.ReconcileRequest{ReservationId: "r"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = replica.KeepReservations(naming("edges"), &switchboardv1.KeepReservationsRequest{ReservationIds: []string{"r"}})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = replica.SettleHedge(naming("edges"), &switchboardv1.SettleHedgeRequest{})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

	edge := switchboardv1.NewRouterServiceClient(dialForward(t, addr, "edge-token"))
	resp, err := edge.Reserve(naming("billing"), &switchboardv1.ReserveRequest{Identity: byKey})
	require.NoError(t, err)
	require.Equal(t, "edges/edge/", resp.GetRefusal().GetCode(), "an edge naming a service still acts as itself")
}

// TestReplicaServiceIsForReplicas: an edge's or a service's credential is
// refused on ReplicaService, whichever caller it names.
func TestReplicaServiceIsForReplicas(t *testing.T) {
	var cur atomic.Pointer[Index]
	a := New(reads(cur.Load))
	cur.Store(NewIndex(forwardCatalog(t)))
	addr := serveWith(t, a, forwardee{a: a, idx: cur.Load})
	for _, token := range []string{"edge-token", "billing-token"} {
		c := switchboardv1.NewReplicaServiceClient(dialForward(t, addr, token))
		_, err := c.ForwardReserve(t.Context(), &switchboardv1.ForwardReserveRequest{
			CallerId: "edges", Request: &switchboardv1.ReserveRequest{Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey("k")}},
		})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", token, err)
		_, err = c.ForwardAcquireHedge(t.Context(), &switchboardv1.ForwardAcquireHedgeRequest{CallerId: "edges", Request: &switchboardv1.AcquireHedgeRequest{RequestId: "h"}})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", token, err)
	}
}

// serveWith starts a plaintext gRPC server of impl with the authenticator
// on 127.0.0.1:0.
func serveWith(t *testing.T, a *Authenticator, impl forwardee) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(a.UnaryInterceptor()), grpc.ChainStreamInterceptor(a.StreamInterceptor()))
	switchboardv1.RegisterRouterServiceServer(s, impl)
	switchboardv1.RegisterEdgeServiceServer(s, impl)
	switchboardv1.RegisterReplicaServiceServer(s, impl)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}
