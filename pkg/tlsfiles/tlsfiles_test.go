package tlsfiles_test

import (
	"context"
	"crypto/tls"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles/tlstest"
)

const refresh = 20 * time.Millisecond

// pki is a CA with a server and a client certificate, written under dir.
type pki struct {
	ca                    *tlstest.CA
	caFile                string
	serverCert, serverKey string
	clientCert, clientKey string
	server, client        *tlstest.Leaf
}

func newPKI(t *testing.T, dir, name string) *pki {
	t.Helper()
	ca, err := tlstest.NewCA(name+" CA", time.Hour)
	require.NoError(t, err)
	srv, err := ca.Issue("decider", tlstest.ServerAuth|tlstest.ClientAuth, time.Hour, "localhost", "127.0.0.1")
	require.NoError(t, err)
	cli, err := ca.Issue("edges", tlstest.ClientAuth, time.Hour)
	require.NoError(t, err)
	p := &pki{ca: ca, server: srv, client: cli, caFile: filepath.Join(dir, name+"-ca.crt")}
	require.NoError(t, ca.WriteCA(p.caFile))
	p.serverCert, p.serverKey, err = srv.Write(dir, name+"-server")
	require.NoError(t, err)
	p.clientCert, p.clientKey, err = cli.Write(dir, name+"-client")
	require.NoError(t, err)
	return p
}

// serve starts a gRPC server with the health service and creds on 127.0.0.1.
func serve(t *testing.T, creds *tlsfiles.Creds) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer(grpc.Creds(creds.TransportCredentials()))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// check opens a new connection, calls Health.Check and returns the serial
// of the certificate the server presented.
func check(t *testing.T, addr string, creds credentials.TransportCredentials) (*big.Int, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return nil, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	require.True(t, ok, "the connection is not TLS")
	require.GreaterOrEqual(t, info.State.Version, uint16(tls.VersionTLS12))
	return info.State.PeerCertificates[0].SerialNumber, nil
}

func newServer(t *testing.T, s tlsfiles.Server) *tlsfiles.Creds {
	t.Helper()
	s.Refresh = refresh
	c, err := tlsfiles.NewServer(s)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func newClient(t *testing.T, cl tlsfiles.Client) credentials.TransportCredentials {
	t.Helper()
	cl.Refresh = refresh
	c, err := tlsfiles.NewClient(cl)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.TransportCredentials()
}

func TestMutualTLSHandshake(t *testing.T) {
	p := newPKI(t, t.TempDir(), "a")
	addr := serve(t, newServer(t, tlsfiles.Server{CertFile: p.serverCert, KeyFile: p.serverKey, ClientCAFile: p.caFile}))
	serial, err := check(t, addr, newClient(t, tlsfiles.Client{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey}))
	require.NoError(t, err)
	require.Equal(t, p.server.Cert.SerialNumber, serial)
}

func TestServerOnlyTLSAcceptsClientWithoutCertificate(t *testing.T) {
	p := newPKI(t, t.TempDir(), "a")
	addr := serve(t, newServer(t, tlsfiles.Server{CertFile: p.serverCert, KeyFile: p.serverKey}))
	_, err := check(t, addr, newClient(t, tlsfiles.Client{CAFile: p.caFile, ServerName: "localhost"}))
	require.NoError(t, err)
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir, "a")
	other := newPKI(t, dir, "b")
	addr := serve(t, newServer(t, tlsfiles.Server{CertFile: p.serverCert, KeyFile: p.serverKey, ClientCAFile: p.caFile}))
	for name, cl := range map[string]tlsfiles.Client{
		"server signed by another CA": {CAFile: other.caFile, CertFile: other.clientCert, KeyFile: other.clientKey},
		"no client certificate":       {CAFile: p.caFile},
		"client signed by another CA": {CAFile: p.caFile, CertFile: other.clientCert, KeyFile: other.clientKey},
		"server name not in the certificate": {
			CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey, ServerName: "decider.elsewhere",
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := check(t, addr, newClient(t, cl))
			require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		})
	}
	t.Run("plaintext client", func(t *testing.T) {
		_, err := check(t, addr, insecure.NewCredentials())
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	})
	t.Run("client certificate without clientAuth usage", func(t *testing.T) {
		leaf, err := p.ca.Issue("server-only", tlstest.ServerAuth, time.Hour, "localhost")
		require.NoError(t, err)
		cert, key, err := leaf.Write(dir, "server-only")
		require.NoError(t, err)
		_, err = check(t, addr, newClient(t, tlsfiles.Client{CAFile: p.caFile, CertFile: cert, KeyFile: key}))
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	})
}

func TestInvalidFilesFailAtOnce(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir, "a")
	junk := filepath.Join(dir, "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("not a certificate"), 0o600))
	_, err := tlsfiles.NewServer(tlsfiles.Server{CertFile: p.serverCert})
	require.Error(t, err)
	_, err = tlsfiles.NewServer(tlsfiles.Server{CertFile: p.serverCert, KeyFile: p.clientKey})
	require.ErrorContains(t, err, p.serverCert)
	_, err = tlsfiles.NewServer(tlsfiles.Server{CertFile: p.serverCert, KeyFile: p.serverKey, ClientCAFile: junk})
	require.ErrorContains(t, err, "no PEM certificate")
	_, err = tlsfiles.NewClient(tlsfiles.Client{CAFile: filepath.Join(dir, "missing.pem")})
	require.Error(t, err)
	_, err = tlsfiles.NewClient(tlsfiles.Client{CertFile: p.clientCert})
	require.Error(t, err)
}

// TestRotation replaces every file on disk, server's and client's, with
// ones from a new CA: the running server presents the new certificate and
// trusts only the new client CA on new connections, the reloading client
// follows, and a connection opened before keeps working.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	live := newPKI(t, dir, "live") // the files the server and client watch
	addr := serve(t, newServer(t, tlsfiles.Server{CertFile: live.serverCert, KeyFile: live.serverKey, ClientCAFile: live.caFile}))
	client := newClient(t, tlsfiles.Client{CAFile: live.caFile, CertFile: live.clientCert, KeyFile: live.clientKey})

	serial, err := check(t, addr, client)
	require.NoError(t, err)
	require.Equal(t, live.server.Cert.SerialNumber, serial)
	before, err := grpc.NewClient(addr, grpc.WithTransportCredentials(client))
	require.NoError(t, err)
	defer func() { _ = before.Close() }()
	_, err = healthpb.NewHealthClient(before).Check(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)

	next := newPKI(t, dir, "next")
	oldCA, oldCert, oldKey := filepath.Join(dir, "old-live-ca.crt"), filepath.Join(dir, "old-live-client.crt"), filepath.Join(dir, "old-live-client.key")
	copyFile(t, live.caFile, oldCA)
	copyFile(t, live.clientCert, oldCert)
	copyFile(t, live.clientKey, oldKey)

	// Rotate: the new CA and certificates replace the watched files.
	copyFile(t, next.caFile, live.caFile)
	copyFile(t, next.serverKey, live.serverKey)
	copyFile(t, next.serverCert, live.serverCert)
	copyFile(t, next.clientKey, live.clientKey)
	copyFile(t, next.clientCert, live.clientCert)

	require.Eventually(t, func() bool {
		serial, err := check(t, addr, client)
		return err == nil && serial.Cmp(next.server.Cert.SerialNumber) == 0
	}, 10*time.Second, refresh, "new connections never saw the new server certificate")
	// The server trusts the new client CA only: a client presenting the
	// old CA's certificate is refused once the server reloaded it.
	stale := newClient(t, tlsfiles.Client{CAFile: next.caFile, CertFile: oldCert, KeyFile: oldKey})
	require.Eventually(t, func() bool {
		_, err := check(t, addr, stale)
		return status.Code(err) == codes.Unavailable
	}, 10*time.Second, refresh, "the server still accepts the old CA's client certificate")
	// A client that still trusts only the old CA refuses the new server.
	_, err = check(t, addr, newClient(t, tlsfiles.Client{CAFile: oldCA, CertFile: next.clientCert, KeyFile: next.clientKey}))
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)

	_, err = healthpb.NewHealthClient(before).Check(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "the connection opened before the rotation broke")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	require.NoError(t, err)
	tmp := to + ".tmp"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, to))
}

// A client dialling an IP address must find that IP in the server's
// certificate: Go sends no SNI for an IP, so a check against the name the
// TLS state reports would check nothing and accept any certificate the CA
// signed for any name.
func TestIPAddressMustBeInTheCertificate(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir, "a")
	leaf, err := p.ca.Issue("decider", tlstest.ServerAuth, time.Hour, "decider.example")
	require.NoError(t, err)
	cert, key, err := leaf.Write(dir, "dns-only")
	require.NoError(t, err)
	addr := serve(t, newServer(t, tlsfiles.Server{CertFile: cert, KeyFile: key}))

	_, err = check(t, addr, newClient(t, tlsfiles.Client{CAFile: p.caFile}))
	require.Equal(t, codes.Unavailable, status.Code(err), "a certificate without 127.0.0.1 was accepted for it: %v", err)
	_, err = check(t, addr, newClient(t, tlsfiles.Client{CAFile: p.caFile, ServerName: "decider.example"}))
	require.NoError(t, err, "the fixed server name is verified instead")

	// The same through TLSConfig, for clients other than gRPC.
	c, err := tlsfiles.NewClient(tlsfiles.Client{CAFile: p.caFile, Refresh: refresh})
	require.NoError(t, err)
	defer c.Close()
	cfg := c.TLSConfig().Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err == nil {
		_ = conn.Close()
	}
	require.Error(t, err, "a certificate without 127.0.0.1 was accepted for it")
}
