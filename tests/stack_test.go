package tests

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	edgeapp "github.com/switchboard-ai/switchboard/services/edge/app"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// startSim starts a provider simulator from its YAML configuration, closed
// when the test ends.
func startSim(t *testing.T, config string) *provsim.Sim {
	t.Helper()
	cfg, err := provsim.ParseConfig([]byte(config))
	require.NoError(t, err)
	sim, err := provsim.Start(t.Context(), cfg, quietLogger(nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

// writeCatalog writes a catalog into dir and returns its path.
func writeCatalog(t *testing.T, dir, yaml string) string {
	t.Helper()
	p := filepath.Join(dir, "catalog.yaml")
	require.NoError(t, os.WriteFile(p, []byte(yaml), 0o600))
	return p
}

// startDecider starts a decider, closed when the test ends.
func startDecider(t *testing.T, cfg deciderapp.Config) *deciderapp.Decider {
	t.Helper()
	d, err := deciderapp.Start(t.Context(), cfg, quietLogger(nil))
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// startEdge starts an edge on a free port in front of the decider at
// deciderAddr, with args as on its command line; closed when the test ends.
func startEdge(t *testing.T, deciderAddr string, args ...string) *edgeapp.Edge {
	t.Helper()
	ecfg, err := edgeapp.ParseFlags(append([]string{"--listen=127.0.0.1:0", "--decider=" + deciderAddr}, args...),
		func(string) string { return "" })
	require.NoError(t, err)
	e, err := edgeapp.Start(t.Context(), ecfg, quietLogger(nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}
