package server_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/activity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/experiment"
	"github.com/switchboard-ai/switchboard/services/decider/internal/gate"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/report"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/server"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/etcdtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	acmeKey   = "sk-acme"
	globexKey = "sk-globex"
	model     = "vendor/model"
)

var testCatalog = `
models:
  - id: ` + model + `
    aliases: [model-alias]
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.2, output: 0.8}}
      - {provider: beta, base_url: http://127.0.0.1:2/v1, price: {input: 0.3, output: 1.0}}
tenants:
  - {id: acme, api_keys_sha256: [` + catalog.HashKey(acmeKey) + `]}
  - {id: globex, api_keys_sha256: [` + catalog.HashKey(globexKey) + `]}
`

func logger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fixture is a Server on an in-process gRPC connection, with its parts.
type fixture struct {
	srv    *server.Server
	client switchboardv1.DeciderClient
	parts
	caller atomic.Pointer[auth.Principal]
}

// parts are a Server's dependencies as the decider builds them, for a
// catalog: admission and the experiments on embedded etcd, the activity
// log in a temporary directory.
type parts struct {
	server.Deps
	router *routing.Router
	act    *activity.Store
	adm    *admission.Admission
	broker *broker.Broker
	budget *hedge.Budget
}

// build builds the parts of a Server for catalog yaml.
func build(t testing.TB, yaml string) parts {
	t.Helper()
	st, oc := stats.New(stats.Config{}), outcomes.New(outcomes.Config{})
	v, err := gate.New(routing.Sources{Stats: st, Outcomes: oc}).Prepare([]byte(yaml))
	require.NoError(t, err)
	cur := gate.NewCurrent(v)
	authn := auth.New(cur.PinAuth)
	p := parts{budget: hedge.New(1, nil)}
	p.broker, err = broker.New(v.Broker, broker.Options{})
	require.NoError(t, err)
	etcd := etcdtest.Connect(t, etcdtest.Start(t))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p.adm, err = admission.Start(ctx, admission.Options{Broker: p.broker, Client: etcd.Client(), Addr: "bufnet", Logger: logger()})
	require.NoError(t, err)
	t.Cleanup(p.adm.Close)
	p.act, err = activity.Open(activity.Options{Path: filepath.Join(t.TempDir(), "activity.db"), Logger: logger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.act.Close() })
	p.router = routing.New(nil, routing.Options{Catalog: cur.Routing, Stats: st, Outcomes: oc, Exploration: -1})
	policy := admission.Policy{Admission: p.adm, Budget: p.budget, Contracts: authn}
	hub := report.NewHub(report.Options{
		Logger: logger(), Sink: func(*switchboardv1.EdgeHello, []*switchboardv1.CallReport) {},
		Activity:     func(context.Context, *switchboardv1.EdgeHello, []*switchboardv1.ActivityRecord) error { return nil },
		Reservations: server.Reservations(policy),
	})
	p.Deps = server.Deps{
		Router: p.router, Catalog: cur, Auth: authn, Hub: hub, Policy: policy, Activity: p.act,
		Experiments: experiment.New(experiment.Options{Client: etcd.Client(), Replica: "r1", Logger: logger(), Limits: experiment.Limits{MinBlock: time.Second}}),
	}
	return p
}

// start serves a Server of testCatalog over bufconn, its Deps changed by
// with.
func start(t testing.TB, with ...func(*server.Deps)) *fixture {
	t.Helper()
	f := &fixture{parts: build(t, testCatalog)}
	for _, w := range with {
		w(&f.Deps)
	}
	f.srv = server.New(f.Deps)
	// Calls are made as f.caller, as the authentication interceptor would
	// have found it (none: as a caller of every tenant).
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if p := f.caller.Load(); p != nil {
			ctx = auth.NewContext(ctx, p)
		}
		return h(ctx, req)
	}))
	f.client = serve(t, gs, f.srv)
	return f
}

func key(k string) *switchboardv1.Identity {
	return &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(k)}
}

func requireCode(t *testing.T, want codes.Code, err error, msg string) {
	t.Helper()
	require.Error(t, err, msg)
	require.Equal(t, want, status.Code(err), "%s: %v", msg, err)
}

func TestArgumentValidation(t *testing.T) {
	f := start(t)
	ctx := t.Context()
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"Decide without identity", func() error {
			_, err := f.client.Decide(ctx, &switchboardv1.DecideRequest{Model: model})
			return err
		}, codes.Unauthenticated},
		{"Decide with an unknown key", func() error {
			_, err := f.client.Decide(ctx, &switchboardv1.DecideRequest{Identity: key("sk-nobody"), Model: model})
			return err
		}, codes.Unauthenticated},
		{"Decide for an unknown tenant", func() error {
			_, err := f.client.Decide(ctx, &switchboardv1.DecideRequest{Identity: &switchboardv1.Identity{TenantId: "nobody"}, Model: model})
			return err
		}, codes.Unauthenticated},
		{"Decide for an unknown model", func() error {
			_, err := f.client.Decide(ctx, &switchboardv1.DecideRequest{Identity: key(acmeKey), Model: "vendor/none"})
			return err
		}, codes.NotFound},
		{"ListModels without identity", func() error {
			_, err := f.client.ListModels(ctx, &switchboardv1.ListModelsRequest{})
			return err
		}, codes.Unauthenticated},
		{"Reserve without endpoint", func() error {
			_, err := f.client.Reserve(ctx, &switchboardv1.ReserveRequest{Identity: key(acmeKey)})
			return err
		}, codes.InvalidArgument},
		{"Reserve with an unknown key", func() error {
			_, err := f.client.Reserve(ctx, &switchboardv1.ReserveRequest{Identity: key("sk-nobody"), EndpointId: "alpha/" + model})
			return err
		}, codes.Unauthenticated},
		{"Reconcile without reservation", func() error {
			_, err := f.client.Reconcile(ctx, &switchboardv1.ReconcileRequest{})
			return err
		}, codes.InvalidArgument},
		{"Reconcile of an unknown reservation", func() error {
			_, err := f.client.Reconcile(ctx, &switchboardv1.ReconcileRequest{ReservationId: "rsv-none"})
			return err
		}, codes.NotFound},
		{"AcquireHedge without request id", func() error {
			_, err := f.client.AcquireHedge(ctx, &switchboardv1.AcquireHedgeRequest{EndpointId: "beta/" + model})
			return err
		}, codes.InvalidArgument},
		{"ListActivity without identity", func() error {
			_, err := f.client.ListActivity(ctx, &switchboardv1.ListActivityRequest{})
			return err
		}, codes.Unauthenticated},
		{"ListActivity with a negative limit", func() error {
			_, err := f.client.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: key(acmeKey), Limit: -1})
			return err
		}, codes.InvalidArgument},
		{"ListActivity over the page limit", func() error {
			_, err := f.client.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: key(acmeKey), Limit: 501})
			return err
		}, codes.InvalidArgument},
		{"ListActivity with a made-up cursor", func() error {
			_, err := f.client.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: key(acmeKey), Cursor: "zz"})
			return err
		}, codes.InvalidArgument},
		{"GetActivity without id", func() error {
			_, err := f.client.GetActivity(ctx, &switchboardv1.GetActivityRequest{Identity: key(acmeKey)})
			return err
		}, codes.InvalidArgument},
		{"GetActivity of an unknown id", func() error {
			_, err := f.client.GetActivity(ctx, &switchboardv1.GetActivityRequest{Identity: key(acmeKey), Id: "gen-none"})
			return err
		}, codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { requireCode(t, tt.want, tt.call(), tt.name) })
	}
}

func TestDecideReserveReconcile(t *testing.T) {
	f := start(t)
	ctx := t.Context()

	d, err := f.client.Decide(ctx, &switchboardv1.DecideRequest{Identity: key(acmeKey), Model: model, Reserve: true,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 100, MaxOutputTokens: 10}})
	require.NoError(t, err)
	require.NotEmpty(t, d.GetRequestId(), "the decider names the request when the caller did not")
	require.Equal(t, "acme", d.GetIdentity().GetTenantId(), "the identity comes from the key")
	require.Equal(t, "alpha", d.GetEndpoint().GetProvider())
	rsv := d.GetReservation().GetReservationId()
	require.NotEmpty(t, rsv)

	// A service reserves a fallback itself, naming the tenant.
	r, err := f.client.Reserve(ctx, &switchboardv1.ReserveRequest{Identity: &switchboardv1.Identity{TenantId: "globex"}, RequestId: "req-1",
		Model: model, EndpointId: "beta/" + model, Demand: &switchboardv1.Demand{InputTokens: 100, OutputTokens: 10, Requests: 1}})
	require.NoError(t, err)
	require.True(t, r.GetAdmitted())

	for _, id := range []string{rsv, r.GetReservation().GetReservationId()} {
		_, err = f.client.Reconcile(ctx, &switchboardv1.ReconcileRequest{ReservationId: id, Usage: &switchboardv1.Usage{InputTokens: 90, OutputTokens: 5, Reported: true}})
		require.NoError(t, err)
		_, err = f.client.Reconcile(ctx, &switchboardv1.ReconcileRequest{ReservationId: id})
		requireCode(t, codes.NotFound, err, "a reservation is reconciled once")
	}

	h, err := f.client.AcquireHedge(ctx, &switchboardv1.AcquireHedgeRequest{RequestId: "req-2", EndpointId: "beta/" + model, EstimatedCostUsd: 0.5})
	require.NoError(t, err)
	require.True(t, h.GetGranted())
	h, err = f.client.AcquireHedge(ctx, &switchboardv1.AcquireHedgeRequest{RequestId: "req-3", EndpointId: "beta/" + model, EstimatedCostUsd: 0.6})
	require.NoError(t, err)
	require.False(t, h.GetGranted(), "the day's 1 USD does not cover both")
}

// TestActivityIsTenantScoped: a tenant reads its own records only, found by
// key, even when another tenant's record has the same id.
func TestActivityIsTenantScoped(t *testing.T) {
	f := start(t)
	ctx := t.Context()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	rec := func(tenant, id string, min int) *switchboardv1.ActivityRecord {
		return &switchboardv1.ActivityRecord{Id: id, TenantId: tenant, Model: model, Provider: tenant + "-provider",
			CreateTime: timestamppb.New(at.Add(time.Duration(min) * time.Minute))}
	}
	require.NoError(t, f.act.Add([]*switchboardv1.ActivityRecord{
		rec("acme", "gen-1", 0), rec("acme", "gen-2", 1), rec("globex", "gen-2", 2), rec("globex", "gen-3", 3),
	}))

	list := func(k string) []string {
		resp, err := f.client.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: key(k)})
		require.NoError(t, err)
		var ids []string
		for _, r := range resp.GetRecords() {
			require.Equal(t, map[string]string{acmeKey: "acme", globexKey: "globex"}[k], r.GetTenantId())
			ids = append(ids, r.GetId())
		}
		return ids
	}
	require.Equal(t, []string{"gen-2", "gen-1"}, list(acmeKey))
	require.Equal(t, []string{"gen-3", "gen-2"}, list(globexKey))

	for k, tenant := range map[string]string{acmeKey: "acme", globexKey: "globex"} {
		got, err := f.client.GetActivity(ctx, &switchboardv1.GetActivityRequest{Identity: key(k), Id: "gen-2"})
		require.NoError(t, err)
		require.Equal(t, tenant, got.GetRecord().GetTenantId(), "the same id, each tenant its own record")
		require.Equal(t, tenant+"-provider", got.GetRecord().GetProvider())
	}
	_, err := f.client.GetActivity(ctx, &switchboardv1.GetActivityRequest{Identity: key(acmeKey), Id: "gen-3"})
	requireCode(t, codes.NotFound, err, "another tenant's record looks missing")
	_, err = f.client.GetActivity(ctx, &switchboardv1.GetActivityRequest{Identity: key(globexKey), Id: "gen-1"})
	requireCode(t, codes.NotFound, err, "another tenant's record looks missing")

	// A cursor from one tenant's listing is refused to another.
	page, err := f.client.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: key(acmeKey), Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, page.GetNextCursor())
	_, err = f.client.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: key(globexKey), Cursor: page.GetNextCursor()})
	requireCode(t, codes.InvalidArgument, err, "a cursor of another tenant's listing")
	next, err := f.client.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: key(acmeKey), Limit: 1, Cursor: page.GetNextCursor()})
	require.NoError(t, err)
	require.Len(t, next.GetRecords(), 1)
	require.Equal(t, "gen-1", next.GetRecords()[0].GetId())
}

// serve registers srv on gs, serves it over bufconn until the test ends and
// returns a client of it.
func serve(t testing.TB, gs *grpc.Server, srv *server.Server) switchboardv1.DeciderClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	server.Register(gs, srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-served
	})
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return switchboardv1.NewDeciderClient(conn)
}
