package tests

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles/tlstest"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// deciderDNS is the decider's name in its certificate, as in a cluster.
const deciderDNS = "decider.switchboard.svc"

// mtlsStack is a decider serving mutual TLS in front of one simulated
// provider, with the files of a CA, the decider and an edge client.
type mtlsStack struct {
	ca                      *tlstest.CA
	dir, caFile             string
	deciderCert, deciderKey string
	edgeCert, edgeKey       string
	decider                 *deciderapp.Decider
}

// startMTLSStack starts it; callers are more catalog rows of callers:.
// Not startStack: its decider speaks only TLS, which the stack's operator
// client and edge do not.
func startMTLSStack(t *testing.T, callers ...string) *mtlsStack {
	t.Helper()
	s := &mtlsStack{dir: t.TempDir()}
	var err error
	s.ca, err = tlstest.NewCA("switchboard test CA", time.Hour)
	require.NoError(t, err)
	s.caFile = filepath.Join(s.dir, "ca.crt")
	require.NoError(t, s.ca.WriteCA(s.caFile))
	dec, err := s.ca.Issue("decider", tlstest.ServerAuth|tlstest.ClientAuth, time.Hour, deciderDNS)
	require.NoError(t, err)
	s.deciderCert, s.deciderKey, err = dec.Write(s.dir, "decider")
	require.NoError(t, err)
	edge, err := s.ca.Issue("edges", tlstest.ClientAuth, time.Hour)
	require.NoError(t, err)
	s.edgeCert, s.edgeKey, err = edge.Write(s.dir, "edge")
	require.NoError(t, err)

	sim := startSim(t, `
seed: 7
providers:
  - name: alpha
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 1ms}, default_output_tokens: 8}
`)
	cat := fmt.Sprintf(`
models:
  - id: %s
    endpoints:
      - {provider: alpha, base_url: %s, upstream_model: %s, price: {input: 0.10, output: 0.50}}
tenants:
  - {id: acme, api_keys_sha256: [%s]}
`, model, sim.Provider("alpha").URL(), simModel, catalog.HashKey(testKey))
	s.decider = startDecider(t, deciderapp.Config{
		Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: s.dir, Catalog: writeCatalog(t, s.dir, withCallers(cat)+strings.Join(callers, "")),
		ID: "e2e-tls", ShutdownTimeout: 5 * time.Second, Exploration: -1,
		TLSCertFile: s.deciderCert, TLSKeyFile: s.deciderKey, TLSClientCAFile: s.caFile,
		TLSRefresh: 20 * time.Millisecond,
	})
	return s
}

// edgeArgs are the edge's flags to reach the decider over mutual TLS.
func (s *mtlsStack) edgeArgs() []string {
	return []string{"--decider-ca-file=" + s.caFile, "--decider-cert-file=" + s.edgeCert,
		"--decider-key-file=" + s.edgeKey, "--decider-server-name=" + deciderDNS}
}

// completion posts one chat completion to the edge at url and returns
// the status and body.
func completion(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/chat/completions",
		strings.NewReader(`{"model":"`+model+`","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(raw)
}

// serial opens a new connection with creds, calls the health service and
// returns the serial of the certificate the decider presented.
func serial(t *testing.T, addr string, creds credentials.TransportCredentials) (*big.Int, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return nil, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	require.True(t, ok, "the connection is not TLS")
	return info.State.PeerCertificates[0].SerialNumber, nil
}

// An edge with a client certificate serves a chat completion end to end
// through a decider that requires mutual TLS; an edge without one, or in
// plaintext, cannot reach it.
func TestChatCompletionOverMutualTLS(t *testing.T) {
	s := startMTLSStack(t)

	edge := startEdge(t, s.decider.Addr(), s.edgeArgs()...)
	require.Eventually(t, func() bool {
		code, _ := completion(t, edge.URL())
		return code == http.StatusOK
	}, 15*time.Second, 20*time.Millisecond, "the edge never served over mutual TLS")
	code, body := completion(t, edge.URL())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"choices"`)

	// An edge that trusts the CA but has no certificate is refused at the
	// handshake, and so is a plaintext one: neither gets an answer.
	noCert := startEdge(t, s.decider.Addr(), "--decider-ca-file="+s.caFile, "--decider-server-name="+deciderDNS)
	plain := startEdge(t, s.decider.Addr())
	for _, e := range []string{noCert.URL(), plain.URL()} {
		code, body := completion(t, e)
		require.Equal(t, http.StatusServiceUnavailable, code, body)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"no client certificate": clientTLS(t, tlsfiles.Client{CAFile: s.caFile, ServerName: deciderDNS}),
		"plaintext":             insecure.NewCredentials(),
	} {
		conn, err := grpc.NewClient(s.decider.Addr(), grpc.WithTransportCredentials(creds))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err = switchboardv1.NewDeciderClient(conn).ListModels(ctx, &switchboardv1.ListModelsRequest{})
		cancel()
		_ = conn.Close()
		require.Equal(t, codes.Unavailable, status.Code(err), "%s: %v", name, err)
	}
}

// The decider's certificate is replaced on disk while it runs: new
// connections get the new one, and a new edge serves through it.
func TestDeciderCertificateRotatesWithoutRestart(t *testing.T) {
	s := startMTLSStack(t)
	creds := clientTLS(t, tlsfiles.Client{CAFile: s.caFile, CertFile: s.edgeCert, KeyFile: s.edgeKey, ServerName: deciderDNS})
	before, err := serial(t, s.decider.Addr(), creds)
	require.NoError(t, err)

	next, err := s.ca.Issue("decider", tlstest.ServerAuth|tlstest.ClientAuth, time.Hour, deciderDNS)
	require.NoError(t, err)
	require.NotEqual(t, 0, before.Cmp(next.Cert.SerialNumber))
	_, _, err = next.Write(s.dir, "decider") // the same files, replaced
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		got, err := serial(t, s.decider.Addr(), creds)
		return err == nil && got.Cmp(next.Cert.SerialNumber) == 0
	}, 15*time.Second, 20*time.Millisecond, "new connections never saw the new certificate")
	edge := startEdge(t, s.decider.Addr(), s.edgeArgs()...)
	require.Eventually(t, func() bool {
		code, _ := completion(t, edge.URL())
		return code == http.StatusOK
	}, 15*time.Second, 20*time.Millisecond, "a new edge never served through the rotated certificate")
}

func clientTLS(t *testing.T, c tlsfiles.Client) credentials.TransportCredentials {
	t.Helper()
	c.Refresh = 20 * time.Millisecond
	creds, err := tlsfiles.NewClient(c)
	require.NoError(t, err)
	t.Cleanup(creds.Close)
	return creds.TransportCredentials()
}
