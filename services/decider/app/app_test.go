package app

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// etcd's embedded server and client keep package-level goroutines.
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/schedule.(*fifo).run"),
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

var demoKey = "sk-test-key"

func writeCatalog(t *testing.T, dir string, extraProvider bool) string {
	t.Helper()
	y := `
models:
  - id: vendor/model
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.2, output: 0.8}}
      - {provider: beta, base_url: http://127.0.0.1:2/v1, price: {input: 0.3, output: 1.0}}
`
	if extraProvider {
		y += "      - {provider: cheapo, base_url: http://127.0.0.1:3/v1, price: {input: 0.01, output: 0.01}}\n"
	}
	y += "tenants:\n  - {id: acme, api_keys_sha256: [" + catalog.HashKey(demoKey) + "]}\n" + testCallers()
	p := filepath.Join(dir, "catalog.yaml")
	require.NoError(t, os.WriteFile(p, []byte(y), 0o600))
	return p
}

func startDecider(t testing.TB, cfg Config) (*Decider, switchboardv1.DeciderClient) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	cfg.EtcdListen = "127.0.0.1:0"
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	cfg.NoDrainDelay = true // production settings otherwise; a test need not wait for load balancers
	cfg.ID = "test"
	cfg.Exploration = -1 // deterministic choices
	if cfg.TokenFile == "" {
		cfg.TokenFile = writeToken(t, testReplicaToken)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := Start(t.Context(), cfg, logger)
	require.NoError(t, err)
	conn, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer.Token(testEdgeToken)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return d, switchboardv1.NewDeciderClient(conn)
}

func TestDeciderOverRealGRPC(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, client := startDecider(t, Config{Catalog: writeCatalog(t, dir, false), DataDir: dir})
	defer d.Close()
	ctx := t.Context()

	conn, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	for _, svc := range []string{"switchboard.v1.RouterService", "switchboard.v1.EdgeService", "switchboard.v1.OperatorService", "switchboard.v1.ReplicaService"} {
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status, svc)
	}

	key := &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(demoKey)}
	resp, err := client.Decide(ctx, &switchboardv1.DecideRequest{Identity: key, Model: "vendor/model", Tokens: &switchboardv1.TokenEstimate{InputTokens: 10}})
	require.NoError(t, err)
	require.Equal(t, "alpha", resp.Endpoint.Provider)
	require.Equal(t, "acme", resp.Identity.TenantId)
	require.NotEmpty(t, resp.RequestId)
	require.Equal(t, []string{"beta"}, []string{resp.Fallbacks[0].Provider})

	tests := []struct {
		name string
		req  *switchboardv1.DecideRequest
		code codes.Code
	}{
		{"bad key", &switchboardv1.DecideRequest{Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey("x")}, Model: "vendor/model"}, codes.Unauthenticated},
		{"no key", &switchboardv1.DecideRequest{Model: "vendor/model"}, codes.Unauthenticated},
		{"unknown model", &switchboardv1.DecideRequest{Identity: key, Model: "nope"}, codes.NotFound},
		{"unknown provider", &switchboardv1.DecideRequest{Identity: key, Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{Only: []string{"zeta"}}}, codes.InvalidArgument},
		{"nothing fits", &switchboardv1.DecideRequest{Identity: key, Model: "vendor/model", Provider: &switchboardv1.ProviderPreferences{MaxPrice: &switchboardv1.MaxPrice{Prompt: new(float64)}}}, codes.FailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Decide(ctx, tt.req)
			require.Equal(t, tt.code, status.Code(err), "%v", err)
		})
	}

	models, err := client.ListModels(ctx, &switchboardv1.ListModelsRequest{Identity: key})
	require.NoError(t, err)
	require.Equal(t, "vendor/model", models.Models[0].Id)
	_, err = client.ListModels(ctx, &switchboardv1.ListModelsRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	_, err = client.Reserve(ctx, &switchboardv1.ReserveRequest{Identity: key})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "endpoint_id is required")
	_, err = client.Reconcile(ctx, &switchboardv1.ReconcileRequest{ReservationId: "nope"})
	require.Equal(t, codes.NotFound, status.Code(err))
}

func TestReportStreamAndCatalogChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, client := startDecider(t, Config{Catalog: writeCatalog(t, dir, false), DataDir: dir})
	defer d.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	stream, err := client.Report(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: "e1", Region: "local"}}}))
	// The broker owner's term is told as soon as it is known, before
	// anything but a key set; the other commands come in order.
	var term int64
	recv := func() (*switchboardv1.ReportResponse, error) {
		for {
			m, err := stream.Recv()
			if err != nil || m.GetOwnerTerm() == nil {
				return m, err
			}
			term = m.GetOwnerTerm().GetTerm()
		}
	}
	// The first thing an edge is told is the set of valid keys.
	m, err := recv()
	require.NoError(t, err)
	require.NotEmpty(t, m.GetKeySet().GetKeyPrefixes())
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{Reports: []*switchboardv1.CallReport{
		{RequestId: "r1", EndpointId: "alpha/vendor/model", Outcome: switchboardv1.Outcome_OUTCOME_OK},
		{RequestId: "r2", EndpointId: "beta/vendor/model", Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED},
		{RequestId: "r3", EndpointId: "beta/vendor/model", Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED},
		{RequestId: "r4", EndpointId: "beta/vendor/model", Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED},
	}}}}))
	// Three rate-limited calls within a minute bench beta (the default
	// breaker): every edge is told, then the batch is acknowledged.
	m, err = recv()
	require.NoError(t, err)
	require.Equal(t, "beta/vendor/model", m.GetCooldown().GetEndpointId())
	m, err = recv()
	require.NoError(t, err)
	require.Equal(t, int64(4), m.GetAck().GetAccepted())
	require.Equal(t, int64(4), d.ReportsReceived())
	require.Len(t, d.Edges(), 1)

	// An operator (or another replica) stores a new catalog in etcd: this
	// replica applies it and tells the connected edges.
	st, err := store.Connect(ctx, []string{d.EtcdEndpoint()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	defer st.Close()
	data, err := os.ReadFile(writeCatalog(t, t.TempDir(), true))
	require.NoError(t, err)
	rev, err := st.PutCatalog(ctx, data)
	require.NoError(t, err)
	// Edges get the new catalog's keys, then the change itself.
	m, err = recv()
	require.NoError(t, err)
	require.Equal(t, uint64(rev), m.GetKeySet().GetVersion())
	m, err = recv()
	require.NoError(t, err)
	require.Equal(t, rev, m.GetConfig().GetCatalogRevision())
	// The term comes from the election's watch, which may be slower than
	// the catalog's: then it is the next thing the edge is told.
	for term == 0 {
		m, err := stream.Recv()
		require.NoError(t, err)
		require.NotNil(t, m.GetOwnerTerm(), "the edge is told the broker owner's term, got %v", m)
		term = m.GetOwnerTerm().GetTerm()
	}
	require.Positive(t, term, "the edge was told the broker owner's term")
	resp, err := client.Decide(ctx, &switchboardv1.DecideRequest{Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(demoKey)}, Model: "vendor/model"})
	require.NoError(t, err)
	require.Equal(t, "cheapo", resp.Endpoint.Provider)

	// An invalid catalog in etcd is refused; the current one stays. The
	// watch applies revisions in order, so once the valid catalog stored
	// after it is announced, the invalid one was seen and not announced.
	badRev, err := st.PutCatalog(ctx, []byte("models: []"))
	require.NoError(t, err)
	again, err := st.PutCatalog(ctx, data)
	require.NoError(t, err)
	require.Greater(t, again, badRev)
	m, err = stream.Recv()
	require.NoError(t, err)
	require.Equal(t, uint64(again), m.GetKeySet().GetVersion(), "the invalid catalog's keys were never sent")
	m, err = stream.Recv()
	require.NoError(t, err)
	require.Equal(t, again, m.GetConfig().GetCatalogRevision(), "the invalid catalog was never announced")
	resp, err = client.Decide(ctx, &switchboardv1.DecideRequest{Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(demoKey)}, Model: "vendor/model"})
	require.NoError(t, err)
	require.Equal(t, "cheapo", resp.Endpoint.Provider)

	// A hello is required first.
	bad, err := client.Report(ctx)
	require.NoError(t, err)
	require.NoError(t, bad.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{}}}))
	_, err = bad.Recv()
	require.Equal(t, codes.InvalidArgument, status.Code(err))

	// Shutdown ends the open stream rather than waiting on it forever.
	d.Close()
	_, err = stream.Recv()
	require.Error(t, err)
}

func TestRestartUsesStoredCatalog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, _ := startDecider(t, Config{Catalog: writeCatalog(t, dir, true), DataDir: dir})
	d.Close()
	// Same data dir, no --catalog: the catalog comes back from etcd.
	d, client := startDecider(t, Config{DataDir: dir})
	defer d.Close()
	resp, err := client.Decide(t.Context(), &switchboardv1.DecideRequest{Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(demoKey)}, Model: "vendor/model"})
	require.NoError(t, err)
	require.Equal(t, "cheapo", resp.Endpoint.Provider)
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("models:\n  - id: m\n    endpoints: []\n"), 0o600))
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err := Start(t.Context(), Config{Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: dir, Catalog: bad, ShutdownTimeout: time.Second}, logger)
	require.ErrorContains(t, err, "line 3: models[0].endpoints: at least one endpoint is required")

	_, err = Start(t.Context(), Config{Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: t.TempDir(), ShutdownTimeout: time.Second}, logger)
	require.ErrorIs(t, err, store.ErrNoCatalog)
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SWITCHBOARD_DECIDER_ETCD": "a:2379, b:2379", "SWITCHBOARD_DECIDER_LISTEN": "0.0.0.0:9"}
	cfg, err := ParseFlags([]string{"--catalog=c.yaml"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"a:2379", "b:2379"}, cfg.Etcd)
	require.Equal(t, "0.0.0.0:9", cfg.Listen)
	require.Equal(t, "c.yaml", cfg.Catalog)
	require.Empty(t, cfg.Region)
	cfg, err = ParseFlags([]string{"--region=eu-west"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "eu-west", cfg.Region)

	_, err = ParseFlags([]string{"--listen=nope", "--log-level=loud", "--shutdown-timeout=0s", "--region=" + strings.Repeat("r", 200)}, func(string) string { return "" }, io.Discard)
	require.Error(t, err)
	for _, want := range []string{"--listen", "--log-level", "--shutdown-timeout", "--region"} {
		require.True(t, strings.Contains(err.Error(), want), "all problems reported at once: %v", err)
	}
}

func TestParseFlagsFastEnough(t *testing.T) {
	t.Parallel()
	cfg, err := ParseFlags([]string{"--catalog=c.yaml"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, time.Second, cfg.FastEnough)
	cfg, err = ParseFlags([]string{"--catalog=c.yaml", "--fast-enough=50ms"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 50*time.Millisecond, cfg.FastEnough)
	_, err = ParseFlags([]string{"--catalog=c.yaml", "--fast-enough=-1s"}, func(string) string { return "" }, io.Discard)
	require.ErrorContains(t, err, "--fast-enough")
}

func TestExplainCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, _ := startDecider(t, Config{Catalog: writeCatalog(t, dir, false), DataDir: dir})
	defer d.Close()
	var out strings.Builder
	err := Explain(t.Context(), []string{"--decider=" + d.Addr(), "--token-file=" + writeToken(t, testOperatorToken), "--model=vendor/model", "--api-key=" + demoKey,
		"--input-tokens=40000", "--provider", `{"ignore":["beta"]}`}, &out)
	require.NoError(t, err)
	for _, want := range []string{"a 40,000-token prompt (32k-128k)", "PROVIDER", "alpha", "in provider.ignore", "order: alpha"} {
		require.Contains(t, out.String(), want)
	}
	out.Reset()
	err = Explain(t.Context(), []string{"--decider=" + d.Addr(), "--token-file=" + writeToken(t, testOperatorToken), "--model=vendor/model", "--api-key=" + demoKey,
		"--session-id=conv-1"}, &out)
	require.NoError(t, err)
	require.Contains(t, out.String(), "sticky=new", "a conversation the decider has not seen")
	require.Error(t, Explain(t.Context(), []string{"--decider=" + d.Addr()}, &out), "--model is required")
	err = Explain(t.Context(), []string{"--decider=" + d.Addr(), "--token-file=" + writeToken(t, testOperatorToken), "--model=vendor/model", "--api-key=wrong"}, &out)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "an unknown API key: %v", err)
	require.ErrorContains(t, err, "invalid API key")
	err = Explain(t.Context(), []string{"--decider=" + d.Addr(), "--token-file=" + writeToken(t, testEdgeToken), "--model=vendor/model", "--api-key=" + demoKey}, &out)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "explaining is an operator's, not an edge's: %v", err)
}

func TestParseFlagsSticky(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	cfg, err := ParseFlags([]string{"--catalog=c.yaml"}, none, io.Discard)
	require.NoError(t, err)
	require.False(t, cfg.NoSticky, "stickiness is on by default")
	require.Equal(t, 10*time.Minute, cfg.StickyTTL)
	cfg, err = ParseFlags([]string{"--catalog=c.yaml", "--sticky=false", "--sticky-ttl=90s"}, none, io.Discard)
	require.NoError(t, err)
	require.True(t, cfg.NoSticky)
	require.Equal(t, 90*time.Second, cfg.StickyTTL)
	cfg, err = ParseFlags([]string{"--catalog=c.yaml"}, func(k string) string {
		if k == "SWITCHBOARD_DECIDER_STICKY" {
			return "false"
		}
		return ""
	}, io.Discard)
	require.NoError(t, err)
	require.True(t, cfg.NoSticky, "the environment fallback")
	_, err = ParseFlags([]string{"--catalog=c.yaml", "--sticky-ttl=-1s"}, none, io.Discard)
	require.ErrorContains(t, err, "--sticky-ttl")
}
