package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
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

// The test callers: every test catalog lists them (withCallers), the
// decider forwards to the broker's owner as the replica, edges call as the
// edge, and tests that ask the decider directly call as the operator.
const (
	testEdgeToken     = "test-edge-token"
	testReplicaToken  = "test-replica-token"
	testOperatorToken = "test-operator-token"
)

// asOperator makes a test's own gRPC client call as the test operator.
var asOperator = grpc.WithPerRPCCredentials(bearer.Token(testOperatorToken))

// withCallers appends the test callers to a catalog that lists none.
func withCallers(yaml string) string {
	if strings.Contains(yaml, "\ncallers:") {
		return yaml
	}
	return strings.TrimRight(yaml, "\n") + "\ncallers:\n" +
		"  - {id: edges, role: edge, tokens_sha256: [" + catalog.HashKey(testEdgeToken) + "]}\n" +
		"  - {id: deciders, role: replica, tokens_sha256: [" + catalog.HashKey(testReplicaToken) + "]}\n" +
		"  - {id: ops, role: operator, tokens_sha256: [" + catalog.HashKey(testOperatorToken) + "]}\n"
}

// tokenFile writes token into a file of its own and returns its path.
func tokenFile(t testing.TB, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(p, []byte(token+"\n"), 0o600))
	return p
}

// edgeTokenFlag is the edge's flag naming the test edge's token file.
func edgeTokenFlag(t testing.TB) string {
	return "--decider-token-file=" + tokenFile(t, testEdgeToken)
}

// writeCatalog writes a catalog into dir and returns its path.
func writeCatalog(t *testing.T, dir, yaml string) string {
	t.Helper()
	p := filepath.Join(dir, "catalog.yaml")
	require.NoError(t, os.WriteFile(p, []byte(withCallers(yaml)), 0o600))
	return p
}

// startDecider starts a decider, closed when the test ends.
func startDecider(t *testing.T, cfg deciderapp.Config) *deciderapp.Decider {
	t.Helper()
	if cfg.TokenFile == "" {
		cfg.TokenFile = tokenFile(t, testReplicaToken)
	}
	d, err := deciderapp.Start(t.Context(), cfg, quietLogger(nil))
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// startDeciderOnPicked starts a decider whose fixed addresses (cfg.Listen,
// cfg.EtcdListen not on port 0) were picked by freeAddr, closed when the
// test ends. Another process may take a picked port before the decider
// binds it: then both are picked again, up to three times, and *cfg keeps
// the ones bound, for a restart on the same addresses.
func startDeciderOnPicked(t *testing.T, cfg *deciderapp.Config) *deciderapp.Decider {
	t.Helper()
	if cfg.TokenFile == "" {
		cfg.TokenFile = tokenFile(t, testReplicaToken)
	}
	for try := 1; ; try++ {
		d, err := deciderapp.Start(t.Context(), *cfg, quietLogger(nil))
		if err == nil {
			t.Cleanup(d.Close)
			return d
		}
		if try == 3 || !strings.Contains(err.Error(), "address already in use") {
			require.NoError(t, err)
		}
		if !strings.HasSuffix(cfg.Listen, ":0") {
			cfg.Listen = freeAddr(t)
		}
		if !strings.HasSuffix(cfg.EtcdListen, ":0") {
			cfg.EtcdListen = freeAddr(t)
		}
	}
}

// operatorRPC is a client of the decider at addr calling as the test
// operator, closed when the test ends.
func operatorRPC(t *testing.T, addr string) switchboardv1.DeciderClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), asOperator)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return switchboardv1.NewDeciderClient(conn)
}

// startEdge starts an edge on a free port in front of the decider at
// deciderAddr, with args as on its command line; closed when the test ends.
func startEdge(t *testing.T, deciderAddr string, args ...string) *edgeapp.Edge {
	t.Helper()
	ecfg, err := edgeapp.ParseFlags(append([]string{"--listen=127.0.0.1:0", "--decider=" + deciderAddr, edgeTokenFlag(t)}, args...),
		func(string) string { return "" })
	require.NoError(t, err)
	e, err := edgeapp.Start(t.Context(), ecfg, quietLogger(nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}
