package app

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// TestExperimentCommandSurvivesRestart starts a switchback experiment with
// the CLI, feeds activity records to the decider (one in a burn-in, one
// sent twice), reads the figures back, restarts the decider on the same
// data and reads the same figures, then stops the experiment.
func TestExperimentCommandSurvivesRestart(t *testing.T) {
	t.Parallel()
	t0 := time.Now().Truncate(time.Second)
	var mu sync.Mutex
	now := t0.Add(5 * time.Second)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	dir := t.TempDir()
	cfg := Config{Catalog: writeCatalog(t, dir, false), DataDir: dir, ExperimentMinBlock: time.Second, Now: clock}
	d, edge := startDecider(t, cfg)
	ops := "--token-file=" + writeToken(t, testOperatorToken)
	run := func(d *Decider, args ...string) string {
		t.Helper()
		var out strings.Builder
		require.NoError(t, ExperimentCommand(t.Context(), append([]string{args[0], "--decider=" + d.Addr(), ops}, args[1:]...), &out))
		return out.String()
	}

	out := run(d, "start", "--arms=smart,routing-cost", "--block=10s", "--burn-in=2s", "--schedule=alternating",
		"--start="+t0.Format(time.RFC3339), "--blocks=6")
	require.Contains(t, out, "started experiment")
	require.Contains(t, out, "smart vs routing-cost, blocks of 10s with 2s burn-in, alternating schedule")
	var buf strings.Builder
	err := ExperimentCommand(t.Context(), []string{"start", "--decider=" + d.Addr(), ops, "--block=10s", "--burn-in=0s"}, &buf)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "one is running: %v", err)
	_, err = edge.GetExperiment(t.Context(), &switchboardv1.GetExperimentRequest{})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "operators only: %v", err)

	record := func(d *Decider, id string, at time.Duration, ttft time.Duration) *switchboardv1.ActivityRecord {
		return &switchboardv1.ActivityRecord{
			Id: id, CreateTime: timestamppb.New(t0.Add(at)), TenantId: "acme", Model: "vendor/model", EndpointId: "alpha/vendor/model",
			Attempts: []*switchboardv1.Attempt{{EndpointId: "alpha/vendor/model", Outcome: switchboardv1.Outcome_OUTCOME_OK,
				Ttft: durationpb.New(ttft), StartTime: timestamppb.New(t0.Add(at))}},
			Status: switchboardv1.CallStatus_CALL_STATUS_OK, Duration: durationpb.New(time.Second), Ttft: durationpb.New(ttft),
			Usage: &switchboardv1.Usage{InputTokens: 100, OutputTokens: 50}, CostUsd: 0.001,
			Caps: testCaps, Grant: d.grants.Issue(id, "acme", "", testCaps),
		}
	}
	batch := []*switchboardv1.ActivityRecord{
		record(d, "burn", time.Second, 100*time.Millisecond),     // block 0's burn-in
		record(d, "a1", 3*time.Second, 100*time.Millisecond),     // block 0: smart
		record(d, "b1", 13*time.Second, 400*time.Millisecond),    // block 1: routing-cost
		record(d, "outside", -time.Second, 100*time.Millisecond), // before the start
	}
	sendActivity(t, edge, 1, batch...)
	sendActivity(t, edge, 2, batch[1]) // resent: counted once
	show := run(d, "show")
	t.Log("\n" + show)
	for _, want := range []string{
		"smart: 1 requests in 1 blocks (1 more in burn-in, not counted)",
		"routing-cost: 1 requests in 1 blocks (0 more in burn-in, not counted)",
		"replicas: test", "now: block 0, smart", "ttft_p50", "DIFFERENCE (routing-cost − smart)",
	} {
		require.Contains(t, show, want)
	}

	d.Close()
	d2, _ := startDecider(t, cfg)
	defer d2.Close()
	again := run(d2, "show")
	require.Equal(t, show, again, "the same figures after a restart")

	mu.Lock()
	now = t0.Add(25 * time.Second)
	mu.Unlock()
	require.Contains(t, run(d2, "stop"), "stopped: "+t0.Add(25*time.Second).UTC().Format(time.RFC3339))
	require.Contains(t, run(d2, "show"), "now: not running")
}

func TestParseFlagsExperiment(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	cfg, err := ParseFlags([]string{"--catalog=c.yaml"}, none, io.Discard)
	require.NoError(t, err)
	require.Equal(t, time.Minute, cfg.ExperimentMinBlock)
	require.Equal(t, 30*time.Second, cfg.ExperimentSaveInterval)
	cfg, err = ParseFlags([]string{"--catalog=c.yaml", "--experiment-min-block=100ms", "--experiment-save-interval=1s"}, none, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, cfg.ExperimentMinBlock)
	require.Equal(t, time.Second, cfg.ExperimentSaveInterval)
	_, err = ParseFlags([]string{"--catalog=c.yaml", "--experiment-min-block=-1s"}, none, io.Discard)
	require.ErrorContains(t, err, "--experiment-min-block")
}

func TestExperimentCommandFlags(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no subcommand", wantErr: "usage"},
		{name: "unknown subcommand", args: []string{"pause"}, wantErr: "unknown experiment command"},
		{name: "bad schedule", args: []string{"start", "--schedule=weekly"}, wantErr: "--schedule"},
		{name: "bad start", args: []string{"start", "--start=tomorrow"}, wantErr: "--start"},
		{name: "blocks and end", args: []string{"start", "--blocks=3", "--end=2026-01-01T00:00:00Z"}, wantErr: "exclude each other"},
		{name: "not loopback", args: []string{"show", "--decider=decider.example:9090"}, wantErr: "not a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorContains(t, ExperimentCommand(t.Context(), tt.args, &out), tt.wantErr)
		})
	}
}

// TestExperimentAcrossReplicas: a replica follows the experiment another
// one started, counts the records its edges send, and any replica reads the
// figures of both.
func TestExperimentAcrossReplicas(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{Catalog: writeCatalog(t, dir, false), DataDir: dir, ExperimentMinBlock: time.Second, ExperimentSaveInterval: 50 * time.Millisecond}
	a, edgeA := startDecider(t, cfg)
	defer a.Close()
	b, err := Start(t.Context(), Config{
		Listen: "127.0.0.1:0", Etcd: []string{a.EtcdEndpoint()}, DataDir: t.TempDir(), ID: "other", ShutdownTimeout: 5 * time.Second,
		TokenFile: writeToken(t, testReplicaToken), ExperimentSaveInterval: 50 * time.Millisecond,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	defer b.Close()
	conn, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer.Token(testEdgeToken)))
	require.NoError(t, err)
	defer conn.Close()
	edgeB := switchboardv1.NewDeciderClient(conn)

	ops := "--token-file=" + writeToken(t, testOperatorToken)
	var out strings.Builder
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	require.NoError(t, ExperimentCommand(t.Context(), []string{"start", "--decider=" + a.Addr(), ops, "--block=1h", "--burn-in=0s",
		"--start=" + start.Format(time.RFC3339), "--models=vendor/model"}, &out))
	require.Eventually(t, func() bool { _, ok := b.exps.Arm("vendor/model", time.Now()); return ok }, 10*time.Second, 10*time.Millisecond,
		"the other replica follows the experiment")
	record := func(d *Decider, id string) *switchboardv1.ActivityRecord {
		return &switchboardv1.ActivityRecord{Id: id, CreateTime: timestamppb.Now(), TenantId: "acme", Model: "vendor/model",
			Status: switchboardv1.CallStatus_CALL_STATUS_OK, CostUsd: 0.001, Caps: testCaps, Grant: d.grants.Issue(id, "acme", "", testCaps)}
	}
	sendActivity(t, edgeA, 1, record(a, "on-a"))
	sendActivity(t, edgeB, 1, record(b, "on-b-1"), record(b, "on-b-2"))
	require.Eventually(t, func() bool {
		out.Reset()
		err := ExperimentCommand(t.Context(), []string{"show", "--decider=" + a.Addr(), ops}, &out)
		return err == nil && strings.Contains(out.String(), "replicas: other, test") && strings.Contains(out.String(), "3 requests in 1 blocks")
	}, 10*time.Second, 20*time.Millisecond, "replica a reads b's saved figures with its own: %s", &out)
}
