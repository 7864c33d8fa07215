package loadtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	edgeapp "github.com/switchboard-ai/switchboard/services/edge/app"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// system is the whole default Switchboard on loopback: the provider
// simulator, a decider with its embedded etcd, and one edge. They run in
// this process but reach each other only through their sockets, as the
// binaries do.
type system struct {
	sim     *provsim.Sim
	decider *deciderapp.Decider
	edge    *edgeapp.Edge
	dir     string
	keep    bool
	cat     *plan
	// maxAttempts is the edge's --max-attempts: endpoints tried per request.
	maxAttempts int
}

// edgeToken and replicaToken authenticate the edge and the decider itself
// (forwarding to the broker's owner) to the decider.
const (
	edgeCallerToken    = "loadtest-edge-token"
	replicaCallerToken = "loadtest-replica-token"
)

// startSystem starts the simulator, the decider and the edge for p, logging
// into files under a new temporary directory.
func startSystem(ctx context.Context, p *plan, keep bool) (_ *system, err error) {
	dir, err := os.MkdirTemp("", "brokerload-")
	if err != nil {
		return nil, err
	}
	s := &system{dir: dir, keep: keep, cat: p}
	defer func() { //nolint:contextcheck // stopping must not depend on the start's context, which may be what ended it
		if err != nil {
			s.stop()
			if keep {
				err = fmt.Errorf("%w (logs in %s)", err, dir)
			}
		}
	}()
	logger := func(name string) (*slog.Logger, error) {
		f, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return nil, err
		}
		return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})), nil
	}

	simCfg, err := provsim.ParseConfig([]byte(p.simYAML()))
	if err != nil {
		return nil, fmt.Errorf("simulator configuration: %w", err)
	}
	simLog, err := logger("provsim")
	if err != nil {
		return nil, err
	}
	if s.sim, err = provsim.Start(ctx, simCfg, simLog); err != nil {
		return nil, err
	}
	urls := map[string]string{}
	for _, pr := range s.sim.Providers() {
		urls[pr.Name()] = pr.URL()
	}

	catYAML := p.catalogYAML(urls)
	if _, err := catalog.Parse([]byte(catYAML)); err != nil {
		if p.classes {
			return nil, fmt.Errorf("the catalog with workload classes and tenant weights (--classes) is refused: %w", err)
		}
		return nil, fmt.Errorf("catalog: %w", err)
	}
	catPath := filepath.Join(dir, "catalog.yaml")
	if err := os.WriteFile(catPath, []byte(catYAML), 0o600); err != nil {
		return nil, err
	}
	replicaToken := filepath.Join(dir, "replica-token")
	edgeToken := filepath.Join(dir, "edge-token")
	if err := errors.Join(os.WriteFile(replicaToken, []byte(replicaCallerToken), 0o600),
		os.WriteFile(edgeToken, []byte(edgeCallerToken), 0o600)); err != nil {
		return nil, err
	}
	decLog, err := logger("decider")
	if err != nil {
		return nil, err
	}
	// The decider as its binary runs it with its default flags, except that
	// probes and exploration are off: they would send the providers calls
	// of their own and pick endpoints at random, blurring what each
	// scenario's traffic did.
	dcfg, err := deciderapp.ParseFlags([]string{
		"--listen=127.0.0.1:0", "--etcd-listen=127.0.0.1:0", "--data-dir=" + filepath.Join(dir, "decider"), "--catalog=" + catPath,
		"--id=brokerload", "--drain-delay=0s", "--shutdown-timeout=5s", "--probe-interval=0", "--exploration=-1", "--token-file=" + replicaToken,
	}, func(string) string { return "" }, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("decider flags: %w", err)
	}
	if s.decider, err = deciderapp.Start(ctx, dcfg, decLog); err != nil {
		return nil, fmt.Errorf("decider: %w", err)
	}
	// The edge with its default flags, except for longer guards on its
	// decider calls: on a loaded machine the default of a few hundred
	// milliseconds would turn a slow answer into a skipped fallback, which
	// is not what these scenarios measure.
	ecfg, err := edgeapp.ParseFlags([]string{
		"--listen=127.0.0.1:0", "--decider=" + s.decider.Addr(), "--decider-token-file=" + edgeToken,
		"--reserve-timeout=5s", "--hedge-acquire-timeout=5s", "--drain-delay=0s", "--shutdown-grace=2s",
	}, func(string) string { return "" })
	if err != nil {
		return nil, fmt.Errorf("edge flags: %w", err)
	}
	ecfg.Getenv = func(string) string { return "" } // the simulated providers need no credential
	s.maxAttempts = ecfg.MaxAttempts
	edgeLog, err := logger("edge")
	if err != nil {
		return nil, err
	}
	if s.edge, err = edgeapp.Start(ctx, ecfg, edgeLog); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	return s, nil
}

// stop stops the edge first, so its last reports reach the decider, then
// the decider and the simulator, and removes the work directory unless it
// is kept.
func (s *system) stop() {
	if s.edge != nil {
		_ = s.edge.Close()
	}
	if s.decider != nil {
		s.decider.Close()
	}
	if s.sim != nil {
		_ = s.sim.Close()
	}
	if s.dir != "" && !s.keep {
		_ = os.RemoveAll(s.dir)
	}
}

// edgeURL is the base URL of the edge's OpenAI-compatible API.
func (s *system) edgeURL() string { return s.edge.URL() }

// providerURL is the base URL of a simulated provider (its /v1).
func (s *system) providerURL(name string) string { return s.sim.Provider(name).URL() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
