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

// mtlsFiles are the files of a test CA and of the certificates it issued
// to the decider (its server name deciderDNS), the edges and the operator.
type mtlsFiles struct {
	ca                      *tlstest.CA
	dir, caFile             string
	deciderCert, deciderKey string
	edgeCert, edgeKey       string
	opsCert, opsKey         string
}

// newMTLSFiles makes a CA and issues the certificates into dir.
func newMTLSFiles(t testing.TB, dir string) *mtlsFiles {
	t.Helper()
	f := &mtlsFiles{dir: dir}
	var err error
	f.ca, err = tlstest.NewCA("switchboard test CA", time.Hour)
	require.NoError(t, err)
	f.caFile = filepath.Join(dir, "ca.crt")
	require.NoError(t, f.ca.WriteCA(f.caFile))
	dec, err := f.ca.Issue("decider", tlstest.ServerAuth|tlstest.ClientAuth, time.Hour, deciderDNS)
	require.NoError(t, err)
	f.deciderCert, f.deciderKey, err = dec.Write(dir, "decider")
	require.NoError(t, err)
	edge, err := f.ca.Issue("edges", tlstest.ClientAuth, time.Hour)
	require.NoError(t, err)
	f.edgeCert, f.edgeKey, err = edge.Write(dir, "edge")
	require.NoError(t, err)
	ops, err := f.ca.Issue("ops", tlstest.ClientAuth, time.Hour)
	require.NoError(t, err)
	f.opsCert, f.opsKey, err = ops.Write(dir, "ops")
	require.NoError(t, err)
	return f
}

// serve makes a decider's configuration serve mutual TLS with the
// decider's certificate, reloading the files every 20 ms.
func (f *mtlsFiles) serve(cfg *deciderapp.Config) {
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = f.deciderCert, f.deciderKey, f.caFile
	cfg.TLSRefresh = 20 * time.Millisecond
}

// edgeArgs are the edge's flags to reach the decider over mutual TLS.
func (f *mtlsFiles) edgeArgs() []string {
	return []string{"--decider-ca-file=" + f.caFile, "--decider-cert-file=" + f.edgeCert,
		"--decider-key-file=" + f.edgeKey, "--decider-server-name=" + deciderDNS}
}

// mtlsStack are the options of a stack whose decider serves mutual TLS in
// front of one simulated provider; callers are more catalog rows of
// callers:.
func mtlsStack(callers ...string) stackOptions {
	return stackOptions{mtls: true, sim: `
seed: 7
providers:
  - name: alpha
    listen: 127.0.0.1:0
    models:
      - {id: sim-model, ttft: {base: 1ms}, default_output_tokens: 8}
`, catalog: func(url func(string) string) string {
		return withCallers(fmt.Sprintf(`
models:
  - id: %s
    endpoints:
      - {provider: alpha, base_url: %s, upstream_model: %s, price: {input: 0.10, output: 0.50}}
tenants:
  - {id: acme, api_keys_sha256: [%s]}
`, model, url("alpha"), simModel, catalog.HashKey(testKey))) + strings.Join(callers, "")
	}, tune: func(c *deciderapp.Config) { c.ID = "e2e-tls" }}
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
	s := startStack(t, mtlsStack())
	require.Eventually(t, func() bool {
		code, _ := completion(t, s.edge.URL())
		return code == http.StatusOK
	}, 15*time.Second, 20*time.Millisecond, "the edge never served over mutual TLS")
	code, body := completion(t, s.edge.URL())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"choices"`)
	models, err := s.rpc.ListModels(t.Context(), &switchboardv1.ListModelsRequest{Identity: &switchboardv1.Identity{TenantId: "acme"}})
	require.NoError(t, err, "the operator's client over mutual TLS")
	require.Len(t, models.GetModels(), 1)

	// An edge that trusts the CA but has no certificate is refused at the
	// handshake, and so is a plaintext one: neither gets an answer.
	noCert := startEdge(t, s.decider.Addr(), "--decider-ca-file="+s.tls.caFile, "--decider-server-name="+deciderDNS)
	plain := startEdge(t, s.decider.Addr())
	for _, e := range []string{noCert.URL(), plain.URL()} {
		code, body := completion(t, e)
		require.Equal(t, http.StatusServiceUnavailable, code, body)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"no client certificate": clientTLS(t, tlsfiles.Client{CAFile: s.tls.caFile, ServerName: deciderDNS}),
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
	o := mtlsStack()
	o.noEdge = true
	s := startStack(t, o)
	creds := clientTLS(t, tlsfiles.Client{CAFile: s.tls.caFile, CertFile: s.tls.edgeCert, KeyFile: s.tls.edgeKey, ServerName: deciderDNS})
	before, err := serial(t, s.decider.Addr(), creds)
	require.NoError(t, err)

	next, err := s.tls.ca.Issue("decider", tlstest.ServerAuth|tlstest.ClientAuth, time.Hour, deciderDNS)
	require.NoError(t, err)
	require.NotEqual(t, 0, before.Cmp(next.Cert.SerialNumber))
	_, _, err = next.Write(s.tls.dir, "decider") // the same files, replaced
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		got, err := serial(t, s.decider.Addr(), creds)
		return err == nil && got.Cmp(next.Cert.SerialNumber) == 0
	}, 15*time.Second, 20*time.Millisecond, "new connections never saw the new certificate")
	edge := s.addEdge(t, s.decider.Addr())
	require.Eventually(t, func() bool {
		code, _ := completion(t, edge.URL())
		return code == http.StatusOK
	}, 15*time.Second, 20*time.Millisecond, "a new edge never served through the rotated certificate")
}

func clientTLS(t testing.TB, c tlsfiles.Client) credentials.TransportCredentials {
	t.Helper()
	c.Refresh = 20 * time.Millisecond
	creds, err := tlsfiles.NewClient(c)
	require.NoError(t, err)
	t.Cleanup(creds.Close)
	return creds.TransportCredentials()
}
