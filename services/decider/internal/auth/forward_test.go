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
// check them: Reserve checks the identity by the caller's rules (Identity)
// and answers with the caller it acted as ("id/role/via") in the refusal's
// code; AcquireHedge only answers.
type forwardee struct {
	switchboardv1.UnimplementedRouterServiceServer
	switchboardv1.UnimplementedEdgeServiceServer
	a *Authenticator
}

func (f forwardee) Reserve(ctx context.Context, req *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error) {
	if _, err := f.a.Identity(ctx, switchboardv1.RouterService_Reserve_FullMethodName, req.GetIdentity(), false); err != nil {
		return nil, err
	}
	p := FromContext(ctx)
	return &switchboardv1.ReserveResponse{Refusal: &switchboardv1.Refusal{Code: p.ID + "/" + p.Role + "/" + p.Via}}, nil
}

func (forwardee) AcquireHedge(context.Context, *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error) {
	return &switchboardv1.AcquireHedgeResponse{Granted: true}, nil
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

// TestReplicaActsOnlyForTheCallerItNames: the replica credential reserves
// or spends the hedge budget only on behalf of a caller it names, and then
// by that caller's own rules; naming nobody, an unknown caller, another
// replica or a caller whose role may not call the RPC is PermissionDenied.
func TestReplicaActsOnlyForTheCallerItNames(t *testing.T) {
	var cur atomic.Pointer[Index]
	a := New(cur.Load)
	cur.Store(NewIndex(forwardCatalog(t)))
	lis := serveWith(t, a, forwardee{a: a})
	conn, err := grpc.NewClient(lis, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer.Token("replica-token")))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	c := switchboardv1.NewRouterServiceClient(conn)
	edge := switchboardv1.NewEdgeServiceClient(conn)
	byKey := &switchboardv1.Identity{ApiKeySha256: catalog.HashKey("k")}
	byTenant := func(tenant string) *switchboardv1.Identity { return &switchboardv1.Identity{TenantId: tenant} }
	for _, tc := range []struct {
		name   string
		behalf []string // the OnBehalfOf values sent
		id     *switchboardv1.Identity
		want   codes.Code
		as     string // the caller acted as, when allowed
	}{
		{name: "naming nobody", id: byTenant("globex"), want: codes.PermissionDenied},
		{name: "naming nobody, own tenant", id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "empty name", behalf: []string{""}, id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "two names", behalf: []string{"billing", "edges"}, id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "unknown caller", behalf: []string{"nobody"}, id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "itself", behalf: []string{"peers"}, id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "another replica", behalf: []string{"peers-b"}, id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "an operator, who may not reserve", behalf: []string{"ops"}, id: byTenant("acme"), want: codes.PermissionDenied},
		{name: "service, its tenant", behalf: []string{"billing"}, id: byTenant("acme"), as: "billing/service/peers"},
		{name: "service, another tenant", behalf: []string{"billing"}, id: byTenant("globex"), want: codes.PermissionDenied},
		{name: "edge, by key", behalf: []string{"edges"}, id: byKey, as: "edges/edge/peers"},
		{name: "edge, by bare tenant id", behalf: []string{"edges"}, id: byTenant("globex"), want: codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			for _, b := range tc.behalf {
				ctx = metadata.AppendToOutgoingContext(ctx, OnBehalfOf, b)
			}
			resp, err := c.Reserve(ctx, &switchboardv1.ReserveRequest{Identity: tc.id})
			if tc.want != codes.OK {
				require.Equal(t, tc.want, status.Code(err), "%v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.as, resp.GetRefusal().GetCode())
		})
	}

	// AcquireHedge: an edge's, never a service's, and never the replica's own.
	_, err = edge.AcquireHedge(t.Context(), &switchboardv1.AcquireHedgeRequest{RequestId: "h"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = edge.AcquireHedge(metadata.AppendToOutgoingContext(t.Context(), OnBehalfOf, "billing"), &switchboardv1.AcquireHedgeRequest{RequestId: "h"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a service may not spend the hedge budget: %v", err)
	resp, err := edge.AcquireHedge(metadata.AppendToOutgoingContext(t.Context(), OnBehalfOf, "edges"), &switchboardv1.AcquireHedgeRequest{RequestId: "h"})
	require.NoError(t, err)
	require.True(t, resp.GetGranted())
}

// TestForwardInterceptorNamesTheCaller: a replica's forwarded call names
// the caller of the call it forwards, and one made with no caller in its
// context names nobody (the owner refuses it).
func TestForwardInterceptorNamesTheCaller(t *testing.T) {
	var got []string
	invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		got = md.Get(OnBehalfOf)
		return nil
	}
	in := ForwardInterceptor()
	require.NoError(t, in(NewContext(t.Context(), &Principal{ID: "edges", Role: catalog.RoleEdge}), "/m", nil, nil, nil, invoker))
	require.Equal(t, []string{"edges"}, got)
	require.NoError(t, in(t.Context(), "/m", nil, nil, nil, invoker))
	require.Empty(t, got)
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
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}
