package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// The official Node SDKs (@anthropic-ai/sdk and openai, pinned in
// tests/nodesdk/package-lock.json and installed by make nodesdk) are driven
// by the node --test scripts of tests/nodesdk against a whole Switchboard on
// loopback, each script against a Switchboard of its own.

const (
	// nodePacedKey is a tenant's key limited to one request a second: its
	// second request within the second is refused with a short
	// Retry-After, which an SDK's default retry waits out.
	nodePacedKey = "sk-e2e-paced-tenant-key"
	// nodeMaxAttempts is the edge's --max-attempts in these tests: the most
	// provider calls one client request may cost, whatever the client's
	// own retries.
	nodeMaxAttempts = 3
	// nodeSpareModels is how many models besides model the catalog serves
	// on the same three providers. A case that makes every endpoint fail
	// takes one of its own, so the pauses its failures leave on those
	// endpoints do not meet the next case.
	nodeSpareModels = 8
	// nodeMaxBodyBytes is the edge's --max-body-bytes in these tests, small
	// enough for a script to exceed it cheaply.
	nodeMaxBodyBytes = 256 << 10
	// nodeFirstTokenTimeout is the edge's --first-token-timeout: a provider
	// that hangs costs this per attempt.
	nodeFirstTokenTimeout = time.Second
)

// nodeSimConfig is three providers of simModel, without API keys, whose unavailable fault
// answers 500: the same 500 from two endpoints is the request's failure.
const nodeSimConfig = `
seed: 7
providers:
  - name: alpha
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 5ms}, default_output_tokens: 8, faults: [{kind: unavailable, rate: 0, status: 500}]}
  - name: beta
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 5ms}, default_output_tokens: 8, faults: [{kind: unavailable, rate: 0, status: 500}]}
  - name: gamma
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 5ms}, default_output_tokens: 8, faults: [{kind: unavailable, rate: 0, status: 500}]}
`

// nodeSDKDir is where the Node scripts and their node_modules are.
const nodeSDKDir = "nodesdk"

func TestNodeSDKs(t *testing.T) {
	node, err := exec.LookPath("node")
	require.NoError(t, err, "the Node SDK tests need node (v20 or later) on PATH")
	_, err = os.Stat(filepath.Join(nodeSDKDir, "node_modules", "openai", "package.json"))
	require.NoError(t, err, "the Node SDKs are not installed: run make nodesdk (npm ci --prefix tests/nodesdk)")
	scripts, err := filepath.Glob(filepath.Join(nodeSDKDir, "*.test.mjs"))
	require.NoError(t, err)
	require.NotEmpty(t, scripts)
	for _, script := range scripts {
		t.Run(strings.TrimSuffix(filepath.Base(script), ".test.mjs"), func(t *testing.T) {
			// Each script has a system of its own: the scripts run side by
			// side, as many at once as go test's -parallel lets.
			t.Parallel()
			env := startNodeSystem(t)
			// One test at a time: a case reads the providers' counters
			// before and after its call, which another case's calls would
			// disturb.
			cmd := exec.CommandContext(t.Context(), node, "--test", "--test-concurrency=1", "--test-reporter=spec", filepath.Base(script))
			cmd.Dir = nodeSDKDir
			cmd.Env = append(os.Environ(), env...)
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "node --test %s:\n%s", script, out)
			t.Logf("node --test %s:\n%s", script, out)
		})
	}
}

// startNodeSystem starts the simulator, a decider and an edge for one Node
// script and returns the environment that tells the script where they are.
func startNodeSystem(t *testing.T) []string {
	t.Helper()
	providers := []string{"alpha", "beta", "gamma"}
	var spares strings.Builder
	for i := 1; i <= nodeSpareModels; i++ {
		if i > 1 {
			spares.WriteByte(',')
		}
		fmt.Fprintf(&spares, "%s-spare-%d", model, i)
	}
	s := startStack(t, stackOptions{sim: nodeSimConfig,
		catalog: func(url func(string) string) string {
			var models strings.Builder
			for _, id := range append([]string{model}, strings.Split(spares.String(), ",")...) {
				fmt.Fprintf(&models, "  - id: %s\n    endpoints:\n", id)
				for i, p := range providers {
					fmt.Fprintf(&models, "      - {provider: %s, base_url: %s, upstream_model: %s, price: {input: %.2f, output: %.2f}}\n",
						p, url(p), simModel, 0.10+0.05*float64(i), 0.50+0.10*float64(i))
				}
			}
			// paced's requests are partner's, a class that never waits in the
			// queue: a request over its limit is refused at once, with the
			// Retry-After of its bucket.
			return "models:\n" + models.String() + fmt.Sprintf(`workload_classes:
  partner: {max_depth: 0}
tenants:
  - {id: acme, api_keys_sha256: [%s]}
  - {id: paced, api_keys_sha256: [%s], classes: [partner], default_class: partner, limits: [{unit: requests, per: second, capacity: 1}]}
`, catalog.HashKey(testKey), catalog.HashKey(nodePacedKey))
		},
		// Probes off: the SDK tests count the provider calls of each SDK
		// call (a probe among them read as a retry the SDK made).
		tune: func(c *deciderapp.Config) { c.NoProbes = true },
		edgeArgs: []string{"--max-attempts=" + strconv.Itoa(nodeMaxAttempts),
			"--max-body-bytes=" + strconv.Itoa(nodeMaxBodyBytes), "--first-token-timeout=" + nodeFirstTokenTimeout.String()}})
	sim, e := s.sim, s.edge
	stats := make([]string, len(providers))
	for i, p := range providers {
		stats[i] = "http://" + sim.Provider(p).Addr() + "/admin/stats"
	}
	return []string{
		// The edge's root, as an Anthropic client's base URL is; OpenAI's
		// clients add /v1 themselves.
		"SWITCHBOARD_URL=" + strings.TrimSuffix(e.URL(), "/v1"),
		"SWITCHBOARD_API_KEY=" + testKey,
		"SWITCHBOARD_PACED_API_KEY=" + nodePacedKey,
		"SWITCHBOARD_MODEL=" + model,
		"SWITCHBOARD_SPARE_MODELS=" + spares.String(),
		"SWITCHBOARD_MAX_ATTEMPTS=" + strconv.Itoa(nodeMaxAttempts),
		"SWITCHBOARD_MAX_BODY_BYTES=" + strconv.Itoa(nodeMaxBodyBytes),
		"SWITCHBOARD_PROVSIM_STATS=" + strings.Join(stats, ","),
	}
}
