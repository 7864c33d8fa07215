package loadtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/childproc"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	edgeapp "github.com/switchboard-ai/switchboard/services/edge/app"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// Binaries name the built services (make build) to run as child
// processes; without them the services run inside the harness's process.
type Binaries struct {
	Decider, Edge, Provsim string
}

func (b Binaries) set() bool { return b.Decider != "" || b.Edge != "" || b.Provsim != "" }

// system is the whole default Switchboard on loopback: the provider
// simulator, a decider with its embedded etcd, and one edge. They run as
// child processes (Binaries) or in this process; either way they reach
// each other only through their sockets.
type system struct {
	dir  string
	keep bool
	// edgeURL is the base URL of the edge's OpenAI-compatible API (…/v1).
	edgeURL string
	// providers are the base URLs (…/v1) of the simulated providers.
	providers map[string]string
	// maxAttempts is the edge's --max-attempts: endpoints tried per request.
	maxAttempts int
	// stops stop what was started, edge first (its last reports reach the
	// decider), then the decider, then the simulator.
	stops []func()
}

// edgeCallerToken and replicaCallerToken authenticate the edge and the
// decider itself (forwarding to the broker's owner) to the decider.
const (
	edgeCallerToken    = "loadtest-edge-token"
	replicaCallerToken = "loadtest-replica-token"
)

// deciderArgs are the decider's flags: its defaults, except that probes
// and exploration are off (they would send the providers calls of their
// own and pick endpoints at random, blurring what each scenario's traffic
// did).
func deciderArgs(listen, dir, catPath, tokenFile string) []string {
	return []string{
		"--listen=" + listen, "--etcd-listen=127.0.0.1:0", "--data-dir=" + filepath.Join(dir, "decider"), "--catalog=" + catPath,
		"--id=brokerload", "--drain-delay=0s", "--shutdown-timeout=5s", "--probe-interval=0", "--exploration=-1", "--token-file=" + tokenFile,
	}
}

// edgeArgs are the edge's flags: its defaults, except for longer guards on
// its decider calls (on a loaded machine the default of a few hundred
// milliseconds would turn a slow answer into a skipped fallback, which is
// not what these scenarios measure) and a short shutdown.
func edgeArgs(listen, deciderAddr, tokenFile string) []string {
	return []string{
		"--listen=" + listen, "--decider=" + deciderAddr, "--decider-token-file=" + tokenFile,
		"--reserve-timeout=5s", "--hedge-acquire-timeout=5s", "--drain-delay=0s", "--shutdown-grace=2s",
	}
}

// startSystem starts the simulator, the decider and the edge for p, logging
// into files under a new temporary directory.
func startSystem(ctx context.Context, p *plan, bins Binaries, keep bool) (_ *system, err error) {
	dir, err := os.MkdirTemp("", "brokerload-")
	if err != nil {
		return nil, err
	}
	s := &system{dir: dir, keep: keep, providers: map[string]string{}}
	defer func() { //nolint:contextcheck // stopping must not depend on the start's context, which may be what ended it
		if err != nil {
			s.stop()
			if keep {
				err = fmt.Errorf("%w (logs in %s)", err, dir)
			}
		}
	}()
	replicaToken := filepath.Join(dir, "replica-token")
	edgeToken := filepath.Join(dir, "edge-token")
	if err := errors.Join(os.WriteFile(replicaToken, []byte(replicaCallerToken), 0o600),
		os.WriteFile(edgeToken, []byte(edgeCallerToken), 0o600)); err != nil {
		return nil, err
	}
	// The edge's --max-attempts, as its own parser defaults it.
	ecfg, err := edgeapp.ParseFlags(edgeArgs("127.0.0.1:0", "127.0.0.1:1", edgeToken), func(string) string { return "" })
	if err != nil {
		return nil, fmt.Errorf("edge flags: %w", err)
	}
	s.maxAttempts = ecfg.MaxAttempts
	if bins.set() {
		err = s.startBinaries(ctx, p, bins, replicaToken, edgeToken)
	} else {
		err = s.startInProcess(ctx, p, replicaToken, edgeToken)
	}
	return s, err
}

// writeCatalog checks and writes the catalog with the providers' URLs.
func (s *system) writeCatalog(p *plan) (string, error) {
	catYAML := p.catalogYAML(s.providers)
	if _, err := catalog.Parse([]byte(catYAML)); err != nil {
		if p.classes {
			return "", fmt.Errorf("the catalog with workload classes and tenant weights (--classes) is refused: %w", err)
		}
		return "", fmt.Errorf("catalog: %w", err)
	}
	catPath := filepath.Join(s.dir, "catalog.yaml")
	return catPath, os.WriteFile(catPath, []byte(catYAML), 0o600)
}

// startInProcess runs the three services in this process.
func (s *system) startInProcess(ctx context.Context, p *plan, replicaToken, edgeToken string) error {
	logger := func(name string) (*slog.Logger, error) {
		f, err := os.Create(filepath.Join(s.dir, name+".log"))
		if err != nil {
			return nil, err
		}
		s.stops = append(s.stops, func() { _ = f.Close() })
		return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})), nil
	}
	simCfg, err := provsim.ParseConfig([]byte(p.simYAML(nil)))
	if err != nil {
		return fmt.Errorf("simulator configuration: %w", err)
	}
	simLog, err := logger("provsim")
	if err != nil {
		return err
	}
	sim, err := provsim.Start(ctx, simCfg, simLog)
	if err != nil {
		return err
	}
	s.stops = append(s.stops, func() { _ = sim.Close() }) //nolint:contextcheck // stopping must not depend on the start's context
	for _, pr := range sim.Providers() {
		s.providers[pr.Name()] = pr.URL()
	}
	catPath, err := s.writeCatalog(p)
	if err != nil {
		return err
	}
	dcfg, err := deciderapp.ParseFlags(deciderArgs("127.0.0.1:0", s.dir, catPath, replicaToken), func(string) string { return "" }, io.Discard)
	if err != nil {
		return fmt.Errorf("decider flags: %w", err)
	}
	decLog, err := logger("decider")
	if err != nil {
		return err
	}
	decider, err := deciderapp.Start(ctx, dcfg, decLog)
	if err != nil {
		return fmt.Errorf("decider: %w", err)
	}
	s.stops = append(s.stops, decider.Close)
	ecfg, err := edgeapp.ParseFlags(edgeArgs("127.0.0.1:0", decider.Addr(), edgeToken), func(string) string { return "" })
	if err != nil {
		return fmt.Errorf("edge flags: %w", err)
	}
	ecfg.Getenv = func(string) string { return "" } // the simulated providers need no credential
	edgeLog, err := logger("edge")
	if err != nil {
		return err
	}
	edge, err := edgeapp.Start(ctx, ecfg, edgeLog)
	if err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	s.stops = append(s.stops, func() { _ = edge.Close() }) //nolint:contextcheck // stopping must not depend on the start's context
	s.edgeURL = edge.URL()
	return nil
}

// startBinaries runs the three services as child processes, on ports
// chosen beforehand, as edgebench runs the decider and the edge.
func (s *system) startBinaries(ctx context.Context, p *plan, bins Binaries, replicaToken, edgeToken string) error {
	if bins.Decider == "" || bins.Edge == "" || bins.Provsim == "" {
		return errors.New("the decider, edge and provsim binaries are needed together")
	}
	listen := map[string]string{}
	for _, name := range p.providerNames() {
		addr, err := childproc.FreePort()
		if err != nil {
			return err
		}
		listen[name] = addr
		s.providers[name] = "http://" + addr + "/v1"
	}
	simPath := filepath.Join(s.dir, "provsim.yaml")
	if err := os.WriteFile(simPath, []byte(p.simYAML(listen)), 0o600); err != nil {
		return err
	}
	sim, err := childproc.Start("provsim", exec.CommandContext(ctx, bins.Provsim, "--config", simPath), //nolint:gosec // G204: the binary the operator named.
		filepath.Join(s.dir, "provsim.log"))
	if err != nil {
		return err
	}
	s.stops = append(s.stops, sim.Stop)
	for name, addr := range listen {
		if err := WaitHealthy(ctx, sim, "http://"+addr+"/healthz"); err != nil {
			return fmt.Errorf("provider %s: %w", name, err)
		}
	}
	catPath, err := s.writeCatalog(p)
	if err != nil {
		return err
	}
	deciderAddr, err := childproc.FreePort()
	if err != nil {
		return err
	}
	decider, err := childproc.Start("decider", exec.CommandContext(ctx, bins.Decider, deciderArgs(deciderAddr, s.dir, catPath, replicaToken)...), //nolint:gosec // G204: the binary the operator named.
		filepath.Join(s.dir, "decider.log"))
	if err != nil {
		return err
	}
	s.stops = append(s.stops, decider.Stop)
	edgeAddr, err := childproc.FreePort()
	if err != nil {
		return err
	}
	edgeCmd := exec.CommandContext(ctx, bins.Edge, edgeArgs(edgeAddr, deciderAddr, edgeToken)...) //nolint:gosec // G204: the binary the operator named.
	edge, err := childproc.Start("edge", edgeCmd, filepath.Join(s.dir, "edge.log"))
	if err != nil {
		return err
	}
	s.stops = append(s.stops, edge.Stop)
	s.edgeURL = "http://" + edgeAddr + "/v1"
	return nil
}

// WaitHealthy polls url until it answers 200, c exits, or a minute passes.
func WaitHealthy(ctx context.Context, c *childproc.Child, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.Exited():
			return fmt.Errorf("%s exited: %w", c.Name, c.Err())
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy: %w", url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop stops everything in reverse order of start and removes the work
// directory unless it is kept.
func (s *system) stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.stops = nil
	if s.dir != "" && !s.keep {
		_ = os.RemoveAll(s.dir)
	}
}

// providerURL is the base URL of a simulated provider (its /v1).
func (s *system) providerURL(name string) string { return s.providers[name] }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
