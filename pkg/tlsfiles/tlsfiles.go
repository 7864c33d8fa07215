// Package tlsfiles builds gRPC transport credentials from PEM files and
// reloads them when the files change, so certificates and CAs rotate without
// a restart. The files are watched by grpc's pemfile certificate provider;
// every new connection uses the key material read last, and connections
// already open keep theirs.
//
// Certificate and key files must sit in the same directory and be replaced
// together (the way a mounted Kubernetes Secret is updated); a pair that does
// not match, or a file that does not parse, is ignored until the next check,
// and the material read before stays in use.
package tlsfiles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/tls/certprovider"
	"google.golang.org/grpc/credentials/tls/certprovider/pemfile"
)

// DefaultRefresh is how often the files are checked for changes.
const DefaultRefresh = time.Minute

// materialWait bounds the wait for key material in a handshake; the files
// are read before New returns, so it is only a safety net.
const materialWait = 5 * time.Second

// Server configures the credentials of a TLS server.
type Server struct {
	// CertFile and KeyFile are the server's certificate chain and private key,
	// PEM. (Required)
	CertFile, KeyFile string
	// ClientCAFile holds the CA certificates that sign client certificates,
	// PEM. (Optional) When set, every client must present a certificate
	// signed by one of them (mutual TLS); empty accepts clients without one.
	ClientCAFile string
	// Refresh is how often the files are checked. (Optional) Defaults to DefaultRefresh.
	Refresh time.Duration
}

// Client configures the credentials of a TLS client.
type Client struct {
	// CAFile holds the CA certificates that sign the server's certificate,
	// PEM. (Optional) Empty trusts the system's roots.
	CAFile string
	// CertFile and KeyFile are the client's own certificate and key, PEM,
	// presented to a server that asks for one. (Optional) Both or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry. (Optional)
	// Defaults to the host of the address dialled.
	ServerName string
	// Refresh is how often the files are checked. (Optional) Defaults to DefaultRefresh.
	Refresh time.Duration
}

// Creds are reloading credentials. Close stops watching the files.
type Creds struct {
	identity certprovider.Provider // nil without a certificate
	roots    certprovider.Provider // nil without a CA file
	config   *tls.Config
	// serverName is the client's fixed server name, "" for the host dialled.
	serverName string
}

// NewServer reads the server's files, failing at once on any that is
// missing or invalid, and watches them.
func NewServer(s Server) (*Creds, error) {
	if s.CertFile == "" || s.KeyFile == "" {
		return nil, errors.New("tls: a server needs both a certificate file and a key file")
	}
	c, err := start(s.CertFile, s.KeyFile, s.ClientCAFile, s.Refresh)
	if err != nil {
		return nil, err
	}
	mutual := s.ClientCAFile != ""
	c.config = &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Each handshake takes the material read last, so a rotated
		// certificate or client CA applies to the next connection.
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			ctx, cancel := context.WithTimeout(hello.Context(), materialWait)
			defer cancel()
			cert, err := c.certificate(ctx)
			if err != nil {
				return nil, err
			}
			cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}}
			if mutual {
				pool, err := c.pool(ctx)
				if err != nil {
					return nil, err
				}
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
				cfg.ClientCAs = pool
			}
			return cfg, nil
		},
	}
	return c, nil
}

// NewClient reads the client's files, failing at once on any that is
// missing or invalid, and watches them.
func NewClient(cl Client) (*Creds, error) {
	if (cl.CertFile == "") != (cl.KeyFile == "") {
		return nil, errors.New("tls: a client certificate needs both a certificate file and a key file")
	}
	c, err := start(cl.CertFile, cl.KeyFile, cl.CAFile, cl.Refresh)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cl.ServerName}
	if c.identity != nil {
		cfg.GetClientCertificate = func(info *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			ctx, cancel := context.WithTimeout(info.Context(), materialWait)
			defer cancel()
			return c.certificate(ctx)
		}
	}
	c.serverName = cl.ServerName
	if c.roots != nil {
		// The standard verification reads RootCAs once per tls.Config; to
		// verify against the CA read last it is done here instead, with
		// the same checks: chain, validity, server name, key usage. The
		// name is the configured one: the connection state's ServerName is
		// empty when an IP address is dialled (no SNI), and verifying
		// against it would accept a certificate for any name.
		cfg.InsecureSkipVerify = true //nolint:gosec // verified in VerifyConnection against the current roots
		cfg.VerifyConnection = c.verifyFor(context.Background(), cl.ServerName)
	}
	c.config = cfg
	return c, nil
}

// verifyFor returns a VerifyConnection that checks the server's chain
// against the current roots and its certificate against name; ctx bounds
// the wait for the roots.
func (c *Creds) verifyFor(ctx context.Context, name string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		ctx, cancel := context.WithTimeout(ctx, materialWait)
		defer cancel()
		pool, err := c.pool(ctx)
		if err != nil {
			return err
		}
		return verifyServer(cs, pool, name)
	}
}

// verifyServer checks the server's chain against roots and its name, as
// crypto/tls does when it verifies with RootCAs.
func verifyServer(cs tls.ConnectionState, roots *x509.CertPool, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server presented no certificate")
	}
	if name == "" {
		return errors.New("tls: no server name to verify the server's certificate against")
	}
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, DNSName: name,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("tls: server certificate: %w", err)
	}
	return nil
}

// start checks the files parse, then starts watching them.
func start(certFile, keyFile, caFile string, refresh time.Duration) (_ *Creds, err error) {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	if certFile != "" {
		if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
			return nil, fmt.Errorf("tls: certificate %s and key %s: %w", certFile, keyFile, err)
		}
	}
	if caFile != "" {
		data, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("tls: CA file: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", caFile)
		}
	}
	c := &Creds{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if certFile != "" {
		c.identity, err = pemfile.NewProvider(pemfile.Options{CertFile: certFile, KeyFile: keyFile, RefreshDuration: refresh})
		if err != nil {
			return nil, fmt.Errorf("tls: watch %s: %w", certFile, err)
		}
	}
	if caFile != "" {
		c.roots, err = pemfile.NewProvider(pemfile.Options{RootFile: caFile, RefreshDuration: refresh})
		if err != nil {
			return nil, fmt.Errorf("tls: watch %s: %w", caFile, err)
		}
	}
	return c, nil
}

func (c *Creds) certificate(ctx context.Context) (*tls.Certificate, error) {
	km, err := c.identity.KeyMaterial(ctx)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate not available: %w", err)
	}
	if len(km.Certs) == 0 {
		return nil, errors.New("tls: certificate not available")
	}
	return &km.Certs[0], nil
}

func (c *Creds) pool(ctx context.Context) (*x509.CertPool, error) {
	km, err := c.roots.KeyMaterial(ctx)
	if err != nil {
		return nil, fmt.Errorf("tls: CA certificates not available: %w", err)
	}
	if km.Roots == nil {
		return nil, errors.New("tls: CA certificates not available")
	}
	return km.Roots, nil
}

// TLSConfig returns the TLS configuration, for a client or server other
// than gRPC's. The caller must not change it. A client built without a
// ServerName refuses every server through it: only the gRPC credentials
// know the address dialled.
func (c *Creds) TLSConfig() *tls.Config { return c.config }

// TransportCredentials returns gRPC transport credentials.
func (c *Creds) TransportCredentials() credentials.TransportCredentials {
	tc := credentials.NewTLS(c.config)
	if c.roots == nil || c.serverName != "" || c.config.GetConfigForClient != nil {
		return tc
	}
	return &dialled{TransportCredentials: tc, c: c}
}

// dialled verifies each server against the host of the address dialled,
// which only the handshake knows.
type dialled struct {
	credentials.TransportCredentials
	c *Creds
}

// ClientHandshake implements [credentials.TransportCredentials.ClientHandshake].
func (d *dialled) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	host, _, err := net.SplitHostPort(authority)
	if err != nil {
		host = authority
	}
	cfg := d.c.config.Clone()
	cfg.ServerName = host
	cfg.VerifyConnection = d.c.verifyFor(ctx, host)
	return credentials.NewTLS(cfg).ClientHandshake(ctx, authority, raw)
}

// Clone implements [credentials.TransportCredentials.Clone].
func (d *dialled) Clone() credentials.TransportCredentials {
	return &dialled{TransportCredentials: d.TransportCredentials.Clone(), c: d.c}
}

// Close stops watching the files; handshakes after it fail. Connections
// already open are not affected.
func (c *Creds) Close() {
	if c == nil {
		return
	}
	if c.identity != nil {
		c.identity.Close()
	}
	if c.roots != nil {
		c.roots.Close()
	}
}
