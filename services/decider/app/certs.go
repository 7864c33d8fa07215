package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tlsfiles/tlstest"
)

// certsUsage explains `decider certs`; flag defaults follow it.
const certsUsage = `Usage: decider certs --out DIR [flags]

Issues a CA and certificates for development, CI and small deployments,
without openssl. Into DIR it writes (keys with mode 0600):

  ca.crt, ca.key          the CA (kept and reused when already there, so
                          later runs add certificates signed by the same CA)
  decider.crt, .key       the decider's certificate: serverAuth AND
                          clientAuth (it is also the client certificate a
                          replica presents to the replica it forwards to),
                          subject CN --decider-id, one DNS or IP name per
                          --decider-name; the first DNS name is what
                          replicas verify (the decider's --peer-server-name)
  NAME.crt, NAME.key      one client certificate (clientAuth) per --name,
                          subject CN = NAME, the caller id the decider
                          knows it by (the catalog's callers)

Then, for example:
  decider --tls-cert-file DIR/decider.crt --tls-key-file DIR/decider.key \
          --tls-client-ca-file DIR/ca.crt ...
  edge --decider-ca-file DIR/ca.crt --decider-cert-file DIR/edges.crt \
       --decider-key-file DIR/edges.key --decider-server-name decider.switchboard.svc ...

For production prefer your own PKI (cert-manager, Vault): the files are
plain PEM and are reloaded by the decider and the edge when they change.

Flags:
`

// certName is a caller id usable as a file name.
var certName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Certs is `decider certs`: it writes a CA, a decider certificate and
// client certificates as PEM files.
func Certs(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("decider certs", flag.ContinueOnError)
	fs.SetOutput(stdout)
	out := fs.String("out", "", "directory to write the files to (created if missing) (required)")
	deciderID := fs.String("decider-id", "deciders", "subject CN of the decider's certificate: the caller id replicas are known by")
	deciderNames := fs.String("decider-name", "decider.switchboard.svc,localhost,127.0.0.1",
		"comma-separated DNS names and IPs of the decider's certificate; empty: no decider certificate")
	var names []string
	fs.Func("name", "a caller id to issue a client certificate for, CN = the id (repeatable, e.g. --name edges --name ops)", func(v string) error {
		if !certName.MatchString(v) || v == "ca" || v == "decider" {
			return fmt.Errorf("%q: letters, digits, '.', '_' and '-', not \"ca\" or \"decider\"", v)
		}
		names = append(names, v)
		return nil
	})
	validity := fs.Duration("validity", 365*24*time.Hour, "how long the new certificates are valid")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), certsUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	switch {
	case *out == "":
		return errors.New("certs: --out is required")
	case fs.NArg() > 0:
		return fmt.Errorf("certs: unexpected arguments %q", fs.Args())
	case *validity <= 0:
		return errors.New("certs: --validity must be positive")
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	ca, err := loadOrCreateCA(*out, *validity, stdout)
	if err != nil {
		return err
	}
	var sans []string
	for _, n := range strings.Split(*deciderNames, ",") {
		if n = strings.TrimSpace(n); n != "" {
			sans = append(sans, n)
		}
	}
	if len(sans) > 0 {
		if err := issue(ca, *out, "decider", *deciderID, tlstest.ServerAuth|tlstest.ClientAuth, *validity, stdout, sans...); err != nil {
			return err
		}
	}
	for _, n := range names {
		if err := issue(ca, *out, n, n, tlstest.ClientAuth, *validity, stdout); err != nil {
			return err
		}
	}
	return nil
}

// loadOrCreateCA reads DIR/ca.crt and DIR/ca.key, or creates them.
func loadOrCreateCA(dir string, validity time.Duration, stdout io.Writer) (*tlstest.CA, error) {
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if _, err := os.Stat(certPath); err == nil {
		ca, err := tlstest.LoadCA(certPath, keyPath)
		if err != nil {
			return nil, fmt.Errorf("certs: existing CA: %w", err)
		}
		fmt.Fprintf(stdout, "using the CA in %s\n", certPath)
		return ca, nil
	}
	// A CA outlives the certificates it signs, so they can be renewed.
	ca, err := tlstest.NewCA("Switchboard CA", 2*validity)
	if err != nil {
		return nil, fmt.Errorf("certs: new CA: %w", err)
	}
	if err := ca.WriteKey(keyPath); err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	if err := ca.WriteCA(certPath); err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", certPath, keyPath)
	return ca, nil
}

func issue(ca *tlstest.CA, dir, file, cn string, usage tlstest.Usage, validity time.Duration, stdout io.Writer, sans ...string) error {
	leaf, err := ca.Issue(cn, usage, validity, sans...)
	if err != nil {
		return fmt.Errorf("certs: %s: %w", file, err)
	}
	certPath, _, err := leaf.Write(dir, file)
	if err != nil {
		return fmt.Errorf("certs: %s: %w", file, err)
	}
	fmt.Fprintf(stdout, "wrote %s (CN=%s)\n", certPath, cn)
	return nil
}
