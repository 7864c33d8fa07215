package tests

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	edgeapp "github.com/switchboard-ai/switchboard/services/edge/app"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// stack is one whole Switchboard on loopback, as startStack starts it:
// the provider simulator, a decider with embedded etcd (and any replicas
// on that etcd), an edge in front of it, and a gRPC client of the decider
// calling as the test operator.
type stack struct {
	sim     *provsim.Sim
	decider *deciderapp.Decider
	// dcfg is the decider's configuration as started: a test restarts the
	// decider on the same addresses (and data) with it.
	dcfg deciderapp.Config
	// replicas are the more deciders o.replicas named, on the first's
	// etcd, in order; replicaCfgs their configurations as started, to
	// start one again on its data directory.
	replicas    []*deciderapp.Decider
	replicaCfgs []deciderapp.Config
	// tls are the CA and certificate files of a stack started with o.mtls.
	tls  *mtlsFiles
	edge *edgeapp.Edge
	// rpc calls the decider as the test operator.
	rpc switchboardv1.DeciderClient
	// logW holds the edge's log.
	logW *lockedWriter
	// o are the options the stack was started with: addReplica and
	// addEdge start more parts as startStack started its own.
	o stackOptions
	// replicaEtcd is the etcd endpoint the replicas are given.
	replicaEtcd string
}

// stackOptions say what startStack starts. Every field is optional.
type stackOptions struct {
	// sim is the simulator's YAML configuration; "" starts no simulator.
	sim string
	// simConfig is the simulator's configuration when it is built rather
	// than written (e.g. from a profile, on a scaled clock); it is used when
	// sim is "".
	simConfig *provsim.Config
	// simLog receives the simulator's log as JSON lines, debug and up; nil
	// discards it.
	simLog io.Writer
	// catalog is the decider's catalog (the test callers are added), given
	// a provider's base URL by its name in sim; nil starts no decider.
	catalog func(url func(provider string) string) string
	// replicas are the ids of more deciders started after the first, on
	// its etcd, each with a data directory of its own and the first's
	// defaults (they read the catalog from etcd).
	replicas []string
	// tuneReplica adjusts each replica's configuration before it starts.
	tuneReplica func(*deciderapp.Config)
	// replicaEtcd returns the etcd endpoint the replicas are given; nil is
	// the first decider's. It runs once the first decider started, so it
	// may put a freezer in front of its etcd.
	replicaEtcd func(s *stack) string
	// mtls makes every decider serve mutual TLS only, with certificates of
	// a test CA (stack.tls): the edge presents the edges' certificate and
	// the operator client the operator's.
	mtls bool
	// restartable puts the decider on a fixed address picked by freeAddr,
	// so the test can stop it and start it again (from dcfg) under the
	// running edge.
	restartable bool
	// tune adjusts the decider's configuration before it starts. The
	// edge traces into the decider's Config.Tracing, when tune sets one.
	tune func(*deciderapp.Config)
	// deciderLog receives the decider's log; nil discards it.
	deciderLog io.Writer
	// noEdge starts no edge.
	noEdge bool
	// edgeTo returns the edge's --decider, the addresses of the deciders
	// it is given; nil is the first decider's. It runs once every decider
	// started, so it may put relays or a freezer in front of them.
	edgeTo func(s *stack) string
	// edgeArgs are the edge's command-line flags, after the defaults.
	edgeArgs []string
	// ownDeadlines leaves the edge its own deadlines on decider calls,
	// without rpcGuards: for tests of how it fails over between deciders.
	ownDeadlines bool
	// providerKeys are the provider credentials the edge reads from its
	// environment, by variable name; nil is alpha's alone.
	providerKeys map[string]string
}

// startStack starts a Switchboard as o says, all of it closed when the test
// ends: it is the one way the tests start a system. The decider has ID e2e,
// seed 1, no exploration and a 5 s shutdown timeout unless o.tune says
// otherwise (replicas: addReplica, o.tuneReplica); the edge is addEdge's.
func startStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	s := &stack{logW: &lockedWriter{w: &bytes.Buffer{}}, o: o}
	if o.sim != "" {
		cfg, err := provsim.ParseConfig([]byte(o.sim))
		require.NoError(t, err)
		o.simConfig = &cfg
	}
	if o.simConfig != nil {
		s.sim = startSim(t, *o.simConfig, o.simLog)
	}
	if o.catalog == nil {
		return s
	}
	dir := t.TempDir()
	s.dcfg = deciderapp.Config{
		Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: dir,
		Catalog: writeCatalog(t, dir, o.catalog(func(p string) string { return s.sim.Provider(p).URL() })),
		ID:      "e2e", ShutdownTimeout: 5 * time.Second, Exploration: -1, Seed: 1,
	}
	if o.restartable {
		s.dcfg.Listen = freeAddr(t)
	}
	if o.mtls {
		s.tls = newMTLSFiles(t, dir)
		s.tls.serve(&s.dcfg)
	}
	if o.tune != nil {
		o.tune(&s.dcfg)
	}
	s.decider = startDeciderOnPicked(t, &s.dcfg, o.deciderLog)
	s.replicaEtcd = s.decider.EtcdEndpoint()
	if o.replicaEtcd != nil {
		s.replicaEtcd = o.replicaEtcd(s)
	}
	for _, id := range o.replicas {
		s.addReplica(t, id, o.tuneReplica)
	}
	creds := insecure.NewCredentials()
	if s.tls != nil {
		creds = clientTLS(t, tlsfiles.Client{CAFile: s.tls.caFile, CertFile: s.tls.opsCert, KeyFile: s.tls.opsKey, ServerName: deciderDNS})
	}
	s.rpc = operatorRPCWith(t, s.decider.Addr(), creds)
	if o.noEdge {
		return s
	}
	to := s.decider.Addr()
	if o.edgeTo != nil {
		to = o.edgeTo(s)
	}
	s.edge = s.addEdge(t, to, o.edgeArgs...)
	return s
}

// addReplica starts one more decider, id, on the stack's etcd (as
// o.replicaEtcd gave it) with a data directory of its own and the
// replicas' defaults, tune adjusting its configuration; it is appended to
// s.replicas and s.replicaCfgs.
func (s *stack) addReplica(t testing.TB, id string, tune func(*deciderapp.Config)) *deciderapp.Decider {
	t.Helper()
	cfg := deciderapp.Config{Listen: "127.0.0.1:0", Etcd: []string{s.replicaEtcd}, DataDir: t.TempDir(), ID: id,
		ShutdownTimeout: 5 * time.Second, Exploration: -1, Seed: 1}
	if s.tls != nil {
		s.tls.serve(&cfg)
	}
	if tune != nil {
		tune(&cfg)
	}
	d := startDeciderOnPicked(t, &cfg, nil)
	s.replicas = append(s.replicas, d)
	s.replicaCfgs = append(s.replicaCfgs, cfg)
	return d
}

// restartDecider starts the stack's first decider again after it stopped
// (Close or Kill): on the same address, etcd and data directory (dcfg),
// reading its catalog back from etcd, tune (if any) adjusting the
// configuration. It becomes s.decider.
func (s *stack) restartDecider(t *testing.T, tune func(*deciderapp.Config)) *deciderapp.Decider {
	t.Helper()
	cfg := s.dcfg
	cfg.Catalog = ""
	if tune != nil {
		tune(&cfg)
	}
	s.decider = startDecider(t, cfg)
	return s.decider
}

// restartReplica starts replica i again on its data directory after it
// stopped, on a new address; it becomes s.replicas[i].
func (s *stack) restartReplica(t *testing.T, i int) *deciderapp.Decider {
	t.Helper()
	s.replicas[i] = startDecider(t, s.replicaCfgs[i])
	return s.replicas[i]
}

// addEdge starts an edge in front of the deciders at to, as startStack
// starts the stack's own: it flushes its reports every 20 ms, guards its
// decider calls with rpcGuards (unless o.ownDeadlines), fails closed
// without a decider (failClosed), presents the edges' certificate (o.mtls),
// reads o.providerKeys (nil: alpha's credential alone) and traces where the
// decider does; args come after these defaults. Closed when the test ends.
func (s *stack) addEdge(t testing.TB, to string, args ...string) *edgeapp.Edge {
	t.Helper()
	flags := []string{"--listen=127.0.0.1:0", "--decider=" + to, edgeTokenFlag(t), "--report-flush-interval=20ms", failClosed}
	if !s.o.ownDeadlines {
		flags = append(flags, rpcGuards...)
	}
	if s.tls != nil {
		flags = append(flags, s.tls.edgeArgs()...)
	}
	ecfg, err := edgeapp.ParseFlags(append(flags, args...), func(string) string { return "" })
	require.NoError(t, err)
	keys := s.o.providerKeys
	if keys == nil {
		keys = map[string]string{"SWITCHBOARD_PROVIDER_KEY_ALPHA": alphaCred}
	}
	ecfg.Getenv = func(k string) string { return keys[k] }
	ecfg.Tracing = s.dcfg.Tracing
	e, err := edgeapp.Start(t.Context(), ecfg, quietLogger(s.logW))
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// startSim starts a provider simulator from its configuration, logging
// JSON lines into log (nil: discarded), closed when the test ends.
func startSim(t testing.TB, cfg provsim.Config, log io.Writer) *provsim.Sim {
	t.Helper()
	if log == nil {
		log = io.Discard
	}
	sim, err := provsim.Start(t.Context(), cfg, slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})))
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
func writeCatalog(t testing.TB, dir, yaml string) string {
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

// startRefused starts a decider that must refuse to start, and returns
// why: it is the one decider started apart from startStack, since no system
// is built around it (if it does start, it is closed at once).
func startRefused(t *testing.T, cfg deciderapp.Config) error {
	t.Helper()
	if cfg.TokenFile == "" {
		cfg.TokenFile = tokenFile(t, testReplicaToken)
	}
	d, err := deciderapp.Start(t.Context(), cfg, quietLogger(nil))
	if err == nil {
		d.Close()
	}
	require.Error(t, err, "the decider started")
	return err
}

// freeAddr picks a free loopback address for a fixed listener.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// startDeciderOnPicked starts a decider whose fixed addresses (cfg.Listen,
// cfg.EtcdListen not on port 0) were picked by freeAddr, logging into log
// (nil: discarded), closed when the test ends. Another process may take a
// picked port before the decider binds it: then both are picked again, up
// to three times, and *cfg keeps the ones bound, for a restart on the same
// addresses.
func startDeciderOnPicked(t testing.TB, cfg *deciderapp.Config, log io.Writer) *deciderapp.Decider {
	t.Helper()
	if cfg.TokenFile == "" {
		cfg.TokenFile = tokenFile(t, testReplicaToken)
	}
	for try := 1; ; try++ {
		d, err := deciderapp.Start(t.Context(), *cfg, quietLogger(log))
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
func operatorRPC(t testing.TB, addr string) switchboardv1.DeciderClient {
	t.Helper()
	return operatorRPCWith(t, addr, insecure.NewCredentials())
}

// operatorRPCWith is operatorRPC over the transport creds.
func operatorRPCWith(t testing.TB, addr string, creds credentials.TransportCredentials) switchboardv1.DeciderClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), asOperator)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return switchboardv1.NewDeciderClient(conn)
}

// failClosed is the edges' default in these tests: no serving from the
// decider's last answers while it is gone. The tests that stop, pause or
// restart a decider check the broker's limits and the edge's answers as the
// broker gives them; the tests of serving offline turn it on with their own
// --offline-grace, which comes later on the command line and wins.
const failClosed = "--offline-grace=0"

// startEdge starts an edge on a free port in front of the decider at
// deciderAddr, failing closed without it (failClosed), with args as on its
// command line and none of a stack's other defaults (addEdge): for an edge
// set up unlike a stack's, such as one without the stack's certificate.
// Closed when the test ends.
func startEdge(t *testing.T, deciderAddr string, args ...string) *edgeapp.Edge {
	t.Helper()
	ecfg, err := edgeapp.ParseFlags(append([]string{"--listen=127.0.0.1:0", "--decider=" + deciderAddr, edgeTokenFlag(t), failClosed}, args...),
		func(string) string { return "" })
	require.NoError(t, err)
	e, err := edgeapp.Start(t.Context(), ecfg, quietLogger(nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}
