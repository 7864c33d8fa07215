package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles/tlstest"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// The clients of clients/ (Python and TypeScript) call a real decider as a
// service and dispatch to provsim with their own HTTP client; afterwards
// the decider is read: every reservation released, the calls' timings in
// its statistics, the requests in its activity log.

const (
	// clientsToken is the service the clients call as, for acme and paced.
	clientsToken = "clients-service-token"
	// clientsModel is served by alpha (provsim) and by down, whose
	// endpoint refuses connections: a client told to try down first falls
	// back to alpha.
	clientsModel = "client-model"
	// clientsConcurrency is acme's concurrent_requests limit: the bucket is
	// full again only once every reservation of acme was released.
	clientsConcurrency = 8
)

const clientsSimConfig = `
seed: 11
providers:
  - name: alpha
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 20ms}, default_output_tokens: 12}
`

// closedAddr is a loopback address nobody listens on: a port just freed.
// (fetch refuses the well-known ports, port 1 among them, before trying.)
func closedAddr(t *testing.T) string {
	t.Helper()
	return freeAddr(t)
}

// clientsResults are the request ids a client program wrote, by case.
type clientsResults map[string]string

func TestClients(t *testing.T) {
	python := "/usr/bin/python3"
	_, err := os.Stat(python)
	require.NoError(t, err, "the Python client's tests need Debian's python3 with python3-grpcio and python3-protobuf (.ci/run installs them)")

	figures := promptFigures(t)
	// Each client has a system and a results file of its own: the two run
	// side by side.
	t.Run("python", func(t *testing.T) {
		t.Parallel()
		d, env := startClientsSystem(t)
		results := filepath.Join(t.TempDir(), "results.json")
		cmd := exec.CommandContext(t.Context(), python, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
		cmd.Dir = filepath.Join("..", "clients", "python")
		cmd.Env = append(os.Environ(), append(env, "SWITCHBOARD_RESULTS="+results, "SWITCHBOARD_PROMPT_FIGURES="+figures, "PYTHONDONTWRITEBYTECODE=1")...)
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "python -m unittest:\n%s", out)
		t.Logf("python -m unittest:\n%s", out)
		runReadmeExample(t, filepath.Join("..", "clients", "python"), env, python, filepath.Join("examples", "readme.py"), "")
		checkClientsState(t, d, readResults(t, results))
	})
	t.Run("typescript", func(t *testing.T) {
		t.Parallel()
		node, dir, dist := buildTypeScriptClient(t)
		d, env := startClientsSystem(t)
		results := filepath.Join(t.TempDir(), "results.json")
		cmd := exec.CommandContext(t.Context(), node, "--test", "--test-concurrency=1", "--test-reporter=spec",
			filepath.Join(dist, "test", "prompt.test.js"), filepath.Join(dist, "test", "system.test.js"))
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), append(env, "SWITCHBOARD_RESULTS="+results, "SWITCHBOARD_PROMPT_FIGURES="+figures)...)
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "node --test:\n%s", out)
		t.Logf("node --test:\n%s", out)
		runReadmeExample(t, dir, env, node, filepath.Join(dist, "examples", "readme.js"), filepath.Join("examples", "readme.ts"))
		checkClientsState(t, d, readResults(t, results))
	})
}

// buildTypeScriptClient compiles the TypeScript client (its tsc, pinned by
// its lock) into a directory of the test's own beside dist, removed when
// the test ends (tests in other processes may compile it at the same time),
// and returns node, the client's directory and that output directory's
// name in it.
func buildTypeScriptClient(t *testing.T) (node, dir, outDir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "the TypeScript client's tests need node (v20 or later) on PATH")
	dir = filepath.Join("..", "clients", "typescript")
	_, err = os.Stat(filepath.Join(dir, "node_modules", "typescript", "bin", "tsc"))
	require.NoError(t, err, "the TypeScript client's packages are not installed: run make clients (npm ci --prefix clients/typescript)")
	tmp, err := os.MkdirTemp(dir, "dist-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	outDir = filepath.Base(tmp)
	tsc := exec.CommandContext(t.Context(), node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", ".", "--outDir", outDir)
	tsc.Dir = dir
	out, err := tsc.CombinedOutput()
	require.NoError(t, err, "tsc:\n%s", out)
	return node, dir, outDir
}

// TestClientsOverMutualTLS: each client reaches a decider serving mutual
// TLS with the options the edge's --decider-ca-file, --decider-cert-file,
// --decider-key-file and --decider-server-name name, as the service its
// certificate names, and is answered.
func TestClientsOverMutualTLS(t *testing.T) {
	o := mtlsStack("  - {id: clients, role: service, tenants: [acme]}\n")
	o.noEdge = true
	s := startStack(t, o)
	svc, err := s.tls.ca.Issue("clients", tlstest.ClientAuth, time.Hour)
	require.NoError(t, err)
	cert, key, err := svc.Write(s.tls.dir, "clients")
	require.NoError(t, err)
	env := []string{"SWITCHBOARD_DECIDER=" + s.decider.Addr(), "SWITCHBOARD_CA=" + s.tls.caFile, "SWITCHBOARD_CERT=" + cert,
		"SWITCHBOARD_KEY=" + key, "SWITCHBOARD_SERVER_NAME=" + deciderDNS, "SWITCHBOARD_MODEL=" + model}
	programs := []struct {
		name, dir string
		args      []string
	}{
		{"python", filepath.Join("..", "clients", "python"), []string{"/usr/bin/python3", "-B", "-c", `
import os
from switchboard.v1 import router_pb2
from switchboard_client import Router
e = os.environ
with Router(e["SWITCHBOARD_DECIDER"], ca_file=e["SWITCHBOARD_CA"], cert_file=e["SWITCHBOARD_CERT"], key_file=e["SWITCHBOARD_KEY"],
            server_name=e["SWITCHBOARD_SERVER_NAME"]) as r:
    print([m.id for m in r.stub.ListModels(router_pb2.ListModelsRequest(identity=Router.identity(tenant_id="acme")), timeout=10).models])
`}},
		{"typescript", filepath.Join("..", "clients", "typescript"), []string{"node", "--input-type=module", "-e", `
import { Router } from "./${DIST}/src/index.js";
const e = process.env;
const r = new Router({ target: e.SWITCHBOARD_DECIDER, caFile: e.SWITCHBOARD_CA, certFile: e.SWITCHBOARD_CERT, keyFile: e.SWITCHBOARD_KEY,
  serverName: e.SWITCHBOARD_SERVER_NAME });
console.log((await r.rpc.listModels({ identity: Router.identity({ tenantId: "acme" }) })).models.map((m) => m.id));
`}},
	}
	for _, p := range programs {
		t.Run(p.name, func(t *testing.T) {
			args := p.args
			if p.name == "typescript" {
				_, _, dist := buildTypeScriptClient(t)
				args = append(args[:len(args)-1:len(args)-1], strings.ReplaceAll(args[len(args)-1], "${DIST}", dist))
			}
			cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
			cmd.Dir = p.dir
			cmd.Env = append(os.Environ(), env...)
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s:\n%s", p.name, out)
			require.Contains(t, string(out), model, "%s listed the model over mutual TLS", p.name)
		})
	}
}

// promptFigures writes the edge's figures (services/edge/cmd/promptfigures)
// of clients/testdata/prompts.json into a file and returns its path.
func promptFigures(t *testing.T) string {
	t.Helper()
	in, err := os.Open(filepath.Join("..", "clients", "testdata", "prompts.json"))
	require.NoError(t, err)
	defer in.Close()
	p := filepath.Join(t.TempDir(), "figures.json")
	out, err := os.Create(p)
	require.NoError(t, err)
	defer out.Close()
	cmd := exec.CommandContext(t.Context(), "go", "run", "../services/edge/cmd/promptfigures")
	cmd.Stdin, cmd.Stdout = in, out
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), "promptfigures: %s", stderr.String())
	return p
}

// startClientsSystem starts provsim and a decider for one client program
// and returns the decider and the environment that tells the program where
// they are.
func startClientsSystem(t *testing.T) (*deciderapp.Decider, []string) {
	t.Helper()
	d := startStack(t, stackOptions{sim: clientsSimConfig, noEdge: true,
		catalog: func(url func(string) string) string {
			cat := fmt.Sprintf(`models:
  - id: %s
    endpoints:
      - {provider: alpha, base_url: %s, upstream_model: %s, price: {input: 0.20, output: 0.80}}
      - {provider: down, base_url: http://%s/v1, upstream_model: %s, price: {input: 0.10, output: 0.40}}
workload_classes:
  partner: {max_depth: 0}
tenants:
  - {id: acme, api_keys_sha256: [%s], limits: [{unit: concurrent_requests, capacity: %d}]}
  - {id: paced, api_keys_sha256: [%s], classes: [partner], default_class: partner, limits: [{unit: requests, per: minute, capacity: 1}]}
  - {id: globex, api_keys_sha256: [%s]}
`, clientsModel, url("alpha"), simModel, closedAddr(t), simModel, catalog.HashKey(testKey), clientsConcurrency,
				catalog.HashKey("sk-clients-paced"), catalog.HashKey("sk-clients-globex"))
			return withCallers(cat) + "  - {id: clients, role: service, tenants: [acme, paced], tokens_sha256: [" + catalog.HashKey(clientsToken) + "]}\n"
		},
		// Probes off: the statistics read afterwards are the clients'.
		tune: func(c *deciderapp.Config) { c.NoProbes = true }}).decider
	return d, []string{
		"SWITCHBOARD_DECIDER=" + d.Addr(),
		"SWITCHBOARD_TOKEN_FILE=" + tokenFile(t, clientsToken),
		"SWITCHBOARD_TENANT=acme",
		"SWITCHBOARD_PACED_TENANT=paced",
		"SWITCHBOARD_MODEL=" + clientsModel,
	}
}

func readResults(t *testing.T, path string) clientsResults {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err, "the client program wrote no results")
	var r clientsResults
	require.NoError(t, json.Unmarshal(b, &r))
	for _, c := range []string{"answer", "stream", "fallback", "crash", "paced"} {
		require.NotEmpty(t, r[c], "case %s did not run", c)
	}
	return r
}

// checkClientsState reads the decider after a client program: acme's
// reservations all released, the streams' timings in alpha's statistics,
// and every request in the activity log as it ended.
func checkClientsState(t *testing.T, d *deciderapp.Decider, r clientsResults) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	var limits []deciderapp.LimitStatus
	for _, l := range d.TenantLimits("acme") {
		if l.Unit == "concurrent_requests" {
			limits = append(limits, l)
		}
	}
	require.Len(t, limits, 1)
	require.InDelta(t, float64(clientsConcurrency), limits[0].Remaining, 1e-9, "every reservation of acme released, the crashed stream's too")

	op := dialAs(t, d.Addr(), testOperatorToken)
	explain, err := op.Explain(ctx, &switchboardv1.ExplainRequest{
		Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: clientsModel,
		Stream: true, Tokens: &switchboardv1.TokenEstimate{InputTokens: 30},
	})
	require.NoError(t, err)
	samples := map[string]int64{}
	for _, c := range explain.GetDecision().GetCandidates() {
		samples[c.GetProvider()] = c.GetSamples()
	}
	// The stream, the fallback's stream and the crashed stream's first
	// token: each a first-token sample of alpha.
	require.GreaterOrEqual(t, samples["alpha"], int64(2), "the clients' streamed timings are alpha's samples: %v", samples)

	svc := dialAs(t, d.Addr(), clientsToken)
	acts, err := svc.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: &switchboardv1.Identity{TenantId: "acme"}, Limit: 50})
	require.NoError(t, err)
	byID := map[string]*switchboardv1.ActivityRecord{}
	var interrupted int
	for _, rec := range acts.GetRecords() {
		byID[rec.GetId()] = rec
		if rec.GetStatus() == switchboardv1.CallStatus_CALL_STATUS_INTERRUPTED {
			interrupted++
		}
	}
	for _, c := range []string{"answer", "stream", "fallback"} {
		rec := byID[r[c]]
		require.NotNil(t, rec, "%s (%s) is in acme's activity", c, r[c])
		require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_OK, rec.GetStatus(), c)
		require.Equal(t, "alpha", rec.GetProvider(), c)
		require.Positive(t, rec.GetUsage().GetOutputTokens(), c)
		require.Positive(t, rec.GetCostUsd(), c)
	}
	require.Len(t, byID[r["fallback"]].GetAttempts(), 2, "the fallback's record holds both attempts")
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, byID[r["fallback"]].GetAttempts()[0].GetOutcome())
	require.Equal(t, 1, interrupted, "the crashed stream is recorded as interrupted")

	paced, err := svc.ListActivity(ctx, &switchboardv1.ListActivityRequest{Identity: &switchboardv1.Identity{TenantId: "paced"}})
	require.NoError(t, err)
	require.Len(t, paced.GetRecords(), 1, "paced's one admitted request, not the refused one")
	require.Equal(t, r["paced"], paced.GetRecords()[0].GetId())
}

// runReadmeExample runs a client's README example (file, under dir; src is
// its source when file is compiled from one) against the system env names,
// and checks that the README shows the source as it is: the part between
// its two "--- readme ---" lines.
func runReadmeExample(t *testing.T, dir string, env []string, runtime, file, src string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), runtime, file)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append(env, "PYTHONDONTWRITEBYTECODE=1")...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s:\n%s", file, out)
	require.Contains(t, string(out), "alpha", "the example printed its answer's provider")

	if src == "" {
		src = file
	}
	code, err := os.ReadFile(filepath.Join(dir, src))
	require.NoError(t, err)
	parts := strings.Split(string(code), "--- readme ---\n")
	require.Len(t, parts, 3, "%s marks its README part with two --- readme --- lines", src)
	shown := parts[1][:strings.LastIndex(parts[1], "\n")+1] // without the closing marker's comment sign
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(readme), shown, "README.md shows %s as it is", src)
}
