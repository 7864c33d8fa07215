package app

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles/tlstest"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

// deciderName is the only name in the deciders' certificates: replicas
// reach each other by IP, which the certificates do not carry.
const deciderName = "decider.switchboard.test"

// testPKI is a CA, a decider certificate (server and client) and an edge
// client certificate, written as files.
type testPKI struct {
	ca                      *tlstest.CA
	caFile                  string
	deciderCert, deciderKey string
	edgeCert, edgeKey       string
}

func newTestPKI(t *testing.T, dir string) *testPKI {
	t.Helper()
	ca, err := tlstest.NewCA("test CA", time.Hour)
	require.NoError(t, err)
	p := &testPKI{ca: ca, caFile: filepath.Join(dir, "ca.crt")}
	require.NoError(t, ca.WriteCA(p.caFile))
	dec, err := ca.Issue("deciders", tlstest.ServerAuth|tlstest.ClientAuth, time.Hour, deciderName)
	require.NoError(t, err)
	p.deciderCert, p.deciderKey, err = dec.Write(dir, "decider")
	require.NoError(t, err)
	edge, err := ca.Issue("edges", tlstest.ClientAuth, time.Hour)
	require.NoError(t, err)
	p.edgeCert, p.edgeKey, err = edge.Write(dir, "edge")
	require.NoError(t, err)
	return p
}

// tlsConfig returns a decider configuration serving mutual TLS with p.
func (p *testPKI) tlsConfig(cfg Config) Config {
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = p.deciderCert, p.deciderKey, p.caFile
	return cfg
}

// dialDecider returns a client of the decider's services at addr with creds.
func dialDecider(t *testing.T, addr string, creds credentials.TransportCredentials) (switchboardv1.DeciderClient, *grpc.ClientConn) {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if creds.Info().SecurityProtocol == "insecure" {
		// No certificate to be known by: call as the test edge.
		opts = append(opts, grpc.WithPerRPCCredentials(bearer.Token(testEdgeToken)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return switchboardv1.NewDeciderClient(conn), conn
}

func clientCreds(t *testing.T, c tlsfiles.Client) credentials.TransportCredentials {
	t.Helper()
	creds, err := tlsfiles.NewClient(c)
	require.NoError(t, err)
	t.Cleanup(creds.Close)
	return creds.TransportCredentials()
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Serving plaintext where other machines connect must be chosen: without
// TLS or --plaintext, a non-loopback listen address is refused at start.
func TestPlaintextOffLoopbackIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{
		Listen: "0.0.0.0:0", EtcdListen: "127.0.0.1:0", DataDir: dir, Catalog: writeCatalog(t, dir, false),
		ShutdownTimeout: time.Second, ID: "test",
	}
	_, err := Start(t.Context(), cfg, quietLogger())
	require.Error(t, err)
	require.ErrorContains(t, err, "--tls-cert-file")
	require.ErrorContains(t, err, "--plaintext")

	cfg.Plaintext = true
	d, err := Start(t.Context(), cfg, quietLogger())
	require.NoError(t, err)
	d.Close()

	// The flags agree with each other, or every mistake is named.
	_, err = ParseFlags([]string{"--tls-cert-file=a.crt", "--tls-client-ca-file=ca.crt", "--plaintext",
		"--peer-server-name=x", "--health-listen=nope"}, func(string) string { return "" }, io.Discard)
	for _, want := range []string{"--tls-key-file", "--plaintext", "--health-listen"} {
		require.ErrorContains(t, err, want)
	}
	_, err = ParseFlags([]string{"--etcd-ca-file=ca.crt"}, func(string) string { return "" }, io.Discard)
	require.ErrorContains(t, err, "set --etcd")
}

// Under mutual TLS only a client with a certificate of the client CA gets
// through; one without a certificate, one that does not trust the
// decider's CA, and a plaintext one are refused at the handshake.
func TestMutualTLSDecider(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := newTestPKI(t, dir)
	d, err := Start(t.Context(), p.tlsConfig(Config{
		Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: dir, Catalog: writeCatalog(t, dir, false),
		ShutdownTimeout: 5 * time.Second, ID: "test", Exploration: -1,
	}), quietLogger())
	require.NoError(t, err)
	defer d.Close()

	ok, _ := dialDecider(t, d.Addr(), clientCreds(t, tlsfiles.Client{
		CAFile: p.caFile, CertFile: p.edgeCert, KeyFile: p.edgeKey, ServerName: deciderName,
	}))
	resp, err := ok.Decide(t.Context(), decideRequest(0))
	require.NoError(t, err)
	require.Equal(t, "alpha", resp.GetEndpoint().GetProvider())

	// decider explain, an operator's client, has the same TLS flags.
	ops, err := p.ca.Issue("ops", tlstest.ClientAuth, time.Hour)
	require.NoError(t, err)
	opsCert, opsKey, err := ops.Write(dir, "ops")
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, Explain(t.Context(), []string{"--decider=" + d.Addr(), "--model=vendor/model", "--api-key=" + demoKey,
		"--ca-file=" + p.caFile, "--cert-file=" + opsCert, "--key-file=" + opsKey, "--server-name=" + deciderName}, &out))
	require.Contains(t, out.String(), "alpha")
	err = Explain(t.Context(), []string{"--decider=" + d.Addr(), "--model=vendor/model", "--api-key=" + demoKey,
		"--ca-file=" + p.caFile, "--cert-file=" + p.edgeCert, "--key-file=" + p.edgeKey, "--server-name=" + deciderName}, &out)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "explaining is an operator's: %v", err)
	err = Explain(t.Context(), []string{"--decider=" + d.Addr(), "--model=vendor/model", "--api-key=" + demoKey}, &out)
	require.Equal(t, codes.Unavailable, status.Code(err), "plaintext to a TLS decider: %v", err)
	err = Explain(t.Context(), []string{"--decider=decider.example:9090", "--model=vendor/model", "--api-key=" + demoKey}, &out)
	require.ErrorContains(t, err, "--plaintext")
	require.ErrorContains(t, err, "--ca-file")

	other, err := tlstest.NewCA("other CA", time.Hour)
	require.NoError(t, err)
	otherCA := filepath.Join(dir, "other-ca.crt")
	require.NoError(t, other.WriteCA(otherCA))
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"no client certificate", clientCreds(t, tlsfiles.Client{CAFile: p.caFile, ServerName: deciderName})},
		{"server CA not trusted", clientCreds(t, tlsfiles.Client{CAFile: otherCA, CertFile: p.edgeCert, KeyFile: p.edgeKey, ServerName: deciderName})},
		{"wrong server name", clientCreds(t, tlsfiles.Client{CAFile: p.caFile, CertFile: p.edgeCert, KeyFile: p.edgeKey, ServerName: "evil.example"})},
		{"plaintext", insecure.NewCredentials()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := dialDecider(t, d.Addr(), tc.creds)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := c.Decide(ctx, decideRequest(1))
			require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		})
	}
}

// Replicas forward to the broker's owner by their advertised IP, which no
// certificate names: the peer connection verifies the fixed name of the
// deciders' certificates instead, and presents the replica's certificate
// to the owner's mutual TLS.
func TestReplicasForwardOverMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := newTestPKI(t, dir)
	base := Config{
		Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second, Exploration: -1,
	}
	acfg := p.tlsConfig(base)
	acfg.DataDir, acfg.Catalog, acfg.ID = dir, writeLimited(t, dir, "100"), "a"
	a, err := Start(t.Context(), acfg, quietLogger())
	require.NoError(t, err)
	defer a.Close()
	bcfg := p.tlsConfig(base)
	bcfg.DataDir, bcfg.Etcd, bcfg.ID = t.TempDir(), []string{a.EtcdEndpoint()}, "b"
	b, err := Start(t.Context(), bcfg, quietLogger())
	require.NoError(t, err)
	defer b.Close()
	require.True(t, a.adm.Owner())
	require.False(t, b.adm.Owner())

	cb, _ := dialDecider(t, b.Addr(), clientCreds(t, tlsfiles.Client{
		CAFile: p.caFile, CertFile: p.edgeCert, KeyFile: p.edgeKey, ServerName: deciderName,
	}))
	r := decideReserve(t, cb, 0)
	require.NotNil(t, r.GetReservation(), "the owner admitted through the non-owner")
	kept, err := cb.KeepReservations(t.Context(), &switchboardv1.KeepReservationsRequest{ReservationIds: []string{r.GetReservation().GetReservationId()}})
	require.NoError(t, err)
	require.Equal(t, int64(1), kept.GetKept(), "forwarded to the owner over mutual TLS")
}

// Reflection lists every service to whoever connects: off unless asked for.
func TestReflectionOnlyWithTheFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want codes.Code
	}{
		{"off by default", nil, codes.Unimplemented},
		{"on with the flag", []string{"--grpc-reflection"}, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, err := ParseFlags(append([]string{"--listen=127.0.0.1:0", "--etcd-listen=127.0.0.1:0", "--data-dir=" + dir,
				"--catalog=" + writeCatalog(t, dir, false), "--drain-delay=0s"}, tc.args...), func(string) string { return "" }, io.Discard)
			require.NoError(t, err)
			d, err := Start(t.Context(), cfg, quietLogger())
			require.NoError(t, err)
			defer d.Close()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel() // before Close: an open stream would hold the graceful stop
			_, conn := dialDecider(t, d.Addr(), insecure.NewCredentials())
			stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
			require.NoError(t, err)
			// Send fails with io.EOF once the server refused the stream; Recv says why.
			_ = stream.Send(&reflectionpb.ServerReflectionRequest{
				MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
			})
			resp, err := stream.Recv()
			require.Equal(t, tc.want, status.Code(err), "%v", err)
			if tc.want == codes.OK {
				var names []string
				for _, s := range resp.GetListServicesResponse().GetService() {
					names = append(names, s.GetName())
				}
				require.Contains(t, names, switchboardv1.RouterService_ServiceDesc.ServiceName)
				require.Contains(t, names, switchboardv1.EdgeService_ServiceDesc.ServiceName)
				require.Contains(t, names, switchboardv1.OperatorService_ServiceDesc.ServiceName)
				require.Contains(t, names, switchboardv1.ReplicaService_ServiceDesc.ServiceName)
			}
		})
	}
}

// kubelet's gRPC probes cannot do TLS: --health-listen serves the health
// service, and nothing else, in plaintext, with the main server's status.
func TestHealthListener(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := newTestPKI(t, dir)
	d, err := Start(t.Context(), p.tlsConfig(Config{
		Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: dir, Catalog: writeCatalog(t, dir, false),
		ShutdownTimeout: 5 * time.Second, ID: "test", HealthListen: "127.0.0.1:0",
		// Probes must see NOT_SERVING while the server drains.
		DrainDelay: 3 * time.Second,
	}), quietLogger())
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			d.Close()
		}
	}()
	require.NotEmpty(t, d.HealthAddr())
	c, conn := dialDecider(t, d.HealthAddr(), insecure.NewCredentials())
	health := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", switchboardv1.RouterService_ServiceDesc.ServiceName, switchboardv1.EdgeService_ServiceDesc.ServiceName} {
		h, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, h.GetStatus(), svc)
	}

	_, err = c.Decide(t.Context(), decideRequest(0))
	require.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	require.NoError(t, err)
	// Send fails with io.EOF once the server refused the stream; Recv says why.
	_ = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	_, err = stream.Recv()
	require.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)

	// The same status as the main server: NOT_SERVING once it stops.
	watch, err := health.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.GetStatus())
	closed = true
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Close()
	}()
	next, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, next.GetStatus())
	<-done
}

// startTLSEtcd starts an etcd serving https on loopback that requires a
// client certificate of p's CA, and returns its https:// endpoint.
func startTLSEtcd(t *testing.T, p *testPKI) string {
	t.Helper()
	dir := t.TempDir()
	leaf, err := p.ca.Issue("etcd", tlstest.ServerAuth, time.Hour, "127.0.0.1", "localhost")
	require.NoError(t, err)
	cert, key, err := leaf.Write(dir, "etcd")
	require.NoError(t, err)
	e, err := store.StartEmbedded(t.Context(), store.EmbeddedOptions{
		DataDir:   filepath.Join(dir, "etcd"),
		ClientTLS: transport.TLSInfo{CertFile: cert, KeyFile: key, TrustedCAFile: p.caFile, ClientCertAuth: true},
	})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return "https://" + e.Endpoint()
}

// A decider reaches an external etcd over https with client-certificate
// authentication; a wrong or missing CA, or a missing client certificate,
// fails the start at once with the TLS reason rather than hanging.
func TestExternalEtcdOverMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := newTestPKI(t, dir)
	endpoint := startTLSEtcd(t, p)
	base := func(extra ...string) Config {
		args := append([]string{"--listen=127.0.0.1:0", "--data-dir=" + t.TempDir(), "--catalog=" + writeCatalog(t, t.TempDir(), false),
			"--etcd=" + endpoint, "--drain-delay=0s"}, extra...)
		cfg, err := ParseFlags(args, func(string) string { return "" }, io.Discard)
		require.NoError(t, err)
		return cfg
	}

	d, err := Start(t.Context(), base("--etcd-ca-file="+p.caFile, "--etcd-cert-file="+p.edgeCert, "--etcd-key-file="+p.edgeKey), quietLogger())
	require.NoError(t, err)
	c, _ := dialDecider(t, d.Addr(), insecure.NewCredentials())
	resp, err := c.Decide(t.Context(), decideRequest(0))
	require.NoError(t, err)
	require.Equal(t, "alpha", resp.GetEndpoint().GetProvider())
	d.Close()

	other, err := tlstest.NewCA("other CA", time.Hour)
	require.NoError(t, err)
	otherCA := filepath.Join(dir, "other-ca.crt")
	require.NoError(t, other.WriteCA(otherCA))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no CA file", []string{"--etcd-cert-file=" + p.edgeCert, "--etcd-key-file=" + p.edgeKey}, "certificate"},
		{"another CA", []string{"--etcd-ca-file=" + otherCA, "--etcd-cert-file=" + p.edgeCert, "--etcd-key-file=" + p.edgeKey}, "certificate"},
		{"no client certificate", []string{"--etcd-ca-file=" + p.caFile}, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			d, err := Start(ctx, base(tc.args...), quietLogger())
			if err == nil {
				d.Close()
			}
			require.Error(t, err)
			require.NotErrorIs(t, err, context.DeadlineExceeded, "a TLS refusal must not wait for the deadline")
			require.ErrorContains(t, err, "TLS handshake")
			require.ErrorContains(t, err, tc.want)
		})
	}
}
