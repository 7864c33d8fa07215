package app

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	block, _ := pem.Decode(data)
	require.NotNil(t, block, path)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return cert
}

// The certificate generator's files work as they are: a decider serves
// mutual TLS with them and a caller's certificate gets through; a second
// run adds certificates signed by the same CA.
func TestCertsCommand(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	var log strings.Builder
	require.NoError(t, Certs([]string{"--out", out, "--decider-name", "decider.example,127.0.0.1", "--name", "edges"}, &log))
	ca := readCert(t, filepath.Join(out, "ca.crt"))
	require.True(t, ca.IsCA)
	dec := readCert(t, filepath.Join(out, "decider.crt"))
	require.Equal(t, "deciders", dec.Subject.CommonName)
	require.Equal(t, []string{"decider.example"}, dec.DNSNames)
	require.Len(t, dec.IPAddresses, 1)
	require.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, dec.ExtKeyUsage)
	edges := readCert(t, filepath.Join(out, "edges.crt"))
	require.Equal(t, "edges", edges.Subject.CommonName)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, edges.ExtKeyUsage)
	for _, key := range []string{"ca.key", "decider.key", "edges.key"} {
		fi, err := os.Stat(filepath.Join(out, key))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), key)
	}

	// Again with another caller: the CA is kept, the new certificate chains to it.
	require.NoError(t, Certs([]string{"--out", out, "--decider-name", "", "--name", "ops"}, &log))
	require.Equal(t, ca.Raw, readCert(t, filepath.Join(out, "ca.crt")).Raw)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err := readCert(t, filepath.Join(out, "ops.crt")).Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	require.ErrorContains(t, Certs([]string{"--out", out, "--name", "../x"}, &log), "letters")
	require.ErrorContains(t, Certs([]string{"--name", "x"}, &log), "--out")

	d, err := Start(t.Context(), Config{
		Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: t.TempDir(), Catalog: writeCatalog(t, t.TempDir(), false),
		ShutdownTimeout: 5 * time.Second, ID: "test", Exploration: -1,
		TLSCertFile: filepath.Join(out, "decider.crt"), TLSKeyFile: filepath.Join(out, "decider.key"), TLSClientCAFile: filepath.Join(out, "ca.crt"),
	}, quietLogger())
	require.NoError(t, err)
	defer d.Close()
	c, _ := dialDecider(t, d.Addr(), clientCreds(t, tlsfiles.Client{
		CAFile: filepath.Join(out, "ca.crt"), CertFile: filepath.Join(out, "ops.crt"), KeyFile: filepath.Join(out, "ops.key"),
	}))
	d0 := decideRequest(0) // explained, what an operator may do
	_, err = c.Explain(t.Context(), &switchboardv1.ExplainRequest{Identity: d0.GetIdentity(), Model: d0.GetModel(), Tokens: d0.GetTokens()})
	require.NoError(t, err, "dialled by IP, which the decider's certificate names")
}
