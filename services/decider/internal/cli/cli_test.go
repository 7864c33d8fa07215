package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/app"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cli"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// etcd's embedded server and client keep package-level goroutines.
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/schedule.(*fifo).run"),
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

const (
	model         = "vendor/model"
	demoKey       = "sk-cli-test"
	operatorToken = "cli-operator-token"
	serviceToken  = "cli-service-token"
	edgeToken     = "cli-edge-token"
	replicaToken  = "cli-replica-token"
)

// testCatalog is a model on two providers, a tenant with a day's quota,
// and the callers: the decider itself, an operator, a service of the
// tenant, an edge.
var testCatalog = `# the CLI's test catalog
models:
  - id: vendor/model
    aliases: [model-alias]
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.2, output: 0.8}, context_length: 200000}
      - {provider: beta, base_url: http://127.0.0.1:2/v1, price: {input: 0.3, output: 1.0}, context_length: 32000}
tenants:
  - id: acme
    api_keys_sha256: [` + catalog.HashKey(demoKey) + `]
    limits:
      - {unit: requests, per: day, capacity: 1000}
callers:
  - {id: deciders, role: replica, tokens_sha256: [` + catalog.HashKey(replicaToken) + `]}
  - {id: ops, role: operator, tokens_sha256: [` + catalog.HashKey(operatorToken) + `]}
  - {id: billing, role: service, tenants: [acme], tokens_sha256: [` + catalog.HashKey(serviceToken) + `]}
  - {id: edges, role: edge, tokens_sha256: [` + catalog.HashKey(edgeToken) + `]}
`

// writeFile writes data to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
	require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
	return p
}

// system is a live decider and where the command finds it.
type system struct {
	d *app.Decider
	// service calls the decider as the tenant's service.
	service switchboardv1.DeciderClient
	// tokenFile holds the operator's token.
	tokenFile string
}

func startDecider(t *testing.T) *system {
	t.Helper()
	dir := t.TempDir()
	cfg := app.DefaultConfig()
	cfg.Listen, cfg.EtcdListen, cfg.DataDir, cfg.ID = "127.0.0.1:0", "127.0.0.1:0", dir, "cli-test"
	cfg.Catalog = writeFile(t, dir, "catalog.yaml", testCatalog)
	cfg.TokenFile = writeFile(t, dir, "replica-token", replicaToken)
	cfg.NoDrainDelay, cfg.ShutdownTimeout, cfg.Exploration, cfg.NoProbes = true, 5*time.Second, -1, true
	cfg.HedgeBudgetUSD = 5
	d, err := app.Start(t.Context(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(d.Close)
	conn, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer.Token(serviceToken)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &system{d: d, service: switchboardv1.NewDeciderClient(conn), tokenFile: writeFile(t, dir, "operator-token", operatorToken)}
}

// serve has the tenant's service route n requests of prompt tokens and
// report each as served by the endpoint chosen, its first token after
// ttft: the decider learns the timings and records the activity.
func (s *system) serve(t *testing.T, n int, prompt int64, ttft time.Duration) {
	t.Helper()
	for range n {
		d, err := s.service.Decide(t.Context(), &switchboardv1.DecideRequest{Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
			Reserve: true, Stream: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: prompt, MaxOutputTokens: 50}})
		require.NoError(t, err)
		start := time.Now().Add(-time.Second)
		ep := d.GetEndpoint()
		usage := &switchboardv1.Usage{InputTokens: prompt, OutputTokens: 40, Reported: true}
		_, err = s.service.ReportCall(t.Context(), &switchboardv1.ReportCallRequest{
			Record: &switchboardv1.ActivityRecord{
				Id: d.GetRequestId(), CreateTime: timestamppb.New(start), TenantId: "acme", ApiKeyId: d.GetIdentity().GetApiKeyId(), Model: model,
				EndpointId: ep.GetId(), Provider: ep.GetProvider(), Stream: true, Status: switchboardv1.CallStatus_CALL_STATUS_OK, HttpStatus: 200,
				Duration: durationpb.New(time.Second), Ttft: durationpb.New(ttft), Usage: usage, CostUsd: 0.0001,
				Attempts: []*switchboardv1.Attempt{{EndpointId: ep.GetId(), Provider: ep.GetProvider(), Outcome: switchboardv1.Outcome_OUTCOME_OK,
					HttpStatus: 200, StartTime: timestamppb.New(start), Ttft: durationpb.New(ttft)}},
				Grant: d.GetGrant(), Caps: d.GetCaps(),
			},
			Reconciles:   []*switchboardv1.ReconcileRequest{{ReservationId: d.GetReservation().GetReservationId(), Outcome: switchboardv1.Outcome_OUTCOME_OK, Usage: usage}},
			PromptTokens: prompt,
		})
		require.NoError(t, err)
	}
}

// syncBuffer is a buffer written by a command running in the background.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is one run of the command.
type result struct {
	stdout, stderr string
	code           int
}

// runIn runs the command with env's variables, in dir.
func runIn(ctx context.Context, dir string, env map[string]string, args ...string) result {
	var stdout, stderr syncBuffer
	code := cli.Main(ctx, args, cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] }, Dir: dir, Every: 20 * time.Millisecond})
	return result{stdout.String(), stderr.String(), code}
}

// as runs the command against s, the operator's token in $SWITCHBOARD_TOKEN_FILE.
func (s *system) run(t *testing.T, args ...string) result {
	t.Helper()
	return runIn(t.Context(), t.TempDir(), map[string]string{cli.EnvAddr: s.d.Addr(), cli.EnvTokenFile: s.tokenFile}, args...)
}

// jsonOf parses a command's JSON output.
func jsonOf(t *testing.T, r result) map[string]any {
	t.Helper()
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), "%s", r.stdout)
	return v
}

// TestHelpAndVersion: --help of the command and of every subcommand
// prints its usage and exits 0; --version and version print the version.
func TestHelpAndVersion(t *testing.T) {
	ctx, dir := t.Context(), t.TempDir()
	r := runIn(ctx, dir, nil, "--help")
	require.Equal(t, 0, r.code)
	for _, c := range []string{"catalog validate FILE", "catalog show", "stats [MODEL]", "explain MODEL", "broker", "hedge",
		"experiment start", "experiment stop", "experiment show", "activity tail", "version"} {
		require.Contains(t, r.stdout, "\n  "+c+" ", "--help lists %s", c)
		sub := runIn(ctx, dir, nil, append(strings.Fields(strings.TrimSuffix(strings.TrimSuffix(c, " FILE"), " [MODEL]")), "--help")...)
		if c == "explain MODEL" {
			sub = runIn(ctx, dir, nil, "explain", "--help")
		}
		require.Equal(t, 0, sub.code, "%s --help: %s", c, sub.stderr)
		require.Contains(t, sub.stdout, "usage: switchboard "+c, "%s --help", c)
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r := runIn(ctx, dir, nil, args...)
		require.Equal(t, 0, r.code)
		require.Equal(t, "switchboard dev\n", r.stdout)
	}
	r = runIn(ctx, dir, nil, "catalog", "--help")
	require.Equal(t, 0, r.code, "a group's --help: %s", r.stderr)

	for _, args := range [][]string{{}, {"nope"}, {"catalog"}, {"catalog", "nope"}, {"stats", "a", "b"}, {"broker", "-o", "yaml"}, {"explain"}} {
		r := runIn(ctx, dir, nil, args...)
		require.Equal(t, 2, r.code, "%q is a usage mistake: %s", args, r.stderr)
		require.Contains(t, r.stderr, "switchboard: ")
	}
}

// TestMissingCredential: without a token the command says where it looked
// and how to give one, and a refused connection names the address and
// make run.
func TestMissingCredential(t *testing.T) {
	dir := t.TempDir()
	r := runIn(t.Context(), dir, nil, "stats")
	require.Equal(t, 1, r.code)
	for _, want := range []string{"--token-file", cli.EnvTokenFile, filepath.Join(dir, ".data", "operator-token"), "make run"} {
		require.Contains(t, r.stderr, want)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := lis.Addr().String()
	require.NoError(t, lis.Close())
	writeFile(t, dir, ".data/operator-token", operatorToken)
	r = runIn(t.Context(), dir, map[string]string{cli.EnvAddr: closed}, "broker")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "cannot reach the decider at "+closed)
	require.Contains(t, r.stderr, "make run")
}

// TestCatalogValidate: a bad catalog's every problem is printed with its
// line, exit 1; a good one is summed up, exit 0; both as JSON too.
func TestCatalogValidate(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", testCatalog)
	bad := writeFile(t, dir, "bad.yaml", `models:
  - id: vendor/model
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: -1, output: 0.8}}
tenants:
  - id: acme
    api_keys_sha256: [not-a-digest]
`)
	r := runIn(t.Context(), dir, nil, "catalog", "validate", good)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, good+": valid: 1 models, 2 endpoints, 1 tenants, 4 callers\n", r.stdout)

	r = runIn(t.Context(), dir, nil, "catalog", "validate", bad)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stdout, bad+":4: models[0].endpoints[0].price.input: ")
	require.Contains(t, r.stdout, bad+":7: tenants[0].api_keys_sha256[0]: ")
	require.Contains(t, r.stderr, "the catalog is not valid")

	var v struct {
		Valid    bool `json:"valid"`
		Problems []struct {
			Line  int    `json:"line"`
			Field string `json:"field"`
		} `json:"problems"`
	}
	r = runIn(t.Context(), dir, nil, "catalog", "validate", "-o", "json", bad)
	require.Equal(t, 1, r.code)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stdout)
	require.False(t, v.Valid)
	require.Len(t, v.Problems, 2)
	require.Equal(t, 4, v.Problems[0].Line)

	r = runIn(t.Context(), dir, nil, "catalog", "validate", filepath.Join(dir, "missing.yaml"))
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "missing.yaml")
}

// TestAgainstALiveDecider runs every command that calls the decider
// against a live one: its table and its JSON.
func TestAgainstALiveDecider(t *testing.T) {
	s := startDecider(t)
	s.serve(t, 12, 1000, 300*time.Millisecond)

	t.Run("catalog show", func(t *testing.T) {
		r := s.run(t, "catalog", "show")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "# catalog revision ")
		require.Contains(t, r.stdout, "# the CLI's test catalog")
		require.Contains(t, r.stdout, catalog.Elided)
		require.NotContains(t, r.stdout, catalog.HashKey(demoKey))
		v := jsonOf(t, s.run(t, "catalog", "show", "-o", "json"))
		require.Contains(t, v["yaml"], "vendor/model")
		require.NotEmpty(t, v["revision"])
		require.Equal(t, s.d.Addr(), v["replica"])
	})

	t.Run("stats", func(t *testing.T) {
		var r result
		require.Eventually(t, func() bool {
			r = s.run(t, "stats", "model-alias")
			return strings.Contains(r.stdout, "300 ms (12)")
		}, 10*time.Second, 20*time.Millisecond, "the served requests' first tokens are counted: %s %s", r.stdout, r.stderr)
		for _, want := range []string{"vendor/model", "TTFT <8k", "TTFT >128k", "alpha", "beta", "0.2 / 0.8 / 0.2",
			"choice per prompt size", "<8k (2,048 tokens)", ">128k (163,840 tokens)"} {
			require.Contains(t, r.stdout, want)
		}
		require.NotContains(t, r.stdout, "SIZE_BUCKET", "buckets as the HTTP API names them")
		require.NotContains(t, r.stdout, "ROUTE_REASON")
		require.Regexp(t, `beta\s+-\s+-\s+-\s+-\s+-\s+-`, r.stdout, "an unknown figure is -, not 0")

		v := jsonOf(t, s.run(t, "stats", model, "-o", "json"))
		m := v["models"].([]any)[0].(map[string]any)
		require.Equal(t, model, m["model"])
		choices := m["choices"].([]any)
		require.Len(t, choices, 4)
		require.Equal(t, "SIZE_BUCKET_UNDER_8K", choices[0].(map[string]any)["bucket"])
		require.Equal(t, "alpha/vendor/model", choices[3].(map[string]any)["endpoint_id"], "160k tokens fit only alpha's context: %v", choices[3])

		r = s.run(t, "stats", "nope")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, `model "nope" is not in the catalog`)
	})

	t.Run("explain", func(t *testing.T) {
		r := s.run(t, "explain", model, "--tenant", "acme", "--sort", "latency", "--max-price", "prompt=0.25", "--prompt-tokens", "2000")
		require.Equal(t, 0, r.code, r.stderr)
		for _, want := range []string{"vendor/model for tenant acme, a 2,000-token prompt (<8k): user_sort", "PROVIDER", "alpha", "beta",
			"order: alpha", "max price: prompt $0.25 per million tokens"} {
			require.Contains(t, r.stdout, want)
		}
		require.NotContains(t, r.stdout, "order: alpha → beta", "beta's prompt price is over the cap")

		v := jsonOf(t, s.run(t, "explain", model, "--api-key", demoKey, "--provider", `{"sort":"price"}`, "-o", "json"))
		require.Equal(t, "ROUTE_REASON_USER_SORT", v["decision"].(map[string]any)["reason"])
		require.Equal(t, "acme", v["identity"].(map[string]any)["tenant_id"])

		r = s.run(t, "explain", model, "--tenant", "acme", "--sort", "fastest")
		require.Equal(t, 2, r.code)
		require.Contains(t, r.stderr, "use price, throughput or latency")
		r = s.run(t, "explain", model, "--tenant", "acme", "--provider", `{"sorting":"price"}`)
		require.Equal(t, 2, r.code)
		require.Contains(t, r.stderr, `unknown field "sorting"`)
	})

	t.Run("broker", func(t *testing.T) {
		d, err := s.service.Decide(t.Context(), &switchboardv1.DecideRequest{Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: model,
			Reserve: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: 10, MaxOutputTokens: 10}})
		require.NoError(t, err)
		r := s.run(t, "broker")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "rate-limit broker owned by "+s.d.Addr())
		require.Contains(t, r.stdout, "open reservations: 1 (holding 10 input and 10 output tokens, $")
		require.Contains(t, r.stdout, "paused routes: none")
		require.Regexp(t, `tenant\s+acme\s+requests\s+day\s+daily_reset\s+1,000\s+987\s+1.3%\s+catalog`, r.stdout)
		require.Contains(t, r.stdout, "queues: no request waiting")
		v := jsonOf(t, s.run(t, "broker", "-o", "json"))
		require.Equal(t, "1", v["open_reservations"])
		require.Equal(t, "acme", v["buckets"].([]any)[0].(map[string]any)["key"])

		// The service's 429 pauses the route for its tenant only.
		_, err = s.service.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: d.GetReservation().GetReservationId(),
			Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED, Failure: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY,
			RateLimitHeaders: []*switchboardv1.Header{{Name: "retry-after", Value: "60"}}})
		require.NoError(t, err)
		r = s.run(t, "broker")
		require.Equal(t, 0, r.code, r.stderr)
		require.Regexp(t, `(?m)^`+d.GetEndpoint().GetId()+`\s+acme\s+\d\d:\d\d:\d\d \(in (5\d|1m\d)s\)\s+retryable_capacity$`, r.stdout)
	})

	t.Run("hedge", func(t *testing.T) {
		r := s.run(t, "hedge")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "hedge budget today: $0 spent of $5, $5 left; refills at ")
		v := jsonOf(t, s.run(t, "hedge", "-o", "json"))
		require.InDelta(t, 5, v["daily_usd"], 1e-9)
	})

	t.Run("experiment", func(t *testing.T) {
		r := s.run(t, "experiment", "show")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, "(not found)")
		r = s.run(t, "experiment", "start", "--block", "1h", "--burn-in", "10m", "--blocks", "4", "--schedule", "alternating")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "started experiment ")
		require.Contains(t, r.stdout, "smart vs routing-cost, blocks of 1h0m0s with 10m0s burn-in, alternating schedule")
		r = s.run(t, "experiment", "show")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "now: block 0, smart")
		v := jsonOf(t, s.run(t, "experiment", "show", "-o", "json"))
		require.Equal(t, "smart", v["current_arm"])
		r = s.run(t, "experiment", "stop", "-o", "json")
		require.NotEmpty(t, jsonOf(t, r)["experiment"].(map[string]any)["stop_time"])
		r = s.run(t, "experiment", "start", "--schedule", "weekly")
		require.Equal(t, 2, r.code)
	})

	t.Run("activity tail", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, ".data/operator-token", operatorToken) // make run's credential, found by default
		env := map[string]string{cli.EnvAddr: s.d.Addr()}
		ctx, cancel := context.WithCancel(t.Context())
		var stdout, stderr syncBuffer
		done := make(chan int)
		go func() {
			done <- cli.Main(ctx, []string{"activity", "tail", "--tenant", "acme", "-n", "2"},
				cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] }, Dir: dir, Every: 20 * time.Millisecond})
		}()
		require.Eventually(t, func() bool { return strings.Count(stdout.String(), "\n") == 3 }, 10*time.Second, 10*time.Millisecond,
			"a header and the last 2: %s %s", stdout.String(), stderr.String())
		s.serve(t, 1, 5000, 250*time.Millisecond)
		require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "5,000/40") }, 10*time.Second, 10*time.Millisecond,
			"the new request is printed: %s", stdout.String())
		cancel()
		require.Equal(t, 0, <-done, stderr.String())
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		require.Len(t, lines, 4, "each request once")
		require.Regexp(t, `ok\s+vendor/model\s+\S+\s+1\s+250 ms\s+1 s\s+5,000/40\s+\$0.0001`, lines[3])

		ctx, cancel = context.WithCancel(t.Context())
		defer cancel()
		stdout = syncBuffer{}
		go func() {
			done <- cli.Main(ctx, []string{"activity", "tail", "--api-key", demoKey, "-o", "json", "-n", "1"},
				cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] }, Dir: dir, Every: 20 * time.Millisecond})
		}()
		require.Eventually(t, func() bool { return strings.Count(stdout.String(), "\n") == 1 }, 10*time.Second, 10*time.Millisecond)
		cancel()
		require.Equal(t, 0, <-done)
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout.String()), &rec))
		require.Equal(t, "acme", rec["tenant_id"])
		require.Equal(t, "5000", rec["usage"].(map[string]any)["input_tokens"])
	})

	t.Run("a token of no operator", func(t *testing.T) {
		r := runIn(t.Context(), t.TempDir(), map[string]string{cli.EnvAddr: s.d.Addr(), cli.EnvTokenFile: writeFile(t, t.TempDir(), "t", serviceToken)}, "broker")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, "an operator's credential is needed")
		r = s.run(t, "broker", "--token-file", writeFile(t, t.TempDir(), "t", "stale"))
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, "refused the token in ")
		require.Contains(t, r.stderr, "(--token-file)")
	})
}
