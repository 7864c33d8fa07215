package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// The callers of the security tests: an edge, a service allowed for acme
// only, an operator and a replica; two tenants, acme and globex.
const (
	secEdgeToken     = "sec-edge-token"
	secServiceToken  = "sec-service-token"
	secOperatorToken = "sec-operator-token"
	secReplicaToken  = "sec-replica-token"
	secAcmeKey       = "sk-acme-key"
	secGlobexKey     = "sk-globex-key"
	secModel         = "vendor/model"
	secEndpoint      = "alpha/" + secModel
	secCatalogKey    = "/switchboard/v1/catalog" // where the decider stores and watches its catalog
)

func secCatalog(edgeTokens ...string) string {
	if len(edgeTokens) == 0 {
		edgeTokens = []string{secEdgeToken}
	}
	edges := ""
	for i, tk := range edgeTokens {
		if i > 0 {
			edges += ", "
		}
		edges += catalog.HashKey(tk)
	}
	return fmt.Sprintf(`
models:
  - id: %s
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.2, output: 0.8}}
tenants:
  - id: acme
    api_keys_sha256: [%s]
    limits: [{unit: requests, per: day, capacity: 100}]
  - id: globex
    api_keys_sha256: [%s]
    limits: [{unit: requests, per: day, capacity: 100}]
callers:
  - {id: sec-edges, role: edge, tokens_sha256: [%s]}
  - {id: sec-billing, role: service, tenants: [acme], tokens_sha256: [%s]}
  - {id: sec-ops, role: operator, tokens_sha256: [%s]}
  - {id: sec-replicas, role: replica, tokens_sha256: [%s]}
`, secModel, catalog.HashKey(secAcmeKey), catalog.HashKey(secGlobexKey), edges,
		catalog.HashKey(secServiceToken), catalog.HashKey(secOperatorToken), catalog.HashKey(secReplicaToken))
}

// startSecDecider starts a decider (embedded etcd, real gRPC on loopback)
// with the security catalog and a hedge budget of $5.
func startSecDecider(t *testing.T) *deciderapp.Decider {
	t.Helper()
	return startSecStack(t).decider
}

// startSecStack is startSecDecider's stack, to add an edge to.
func startSecStack(t *testing.T) *stack {
	t.Helper()
	return startStack(t, stackOptions{catalog: func(func(string) string) string { return secCatalog() }, noEdge: true,
		tune: func(c *deciderapp.Config) {
			c.ID, c.HedgeBudgetUSD, c.TokenFile = "sec", 5, tokenFile(t, secReplicaToken)
			// Unpaced: the whole day's budget at any hour, so what the tests
			// grant does not depend on the time of day they run at.
			c.HedgeBudgetBurst = 24 * time.Hour
		}})
}

// dialAs returns a client of addr calling with token; "" sends no credentials.
func dialAs(t *testing.T, addr, token string, onBehalfOf ...string) switchboardv1.DeciderClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer.Token(token)))
	}
	if len(onBehalfOf) > 0 && onBehalfOf[0] != "" {
		// Every call names the caller in the metadata replicas once
		// forwarded with, which no RPC honours now.
		who := onBehalfOf[0]
		opts = append(opts,
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
				return inv(metadata.AppendToOutgoingContext(ctx, "switchboard-on-behalf-of", who), m, req, reply, cc, o...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, m string, s grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
				return s(metadata.AppendToOutgoingContext(ctx, "switchboard-on-behalf-of", who), desc, cc, m, o...)
			}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return switchboardv1.NewDeciderClient(conn)
}

func byTenant(tenant string) *switchboardv1.Identity {
	return &switchboardv1.Identity{TenantId: tenant}
}

func byKey(key string) *switchboardv1.Identity {
	return &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(key)}
}

func decideReserve(id *switchboardv1.Identity) *switchboardv1.DecideRequest {
	return &switchboardv1.DecideRequest{Identity: id, Model: secModel, Reserve: true,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 100, MaxOutputTokens: 10}}
}

func reserveReq(id *switchboardv1.Identity) *switchboardv1.ReserveRequest {
	return &switchboardv1.ReserveRequest{Identity: id, Model: secModel, EndpointId: secEndpoint,
		Demand: &switchboardv1.Demand{InputTokens: 100, OutputTokens: 10, Requests: 1}, Ttl: durationpb.New(15 * time.Minute)}
}

// requestsLeft is what tenant's requests-per-day limit can still admit.
func requestsLeft(t *testing.T, d *deciderapp.Decider, tenant string) float64 {
	t.Helper()
	for _, l := range d.TenantLimits(tenant) {
		if l.Unit == "requests" {
			return l.Remaining
		}
	}
	t.Fatalf("tenant %s has no requests limit", tenant)
	return 0
}

// report opens a Report stream, says hello and sends reports, and returns
// the first answer's error (nil when the decider accepted the stream).
func report(ctx context.Context, c switchboardv1.DeciderClient, reports ...*switchboardv1.CallReport) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := c.Report(ctx)
	if err != nil {
		return err
	}
	// A refused stream may already be closed: a send error shows on Recv.
	_ = st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: "attacker", Region: "local"}}})
	_ = st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{Reports: reports}}})
	_, err = st.Recv()
	return err
}

// TestAttacksWithoutCredentialsAreRefused repeats, from outside and with
// no credentials, each way a network neighbour acted as a tenant, an edge
// or a replica: every one is refused as Unauthenticated, and nothing
// happened (no quota spent, no hedge budget spent, no report taken).
func TestAttacksWithoutCredentialsAreRefused(t *testing.T) {
	d := startSecDecider(t)
	anon := dialAs(t, d.Addr(), "")
	forged := dialAs(t, d.Addr(), "a-guessed-token")
	ctx := t.Context()
	before := requestsLeft(t, d, "globex")

	for name, c := range map[string]switchboardv1.DeciderClient{"no credentials": anon, "unknown token": forged} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Decide(ctx, decideReserve(byTenant("globex")))
			require.Equal(t, codes.Unauthenticated, status.Code(err), "Decide as another tenant with reserve: %v", err)
			_, err = c.Reserve(ctx, reserveReq(byTenant("globex")))
			require.Equal(t, codes.Unauthenticated, status.Code(err), "Reserve as another tenant: %v", err)
			_, err = c.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: byTenant("globex")})
			require.Equal(t, codes.Unauthenticated, status.Code(err), "ListActivity: %v", err)
			_, err = c.GetActivity(ctx, &switchboardv1.GetActivityRequest{Identity: byTenant("globex"), Id: "gen-1"})
			require.Equal(t, codes.Unauthenticated, status.Code(err), "GetActivity: %v", err)
			_, err = c.Reconcile(ctx, &switchboardv1.ReconcileRequest{ReservationId: "res-1"})
			require.Equal(t, codes.Unauthenticated, status.Code(err), "Reconcile: %v", err)
			for range 3 {
				_, err = c.AcquireHedge(ctx, &switchboardv1.AcquireHedgeRequest{RequestId: "hedge", EstimatedCostUsd: 2.5})
				require.Equal(t, codes.Unauthenticated, status.Code(err), "AcquireHedge: %v", err)
			}
			err = report(ctx, c, &switchboardv1.CallReport{RequestId: "r1", EndpointId: secEndpoint, Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED})
			require.Equal(t, codes.Unauthenticated, status.Code(err), "a forged 429 on the Report stream: %v", err)
		})
	}
	require.Equal(t, before, requestsLeft(t, d, "globex"), "no request of globex was admitted")
	spent, _, granted, _ := d.HedgeBudget()
	require.Zero(t, spent)
	require.Zero(t, granted)
	require.Zero(t, d.ReportsReceived())

	// The same calls with the right credentials do happen: what the
	// assertions above count can move.
	edge := dialAs(t, d.Addr(), secEdgeToken)
	resp, err := edge.Decide(ctx, decideReserve(byKey(secGlobexKey)))
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetReservation().GetReservationId())
	require.Equal(t, before-1, requestsLeft(t, d, "globex"))
	h, err := edge.AcquireHedge(ctx, &switchboardv1.AcquireHedgeRequest{RequestId: "hedge", EstimatedCostUsd: 2.5})
	require.NoError(t, err)
	require.True(t, h.GetGranted())
	require.NoError(t, report(ctx, edge, &switchboardv1.CallReport{RequestId: "r1", EndpointId: secEndpoint, Outcome: switchboardv1.Outcome_OUTCOME_OK}))
	require.Equal(t, int64(1), d.ReportsReceived())
}

// TestAttacksOutsideTheRoleAreRefused: authenticated callers acting
// outside their role or tenants get PermissionDenied.
func TestAttacksOutsideTheRoleAreRefused(t *testing.T) {
	d := startSecDecider(t)
	ctx := t.Context()
	edge := dialAs(t, d.Addr(), secEdgeToken)
	service := dialAs(t, d.Addr(), secServiceToken)
	operator := dialAs(t, d.Addr(), secOperatorToken)
	before := requestsLeft(t, d, "globex")

	// An edge acts only for a client it authenticated by key: a bare
	// tenant_id is refused.
	_, err := edge.Decide(ctx, decideReserve(byTenant("globex")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = edge.Reserve(ctx, reserveReq(byTenant("globex")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = edge.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: byTenant("globex")})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

	// A service acts for its own tenants only, by tenant id or by key.
	for _, id := range []*switchboardv1.Identity{byTenant("globex"), byKey(secGlobexKey)} {
		_, err = service.Decide(ctx, decideReserve(id))
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
		_, err = service.Reserve(ctx, reserveReq(id))
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
		_, err = service.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: id})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
		_, err = service.GetActivity(ctx, &switchboardv1.GetActivityRequest{Identity: id, Id: "gen-1"})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	}
	// Another tenant's reservation cannot be released by a service.
	res, err := edge.Reserve(ctx, reserveReq(byKey(secGlobexKey)))
	require.NoError(t, err)
	require.True(t, res.GetAdmitted())
	_, err = service.Reconcile(ctx, &switchboardv1.ReconcileRequest{ReservationId: res.GetReservation().GetReservationId()})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = service.KeepReservations(ctx, &switchboardv1.KeepReservationsRequest{ReservationIds: []string{res.GetReservation().GetReservationId()}})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Equal(t, before-1, requestsLeft(t, d, "globex"), "only the edge's reservation was admitted, and it is still held")

	// Only edges spend the hedge budget and report calls.
	for _, c := range []switchboardv1.DeciderClient{service, operator} {
		for range 3 {
			_, err = c.AcquireHedge(ctx, &switchboardv1.AcquireHedgeRequest{RequestId: "hedge", EstimatedCostUsd: 2.5})
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
		}
		err = report(ctx, c, &switchboardv1.CallReport{RequestId: "r1", EndpointId: secEndpoint, Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	}
	_, _, granted, _ := d.HedgeBudget()
	require.Zero(t, granted)
	require.Zero(t, d.ReportsReceived())

	// An operator reads and explains, but does not route or reserve.
	_, err = operator.Decide(ctx, decideReserve(byTenant("globex")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = operator.Reserve(ctx, reserveReq(byTenant("globex")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	explained, err := operator.Explain(ctx, &switchboardv1.ExplainRequest{Identity: byTenant("globex"), Model: secModel,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 100, MaxOutputTokens: 10}})
	require.NoError(t, err)
	require.Equal(t, "alpha", explained.GetEndpoint().GetProvider())
	require.Equal(t, "globex", explained.GetIdentity().GetTenantId())
	require.Equal(t, before-1, requestsLeft(t, d, "globex"), "an explanation reserves nothing")
	// Explaining is an operator's: an edge or a service may not, even for
	// a client or tenant of its own.
	for _, c := range []struct {
		who string
		c   switchboardv1.DeciderClient
		id  *switchboardv1.Identity
	}{{"edge", edge, byKey(secAcmeKey)}, {"service", service, byTenant("acme")}} {
		_, err = c.c.Explain(ctx, &switchboardv1.ExplainRequest{Identity: c.id, Model: secModel})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", c.who, err)
	}
	// Decide's dry_run is no longer served, to anyone.
	dry := decideReserve(byKey(secAcmeKey))
	dry.DryRun = true
	_, err = edge.Decide(ctx, dry)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
}

// TestReplicaForwardsOnlyForTheCallerItNames: a replica forwards through
// ReplicaService, naming the caller in the request; the named caller's
// rules and tenants apply, and the replica credential alone acts for
// nobody. A caller cannot borrow another caller's rights: no credential
// but a replica's reaches ReplicaService, and the forwarding metadata
// replicas once sent on the public RPCs is honoured from nobody.
func TestReplicaForwardsOnlyForTheCallerItNames(t *testing.T) {
	d := startSecDecider(t)
	onBehalf := func(who string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "switchboard-on-behalf-of", who)
	}
	forward := func(c switchboardv1.DeciderClient, caller string, req *switchboardv1.ReserveRequest) (*switchboardv1.ReserveResponse, error) {
		resp, err := c.ForwardReserve(t.Context(), &switchboardv1.ForwardReserveRequest{CallerId: caller, Request: req})
		return resp.GetResponse(), err
	}
	service := dialAs(t, d.Addr(), secServiceToken)
	_, err := service.AcquireHedge(onBehalf("sec-edges"), &switchboardv1.AcquireHedgeRequest{RequestId: "h", EstimatedCostUsd: 1})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a service naming the edge is still a service: %v", err)
	edge := dialAs(t, d.Addr(), secEdgeToken)
	operator := dialAs(t, d.Addr(), secOperatorToken)
	for _, c := range []switchboardv1.DeciderClient{edge, service, operator} {
		_, err = forward(c, "sec-billing", reserveReq(byTenant("acme")))
		require.Equal(t, codes.PermissionDenied, status.Code(err), "only a replica forwards: %v", err)
		_, err = c.ForwardAcquireHedge(t.Context(), &switchboardv1.ForwardAcquireHedgeRequest{CallerId: "sec-edges",
			Request: &switchboardv1.AcquireHedgeRequest{RequestId: "h", EstimatedCostUsd: 1}})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "only a replica forwards: %v", err)
	}

	replica := dialAs(t, d.Addr(), secReplicaToken)
	before := requestsLeft(t, d, "globex")
	// The public RPCs are not the replica's, whoever it names.
	_, err = replica.Reserve(onBehalf("sec-edges"), reserveReq(byKey(secGlobexKey)))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a replica on RouterService: %v", err)
	_, err = replica.Reserve(onBehalf("sec-billing"), reserveReq(byTenant("acme")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a replica on RouterService: %v", err)
	_, err = replica.AcquireHedge(onBehalf("sec-edges"), &switchboardv1.AcquireHedgeRequest{RequestId: "h", EstimatedCostUsd: 1})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a replica on EdgeService: %v", err)

	_, err = forward(replica, "sec-billing", reserveReq(byTenant("globex")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "forwarded for the service: its tenants apply: %v", err)
	r, err := forward(replica, "sec-billing", reserveReq(byTenant("acme")))
	require.NoError(t, err)
	require.True(t, r.GetAdmitted())
	_, err = forward(replica, "nobody", reserveReq(byTenant("acme")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	// The replica credential acts for no tenant of its own: naming nobody,
	// or itself, it reserves for nobody, even by a tenant id.
	_, err = forward(replica, "", reserveReq(byTenant("globex")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a replica naming no caller: %v", err)
	_, err = forward(replica, "sec-replicas", reserveReq(byTenant("globex")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a replica naming a replica: %v", err)
	require.Equal(t, before, requestsLeft(t, d, "globex"), "nothing was reserved")
	// Forwarded for the edge, the edge's rules: by key only.
	_, err = forward(replica, "sec-edges", reserveReq(byTenant("globex")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "forwarded for the edge, a bare tenant id: %v", err)
	r, err = forward(replica, "sec-edges", reserveReq(byKey(secGlobexKey)))
	require.NoError(t, err)
	require.True(t, r.GetAdmitted())
	require.Equal(t, before-1, requestsLeft(t, d, "globex"))
	_, err = forward(replica, "sec-edges", nil)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "a forwarded call without its request: %v", err)
	h, err := replica.ForwardAcquireHedge(t.Context(), &switchboardv1.ForwardAcquireHedgeRequest{CallerId: "sec-edges",
		Request: &switchboardv1.AcquireHedgeRequest{RequestId: "h", EstimatedCostUsd: 1}})
	require.NoError(t, err)
	require.True(t, h.GetResponse().GetGranted(), "forwarded for the edge, the hedge budget is the edge's")
	_, err = replica.ForwardAcquireHedge(t.Context(), &switchboardv1.ForwardAcquireHedgeRequest{CallerId: "sec-billing",
		Request: &switchboardv1.AcquireHedgeRequest{RequestId: "h2", EstimatedCostUsd: 1}})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a service does not spend the hedge budget: %v", err)
	_, err = replica.Decide(t.Context(), decideReserve(byTenant("globex")))
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a replica does not route: %v", err)
}

// rpcCall is one RPC of the matrix, called for the identity or the
// reservation of the given tenant; it returns the call's error.
type rpcCall func(t *testing.T, c switchboardv1.DeciderClient, v variant) error

// variant is which identity a call carries: a key hash or a bare tenant
// id, of the service's own tenant (acme) or another (globex). Calls about a
// reservation use the tenant's reservation instead.
type variant struct {
	name   string
	tenant string
	key    bool
}

func (v variant) identity() *switchboardv1.Identity {
	if v.key {
		if v.tenant == "acme" {
			return byKey(secAcmeKey)
		}
		return byKey(secGlobexKey)
	}
	return byTenant(v.tenant)
}

var variants = []variant{
	{"own key", "acme", true}, {"other key", "globex", true},
	{"own tenant_id", "acme", false}, {"other tenant_id", "globex", false},
}

// rule is what the policy promises a role for one RPC.
type rule int

const (
	unauth  rule = iota // no credentials: Unauthenticated, whatever the call
	denied              // PermissionDenied, whatever the call
	anyone              // allowed for every tenant
	keyOnly             // allowed with a key hash, PermissionDenied with a bare tenant id
	ownOnly             // allowed for acme, PermissionDenied for globex
)

// want returns the code a refused call gets, or OK when the call must pass
// the policy (it may still fail later, e.g. NotFound, for other reasons).
func (r rule) want(v variant) codes.Code {
	switch r {
	case unauth:
		return codes.Unauthenticated
	case denied:
		return codes.PermissionDenied
	case keyOnly:
		if !v.key {
			return codes.PermissionDenied
		}
	case ownOnly:
		if v.tenant != "acme" {
			return codes.PermissionDenied
		}
	}
	return codes.OK
}

// TestRoleRPCTenantMatrix calls every RPC as every role, for its own
// tenant and another, by key and by tenant id, against a real decider over
// a real socket, and checks each answer against the policy.
func TestRoleRPCTenantMatrix(t *testing.T) {
	d := startSecDecider(t)
	edge := dialAs(t, d.Addr(), secEdgeToken)
	// reservation makes a fresh reservation of tenant, as the edge.
	reservation := func(t *testing.T, tenant string) string {
		key := secAcmeKey
		if tenant == "globex" {
			key = secGlobexKey
		}
		r, err := edge.Reserve(t.Context(), reserveReq(byKey(key)))
		require.NoError(t, err)
		require.True(t, r.GetAdmitted())
		return r.GetReservation().GetReservationId()
	}
	rpcs := map[string]rpcCall{
		"Decide": func(t *testing.T, c switchboardv1.DeciderClient, v variant) error {
			_, err := c.Decide(t.Context(), &switchboardv1.DecideRequest{Identity: v.identity(), Model: secModel})
			return err
		},
		"Explain": func(t *testing.T, c switchboardv1.DeciderClient, v variant) error {
			_, err := c.Explain(t.Context(), &switchboardv1.ExplainRequest{Identity: v.identity(), Model: secModel})
			return err
		},
		"Reserve": func(t *testing.T, c switchboardv1.DeciderClient, v variant) error {
			_, err := c.Reserve(t.Context(), reserveReq(v.identity()))
			return err
		},
		"ListModels": func(t *testing.T, c switchboardv1.DeciderClient, v variant) error {
			_, err := c.ListModels(t.Context(), &switchboardv1.ListModelsRequest{Identity: v.identity()})
			return err
		},
		"ListActivity": func(t *testing.T, c switchboardv1.DeciderClient, v variant) error {
			_, err := c.ListActivity(t.Context(), &switchboardv1.ListActivityRequest{Identity: v.identity()})
			return err
		},
		"GetActivity": func(t *testing.T, c switchboardv1.DeciderClient, v variant) error {
			_, err := c.GetActivity(t.Context(), &switchboardv1.GetActivityRequest{Identity: v.identity(), Id: "gen-none"})
			return err
		},
		"Reconcile": func(t *testing.T, c switchboardv1.DeciderClient, v variant) error {
			_, err := c.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: reservation(t, v.tenant)})
			return err
		},
		"KeepReservations": func(t *testing.T, c switchboardv1.DeciderClient, v variant) error {
			_, err := c.KeepReservations(t.Context(), &switchboardv1.KeepReservationsRequest{ReservationIds: []string{reservation(t, v.tenant)}})
			return err
		},
		"Report": func(t *testing.T, c switchboardv1.DeciderClient, _ variant) error {
			return report(t.Context(), c)
		},
		"AcquireHedge": func(t *testing.T, c switchboardv1.DeciderClient, v variant) error {
			_, err := c.AcquireHedge(t.Context(), &switchboardv1.AcquireHedgeRequest{RequestId: "matrix-" + v.name, EstimatedCostUsd: 0.01})
			return err
		},
		"SettleHedge": func(t *testing.T, c switchboardv1.DeciderClient, v variant) error {
			_, err := c.SettleHedge(t.Context(), &switchboardv1.SettleHedgeRequest{Settlements: []*switchboardv1.HedgeSettlement{{RequestId: "matrix-" + v.name}}})
			return err
		},
	}
	// The policy, as callers are promised it.
	roles := []struct {
		name  string
		token string
		rules map[string]rule
	}{
		{"none", "", map[string]rule{
			"Decide": unauth, "Explain": unauth, "Reserve": unauth, "ListModels": unauth, "ListActivity": unauth, "GetActivity": unauth,
			"Reconcile": unauth, "KeepReservations": unauth, "Report": unauth, "AcquireHedge": unauth, "SettleHedge": unauth,
		}},
		{"edge", secEdgeToken, map[string]rule{
			"Decide": keyOnly, "Explain": denied, "Reserve": keyOnly, "ListModels": keyOnly, "ListActivity": keyOnly, "GetActivity": keyOnly,
			"Reconcile": anyone, "KeepReservations": anyone, "Report": anyone, "AcquireHedge": anyone, "SettleHedge": anyone,
		}},
		{"service", secServiceToken, map[string]rule{
			"Decide": ownOnly, "Explain": denied, "Reserve": ownOnly, "ListModels": ownOnly, "ListActivity": ownOnly, "GetActivity": ownOnly,
			"Reconcile": ownOnly, "KeepReservations": ownOnly,
			"Report": denied, "AcquireHedge": denied, "SettleHedge": denied,
		}},
		{"operator", secOperatorToken, map[string]rule{
			"Decide": denied, "Explain": anyone, "Reserve": denied, "ListModels": anyone, "ListActivity": anyone, "GetActivity": anyone,
			"Reconcile": denied, "KeepReservations": denied, "Report": denied, "AcquireHedge": denied, "SettleHedge": denied,
		}},
		// A replica calls none of the public RPCs (it forwards through
		// ReplicaService: TestReplicaForwardsOnlyForTheCallerItNames),
		// whoever the forwarding metadata it once sent names.
		{"replica", secReplicaToken, map[string]rule{
			"Decide": denied, "Explain": denied, "Reserve": denied, "ListModels": denied, "ListActivity": denied, "GetActivity": denied,
			"Reconcile": denied, "KeepReservations": denied, "Report": denied, "AcquireHedge": denied, "SettleHedge": denied,
		}},
		{"replica naming the edge", secReplicaToken, map[string]rule{
			"Decide": denied, "Explain": denied, "Reserve": denied, "ListModels": denied, "ListActivity": denied, "GetActivity": denied,
			"Reconcile": denied, "KeepReservations": denied, "Report": denied, "AcquireHedge": denied, "SettleHedge": denied,
		}},
		{"replica naming the service", secReplicaToken, map[string]rule{
			"Decide": denied, "Explain": denied, "Reserve": denied, "ListModels": denied, "ListActivity": denied, "GetActivity": denied,
			"Reconcile": denied, "KeepReservations": denied, "Report": denied, "AcquireHedge": denied, "SettleHedge": denied,
		}},
	}
	forWhom := map[string]string{"replica naming the edge": "sec-edges", "replica naming the service": "sec-billing"}
	for _, role := range roles {
		c := dialAs(t, d.Addr(), role.token, forWhom[role.name])
		require.Len(t, role.rules, len(rpcs), "role %s: a rule for every RPC", role.name)
		for rpc, call := range rpcs {
			for _, v := range variants {
				t.Run(role.name+"/"+rpc+"/"+v.name, func(t *testing.T) {
					want := role.rules[rpc].want(v)
					err := call(t, c, v)
					got := status.Code(err)
					if want != codes.OK {
						require.Equal(t, want, got, "%v", err)
						return
					}
					if errors.Is(err, io.EOF) {
						return
					}
					require.NotContains(t, []codes.Code{codes.Unauthenticated, codes.PermissionDenied}, got, "%v", err)
				})
			}
		}
	}
}

// TestTokenRotationWithoutRestart: a catalog stored in etcd that adds a new
// edge token and removes the old one applies to the next calls, with no
// restart: the new token works, the old one is Unauthenticated.
func TestTokenRotationWithoutRestart(t *testing.T) {
	d := startSecDecider(t)
	const newToken = "sec-edge-token-2"
	oldC, newC := dialAs(t, d.Addr(), secEdgeToken), dialAs(t, d.Addr(), newToken)
	list := func(c switchboardv1.DeciderClient) error {
		_, err := c.ListModels(t.Context(), &switchboardv1.ListModelsRequest{Identity: byKey(secAcmeKey)})
		return err
	}
	require.NoError(t, list(oldC))
	require.Equal(t, codes.Unauthenticated, status.Code(list(newC)))

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{d.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	// Both tokens for a while, as a rotation goes...
	_, err = cli.Put(t.Context(), secCatalogKey, secCatalog(secEdgeToken, newToken))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return list(newC) == nil }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, list(oldC))
	// ...then the old one is removed.
	_, err = cli.Put(t.Context(), secCatalogKey, secCatalog(newToken))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return status.Code(list(oldC)) == codes.Unauthenticated }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, list(newC))
}

// TestEdgeTokenFileRotation: the edge re-reads its token file, so a token
// rotated on disk (and in the catalog) keeps the edge serving without a
// restart.
func TestEdgeTokenFileRotation(t *testing.T) {
	s := startSecStack(t)
	d := s.decider
	p := tokenFile(t, secEdgeToken)
	e := s.addEdge(t, d.Addr(), "--decider-token-file="+p)
	models := func() int {
		return getModels(t, e.URL(), secAcmeKey)
	}
	require.Equal(t, 200, models())

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{d.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	const newToken = "sec-edge-token-2"
	_, err = cli.Put(t.Context(), secCatalogKey, secCatalog(newToken))
	require.NoError(t, err)
	// The catalog no longer knows the edge's token: the decider refuses the
	// edge, which is the edge's fault, not the client's: 503, not 401, and
	// the client's key is not remembered as invalid.
	require.Eventually(t, func() bool { return models() != 200 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusServiceUnavailable, models())
	chat := func() int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL()+"/chat/completions",
			strings.NewReader(`{"model":"`+secModel+`","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secAcmeKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusServiceUnavailable, chat())
	require.Equal(t, http.StatusServiceUnavailable, chat(), "still the decider's refusal, not a key remembered as invalid")
	// ...until the new token is written to its file.
	require.NoError(t, os.WriteFile(p+".new", []byte(newToken), 0o600))
	require.NoError(t, os.Rename(p+".new", p))
	require.Eventually(t, func() bool { return models() == 200 }, 10*time.Second, 50*time.Millisecond)
	require.NotEqual(t, http.StatusUnauthorized, chat(), "the client's key was never refused")
}

// getModels asks an edge for the model list with an API key and returns the HTTP status.
func getModels(t *testing.T, base, key string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/models", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}
