package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain runs this test binary as the benchmark's upstream or proxy when
// the benchmark starts it as one, as main does.
func TestMain(m *testing.M) {
	if ran, err := runRole(); ran {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []int{1, 64}, cfg.concurrency)
	require.Equal(t, 1000, cfg.streams)
	require.Equal(t, 3, cfg.rounds)
	// The default run stays within about two minutes: every load against
	// every target in every round, and the slow streams against each.
	perPhase := cfg.duration + cfg.warmup
	total := time.Duration(cfg.rounds*len(cfg.concurrency)*2*3)*perPhase + 3*(cfg.slowDuration+max(cfg.warmup, time.Second)) +
		time.Duration(cfg.rounds*len(cfg.concurrency)*len(rpcKinds))*(cfg.duration/2+cfg.warmup)
	require.Less(t, total, 2*time.Minute)

	cfg, err = parseFlags([]string{"--concurrency", "2, 8", "--duration", "100ms", "--profile-dir", "p"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []int{2, 8}, cfg.concurrency)
	require.Equal(t, 100*time.Millisecond, cfg.duration)
	require.Equal(t, "p", cfg.profileDir)

	_, err = parseFlags([]string{"--concurrency", "0,x", "--rounds", "0", "extra"}, io.Discard)
	require.ErrorContains(t, err, `"0"`)
	require.ErrorContains(t, err, `"x"`)
	require.ErrorContains(t, err, "--rounds")
	require.ErrorContains(t, err, "unexpected arguments")
}

// TestSmoke builds the decider and the edge and runs the whole benchmark
// for a fraction of a second per phase: every target gets a row with
// requests served, and the profiles are written. It asserts no speed.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("long (go build of the decider and the edge, about 65 s): make test-long runs it")
	}
	bin := t.TempDir()
	for _, pkg := range []string{"services/decider/cmd/decider", "services/edge/cmd/edge"} {
		out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, //nolint:gosec // G204: fixed packages of this repository.
			"github.com/switchboard-ai/switchboard/"+pkg).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	profiles := t.TempDir()
	cfg := config{
		duration: 200 * time.Millisecond, warmup: 50 * time.Millisecond, rounds: 1, concurrency: []int{1, 4},
		streams: 20, slowInterval: 20 * time.Millisecond, slowDuration: 300 * time.Millisecond,
		deciderBin: filepath.Join(bin, "decider"), edgeBin: filepath.Join(bin, "edge"),
		profileDir: profiles, profileSeconds: 1, startTimeout: time.Minute, rpc: true,
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute) // hang guard only
	defer cancel()
	var out bytes.Buffer
	res, err := run(ctx, cfg, &out)
	require.NoError(t, err, out.String())

	require.Len(t, res.loads, 4)
	for _, l := range res.loads {
		rs := rows(l, res.samples[l])
		require.Len(t, rs, 3, l.String())
		for _, r := range rs {
			require.Positive(t, r.rps.Med, "%s %s", l, r.target)
			require.Zero(t, r.errs.Max, "%s %s: errors", l, r.target)
		}
	}
	for _, name := range []string{direct, proxy, switchboard} {
		require.Positive(t, res.slow[name].rps(), "slow streams %s", name)
	}
	require.Positive(t, res.memory.streams, "memory read with streams open")
	for _, c := range cfg.concurrency {
		for _, k := range rpcKinds {
			ss := res.rpc[rpcKey{k.name, c}]
			require.Len(t, ss, cfg.rounds, "%s at %d", k.name, c)
			require.Positive(t, ss[0].ok, "%s at %d", k.name, c)
			require.Zero(t, ss[0].errs, "%s at %d", k.name, c)
		}
	}
	require.NoError(t, res.memory.edgeHeapErr)

	text := out.String()
	for _, want := range []string{"c=1 streaming", "c=4 non-streaming", "switchboard", "| load | ReverseProxy | Switchboard | target |"} {
		require.Contains(t, text, want)
	}
	for _, f := range []string{"edge.cpu.pprof", "edge.allocs.pprof", "decider.cpu.pprof", "decider.allocs.pprof"} {
		st, err := os.Stat(filepath.Join(profiles, f))
		require.NoError(t, err)
		require.Positive(t, st.Size(), f)
		top, err := os.ReadFile(filepath.Join(profiles, f+".top.txt"))
		require.NoError(t, err)
		require.True(t, strings.Contains(string(top), "flat%"), "%s: %s", f, top)
	}

	// --serve starts the same three targets for another load generator and
	// describes each request in vegeta's target format.
	cfg.serve = t.TempDir()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := run(sctx, cfg, pw)
		_ = pw.CloseWithError(err)
		done <- err
	}()
	lines := bufio.NewScanner(pr)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "ready:") {
	}
	for _, name := range []string{direct, proxy, switchboard} {
		for _, kind := range []string{"plain", "stream"} {
			spec, err := os.ReadFile(filepath.Join(cfg.serve, name+"-"+kind+".txt"))
			require.NoError(t, err)
			resp := sendSpec(t, string(spec))
			require.Equal(t, http.StatusOK, resp, "%s %s", name, kind)
		}
	}
	stop()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	require.NoError(t, <-done)
}

// sendSpec sends the request a vegeta target spec describes (a request
// line, headers, then @ and the body's file) and returns its status.
func sendSpec(t *testing.T, spec string) int {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(spec), "\n")
	method, url, ok := strings.Cut(lines[0], " ")
	require.True(t, ok, spec)
	bodyPath, ok := strings.CutPrefix(lines[len(lines)-1], "@")
	require.True(t, ok, spec)
	body, err := os.ReadFile(bodyPath)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
	require.NoError(t, err)
	for _, h := range lines[1 : len(lines)-1] {
		k, v, ok := strings.Cut(h, ": ")
		require.True(t, ok, h)
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	return resp.StatusCode
}
