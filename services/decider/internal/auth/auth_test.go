package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// whoami answers ListModels with the caller's id and role as the only
// model, and Report with the caller's role in an error.
type whoami struct {
	switchboardv1.UnimplementedRouterServiceServer
}

func (whoami) ListModels(ctx context.Context, _ *switchboardv1.ListModelsRequest) (*switchboardv1.ListModelsResponse, error) {
	p := FromContext(ctx)
	return &switchboardv1.ListModelsResponse{Models: []*switchboardv1.Model{{Id: p.ID + "/" + p.Role}}}, nil
}

func testCatalog(t *testing.T, tokens map[string]string) *catalog.Catalog {
	t.Helper()
	y := "models:\n  - id: m\n    endpoints: [{provider: a, base_url: http://127.0.0.1:1/v1, price: {input: 1, output: 1}}]\n" +
		"tenants:\n  - {id: acme, api_keys_sha256: [" + catalog.HashKey("k") + "]}\ncallers:\n" +
		"  - {id: edges, role: edge, tokens_sha256: [" + catalog.HashKey(tokens["edges"]) + "]}\n" +
		"  - {id: billing, role: service, tenants: [acme], tokens_sha256: [" + catalog.HashKey(tokens["billing"]) + "]}\n" +
		"  - {id: ops, role: operator}\n"
	c, err := catalog.Parse([]byte(y))
	require.NoError(t, err)
	return c
}

// serve starts a gRPC server with the authenticator on 127.0.0.1:0.
func serve(t *testing.T, a *Authenticator, creds credentials.TransportCredentials) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.UnaryInterceptor()), grpc.ChainStreamInterceptor(a.StreamInterceptor())}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	s := grpc.NewServer(opts...)
	switchboardv1.RegisterRouterServiceServer(s, whoami{})
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func whoAmI(t *testing.T, addr string, opts ...grpc.DialOption) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, opts...)
	require.NoError(t, err)
	defer conn.Close()
	resp, err := switchboardv1.NewRouterServiceClient(conn).ListModels(t.Context(), &switchboardv1.ListModelsRequest{})
	if err != nil {
		return "", err
	}
	return resp.GetModels()[0].GetId(), nil
}

func TestBearerTokens(t *testing.T) {
	var cur atomic.Pointer[Index]
	a := New(reads(cur.Load))
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	addr := serve(t, a, nil)
	_, err := whoAmI(t, addr, plain)
	require.Equal(t, codes.Unavailable, status.Code(err), "no catalog yet: %v", err)

	cur.Store(NewIndex(testCatalog(t, map[string]string{"edges": "edge-token", "billing": "billing-token"})))
	who, err := whoAmI(t, addr, plain, grpc.WithPerRPCCredentials(bearer.Token("edge-token")))
	require.NoError(t, err)
	require.Equal(t, "edges/edge", who)
	who, err = whoAmI(t, addr, plain, grpc.WithPerRPCCredentials(bearer.Token("billing-token")))
	require.NoError(t, err)
	require.Equal(t, "billing/service", who)

	_, err = whoAmI(t, addr, plain)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	require.True(t, bearer.CallerRefused(err), "marked as the caller's refusal, not a client's")
	_, err = whoAmI(t, addr, plain, grpc.WithPerRPCCredentials(bearer.Token("edge-token-")))
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	require.True(t, bearer.CallerRefused(err))
	require.NotContains(t, err.Error(), "edge-token-", "the token is never echoed")

	// The health service needs no credentials.
	conn, err := grpc.NewClient(addr, plain)
	require.NoError(t, err)
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)

	// A new catalog rotates tokens at once.
	cur.Store(NewIndex(testCatalog(t, map[string]string{"edges": "edge-token-2", "billing": "billing-token"})))
	_, err = whoAmI(t, addr, plain, grpc.WithPerRPCCredentials(bearer.Token("edge-token")))
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	who, err = whoAmI(t, addr, plain, grpc.WithPerRPCCredentials(bearer.Token("edge-token-2")))
	require.NoError(t, err)
	require.Equal(t, "edges/edge", who)
}

// pki is an in-test CA and what it signs.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &pki{cert: cert, key: key, pool: pool}
}

func (ca *pki) issue(t *testing.T, cn string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestClientCertificates(t *testing.T) {
	ca := newCA(t)
	var cur atomic.Pointer[Index]
	a := New(reads(cur.Load))
	cur.Store(NewIndex(testCatalog(t, map[string]string{"edges": "edge-token", "billing": "billing-token"})))
	server := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{ca.issue(t, "decider", x509.ExtKeyUsageServerAuth)},
		ClientCAs:    ca.pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13,
	})
	addr := serve(t, a, server)
	client := func(certs ...tls.Certificate) grpc.DialOption {
		return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.pool, Certificates: certs, MinVersion: tls.VersionTLS13}))
	}

	who, err := whoAmI(t, addr, client(ca.issue(t, "ops", x509.ExtKeyUsageClientAuth)))
	require.NoError(t, err)
	require.Equal(t, "ops/operator", who, "a verified certificate's CommonName names the caller")

	_, err = whoAmI(t, addr, client(ca.issue(t, "intruder", x509.ExtKeyUsageClientAuth)))
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)

	_, err = whoAmI(t, addr, client())
	require.Equal(t, codes.Unauthenticated, status.Code(err), "TLS without a client certificate or token: %v", err)

	// A token over TLS names its own caller.
	who, err = whoAmI(t, addr, client(), grpc.WithPerRPCCredentials(bearer.Token("billing-token")))
	require.NoError(t, err)
	require.Equal(t, "billing/service", who)
}

func TestPolicyTableCoversEveryRPC(t *testing.T) {
	for _, desc := range []grpc.ServiceDesc{
		switchboardv1.RouterService_ServiceDesc, switchboardv1.EdgeService_ServiceDesc, switchboardv1.OperatorService_ServiceDesc,
		switchboardv1.ReplicaService_ServiceDesc,
	} {
		for _, m := range desc.Methods {
			require.Contains(t, policy, "/"+desc.ServiceName+"/"+m.MethodName)
		}
		for _, s := range desc.Streams {
			require.Contains(t, policy, "/"+desc.ServiceName+"/"+s.StreamName)
		}
	}
	require.True(t, Allowed(catalog.RoleEdge, switchboardv1.EdgeService_Report_FullMethodName))
	require.False(t, Allowed(catalog.RoleService, switchboardv1.EdgeService_Report_FullMethodName))
	require.False(t, Allowed(catalog.RoleOperator, "/switchboard.v1.OperatorService/SomethingNew"), "an RPC not in the table is refused")
}

// TestOperatorServiceIsForOperators checks only operators start, stop and
// read switchback experiments, explain decisions and read the decider's
// state, and an operator no
// longer calls Decide.
func TestOperatorServiceIsForOperators(t *testing.T) {
	for _, m := range []string{
		switchboardv1.OperatorService_StartExperiment_FullMethodName,
		switchboardv1.OperatorService_StopExperiment_FullMethodName,
		switchboardv1.OperatorService_GetExperiment_FullMethodName,
		switchboardv1.OperatorService_Explain_FullMethodName,
		switchboardv1.OperatorService_GetEndpointStats_FullMethodName,
		switchboardv1.OperatorService_GetBroker_FullMethodName,
		switchboardv1.OperatorService_GetCatalog_FullMethodName,
	} {
		for _, role := range []string{catalog.RoleEdge, catalog.RoleService, catalog.RoleReplica, catalog.RoleOperator} {
			require.Equal(t, role == catalog.RoleOperator, Allowed(role, m), "%s by %s", m, role)
		}
	}
	require.False(t, Allowed(catalog.RoleOperator, switchboardv1.RouterService_Decide_FullMethodName), "an operator explains, it does not decide")
}

// TestReplicaCallsOnlyReplicaService: the replica role calls every RPC of
// ReplicaService and nothing of the public services; no other role calls
// ReplicaService.
func TestReplicaCallsOnlyReplicaService(t *testing.T) {
	for m := range policy {
		replicas := strings.HasPrefix(m, "/"+switchboardv1.ReplicaService_ServiceDesc.ServiceName+"/")
		for _, role := range []string{catalog.RoleEdge, catalog.RoleService, catalog.RoleOperator} {
			if replicas {
				require.False(t, Allowed(role, m), "%s by %s", m, role)
			}
		}
		require.Equal(t, replicas, Allowed(catalog.RoleReplica, m), "%s by a replica", m)
	}
}

func TestResolve(t *testing.T) {
	var cur atomic.Pointer[Index]
	_, err := cur.Load().Resolve(&switchboardv1.Identity{TenantId: "acme"})
	require.Equal(t, codes.Unavailable, status.Code(err), "no catalog yet")
	c, err := catalog.Parse([]byte("models:\n  - id: m\n    endpoints: [{provider: a, base_url: http://127.0.0.1:1/v1, price: {input: 1, output: 1}}]\n" +
		"partners: [{id: resellers}]\ntenants:\n  - {id: acme, partner: resellers, api_keys_sha256: [" + catalog.HashKey("k") + "]}\n"))
	require.NoError(t, err)
	cur.Store(NewIndex(c))
	keyA := catalog.HashKey("k")
	tests := []struct {
		name    string
		id      *switchboardv1.Identity
		tenant  string
		wantErr string
	}{
		{name: "key", id: &switchboardv1.Identity{ApiKeySha256: keyA}, tenant: "acme"},
		{name: "key upper-case hex", id: &switchboardv1.Identity{ApiKeySha256: strings.ToUpper(keyA)}, tenant: "acme"},
		{name: "unknown key", id: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey("nope")}, wantErr: "invalid API key"},
		{name: "tenant id", id: &switchboardv1.Identity{TenantId: "acme"}, tenant: "acme"},
		{name: "unknown tenant", id: &switchboardv1.Identity{TenantId: "evil"}, wantErr: "unknown tenant"},
		{name: "nothing", id: nil, wantErr: "no identity: send identity.api_key_sha256 (the SHA-256 of the client's API key) or identity.tenant_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := cur.Load().Resolve(tt.id)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Equal(t, codes.Unauthenticated, status.Code(err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.tenant, id.GetTenantId())
			require.Equal(t, "resellers", id.GetPartner(), "the partner comes from the catalog")
			require.Equal(t, switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE, id.GetWorkloadClass())
		})
	}
	id, err := cur.Load().Resolve(&switchboardv1.Identity{ApiKeySha256: keyA, Partner: "someone-else", TenantId: "globex"})
	require.NoError(t, err)
	require.Equal(t, "acme", id.GetTenantId(), "a key names its own tenant, whatever tenant_id says")
	require.Equal(t, "resellers", id.GetPartner())
}

// Only a service the catalog trusts, an edge and the decider's own work
// move shared provider state; a replica forwarding for a service carries
// the service's trust, not its own.
func TestSharesProviderState(t *testing.T) {
	y := "models:\n  - id: m\n    endpoints: [{provider: a, base_url: http://127.0.0.1:1/v1, price: {input: 1, output: 1}}]\n" +
		"tenants:\n  - {id: acme, api_keys_sha256: [" + catalog.HashKey("k") + "]}\ncallers:\n" +
		"  - {id: billing, role: service, tenants: [acme]}\n" +
		"  - {id: trusted, role: service, tenants: [acme], shared_provider_state: true}\n"
	c, err := catalog.Parse([]byte(y))
	require.NoError(t, err)
	var cur atomic.Pointer[Index]
	a := New(reads(cur.Load))
	cur.Store(NewIndex(c))
	idx := a.index(t.Context())
	tests := []struct {
		name string
		p    *Principal
		want bool
	}{
		{name: "the decider's own work", p: nil, want: true},
		{name: "an edge", p: &Principal{ID: "edges", Role: catalog.RoleEdge}, want: true},
		{name: "a service", p: idx.byID["billing"], want: false},
		{name: "a trusted service", p: idx.byID["trusted"], want: true},
		{name: "a service forwarded by a replica", p: &Principal{ID: "billing", Role: catalog.RoleService, Tenants: []string{"acme"}, Via: "deciders"}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.p != nil {
				ctx = NewContext(ctx, tt.p)
			}
			require.Equal(t, tt.want, SharesProviderState(ctx))
		})
	}
}

// reads is a pin (New) that reads load on each call and pins nothing: the
// tests here swap the index under a running server themselves.
func reads(load func() *Index) func(context.Context) (context.Context, *Index) {
	return func(ctx context.Context) (context.Context, *Index) { return ctx, load() }
}
