package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/childproc"
)

// startRole starts this binary as one of the benchmark's own services and
// waits for the address it announces.
func startRole(ctx context.Context, role, arg, dir string) (*childproc.Child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self) //nolint:gosec // G204: this very binary, as a child.
	cmd.Env = append(os.Environ(), roleEnv+"="+role, roleArgEnv+"="+arg)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c, err := childproc.Start(role, cmd, filepath.Join(dir, role+".log"))
	if err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), readyPrefix)
	if err != nil || !ok {
		c.Stop()
		return nil, fmt.Errorf("%s: %w (%q)", role, errors.Join(errNoAnnounce, err), line)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	c.Addr = addr
	return c, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Models of the benchmark catalog: both are served by the fake upstream,
// the second with its chunks slowInterval apart.
const (
	benchModel = "bench/model"
	slowModel  = "bench/slow"
)

// catalogYAML is the benchmark's catalog: the fake upstream as the only
// endpoint of two models, a tenant without limits (the load is the
// point), and the edge as a caller of role edge, as deploy/local/run.sh
// sets them up.
func catalogYAML(upstreamAddr, keySHA, edgeTokenSHA string) string {
	endpoint := func(base string) string {
		return `      - provider: fake
        base_url: http://` + upstreamAddr + base + `
        upstream_model: bench-model
        api_key_env: SWITCHBOARD_PROVIDER_KEY_BENCH
        price: {input: 0.20, cached_input: 0.05, output: 0.80}
        context_length: 131072
`
	}
	return `models:
  - id: ` + benchModel + `
    endpoints:
` + endpoint("/v1") + `  - id: ` + slowModel + `
    endpoints:
` + endpoint("/slow/v1") + `tenants:
  - id: bench
    api_keys_sha256: ["` + keySHA + `"]
callers:
  - id: bench-edge
    role: edge
    tokens_sha256: ["` + edgeTokenSHA + `"]
`
}

// system is the whole default Switchboard: a decider with its embedded
// etcd, broker, reports and activity log, and an edge.
type system struct {
	decider, edge *childproc.Child
	key           string // the tenant's API key
	edgeToken     string // the edge's bearer token for the decider
}

func (s *system) stop() {
	s.edge.Stop() // first, so its last reports reach the decider
	s.decider.Stop()
}

// startSystem starts bin/decider and bin/edge in dir with a catalog whose
// only endpoint is the upstream at upstreamAddr, and waits until the edge
// answers a request.
func startSystem(ctx context.Context, cfg config, dir, upstreamAddr string) (_ *system, err error) {
	s := &system{key: "sk-sb-bench-" + randomHex(16), edgeToken: randomHex(32)}
	edgeToken := s.edgeToken
	tokenFile := filepath.Join(dir, "edge-token")
	if err := os.WriteFile(tokenFile, []byte(edgeToken), 0o600); err != nil {
		return nil, err
	}
	catalogFile := filepath.Join(dir, "catalog.yaml")
	if err := os.WriteFile(catalogFile, []byte(catalogYAML(upstreamAddr, sha256Hex(s.key), sha256Hex(edgeToken))), 0o600); err != nil {
		return nil, err
	}
	var ports [4]string
	for i := range ports {
		if ports[i], err = childproc.FreePort(); err != nil {
			return nil, err
		}
	}
	deciderAddr, deciderDebug, edgeAddr, edgeDebug := ports[0], ports[1], ports[2], ports[3]
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	// As deploy/local/run.sh starts them, but without probes: they would
	// send the fake upstream extra requests in the middle of a phase.
	s.decider, err = childproc.Start("decider", exec.CommandContext(ctx, cfg.deciderBin, //nolint:gosec // G204: the binary the operator named.
		"--listen", deciderAddr, "--catalog", catalogFile, "--data-dir", filepath.Join(dir, "decider"),
		"--etcd-listen", "127.0.0.1:0", "--drain-delay", "0s", "--probe-interval", "0", "--admin-listen", deciderDebug, "--pprof",
	), filepath.Join(dir, "decider.log"))
	if err != nil {
		return nil, err
	}
	s.decider.Addr, s.decider.Debug = deciderAddr, deciderDebug
	edgeCmd := exec.CommandContext(ctx, cfg.edgeBin, //nolint:gosec // G204: the binary the operator named.
		"--listen", edgeAddr, "--decider", deciderAddr, "--decider-token-file", tokenFile, "--admin-listen", edgeDebug, "--pprof",
		"--shutdown-grace", "5s")
	edgeCmd.Env = append(os.Environ(), "SWITCHBOARD_PROVIDER_KEY_BENCH=sk-fake")
	s.edge, err = childproc.Start("edge", edgeCmd, filepath.Join(dir, "edge.log"))
	if err != nil {
		return nil, err
	}
	s.edge.Addr, s.edge.Debug = edgeAddr, edgeDebug
	if err := s.waitReady(ctx, cfg.startTimeout); err != nil {
		return nil, fmt.Errorf("%w (logs in %s)", err, dir)
	}
	return s, nil
}

// waitReady polls until the edge answers a chat completion with 200: the
// decider serves its catalog and the edge has its key set.
func (s *system) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var last string
	for {
		for _, c := range []*childproc.Child{s.decider, s.edge} {
			select {
			case <-c.Exited():
				return fmt.Errorf("%s exited: %w", c.Name, c.Err())
			default:
			}
		}
		req := newRequest(ctx, "http://"+s.edge.Addr+"/v1/chat/completions", s.key, benchModel, false)
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("switchboard not ready: %s", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
