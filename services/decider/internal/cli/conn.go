package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Where the command finds the decider and its credential when no flag or
// environment variable says: where `make run` serves and writes them.
const (
	// DefaultAddr is the decider's gRPC address under make run.
	DefaultAddr = "127.0.0.1:9090"
	// DefaultTokenFile is the operator token make run writes, relative to
	// the working directory (Env.Dir).
	DefaultTokenFile = ".data/operator-token"
	// EnvAddr and EnvTokenFile are the environment variables of --decider
	// and --token-file.
	EnvAddr      = "SWITCHBOARD_DECIDER"
	EnvTokenFile = "SWITCHBOARD_TOKEN_FILE"
	// callTimeout bounds each call.
	callTimeout = 10 * time.Second
)

// connFlags say how to reach the decider and as whom.
type connFlags struct {
	addr, tokenFile                       string
	caFile, certFile, keyFile, serverName string
	plaintext                             bool
	// tokenFrom says where tokenFile came from, for the error messages.
	tokenFrom string
}

// addConnFlags registers the flags that say how to reach the decider.
func addConnFlags(fs *flag.FlagSet) *connFlags {
	c := &connFlags{}
	fs.StringVar(&c.addr, "decider", "", "decider gRPC address (env "+EnvAddr+"; default "+DefaultAddr+")")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding an operator's bearer token (env "+EnvTokenFile+"; default "+DefaultTokenFile+" when it exists)")
	fs.StringVar(&c.caFile, "ca-file", "", "PEM CAs of the decider's server certificate (TLS)")
	fs.StringVar(&c.certFile, "cert-file", "", "PEM client certificate, for a decider that requires one (mutual TLS; an operator's certificate is a credential too)")
	fs.StringVar(&c.keyFile, "key-file", "", "PEM private key of --cert-file")
	fs.StringVar(&c.serverName, "server-name", "", "name the decider's certificate must carry (default: the host of --decider)")
	fs.BoolVar(&c.plaintext, "plaintext", false, "connect without TLS to a non-loopback --decider")
	return c
}

// fromEnv fills what no flag set from the environment and the defaults.
func (c *connFlags) fromEnv(fs *flag.FlagSet, getenv func(string) string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case set["decider"]:
	case getenv(EnvAddr) != "":
		c.addr = getenv(EnvAddr)
	default:
		c.addr = DefaultAddr
	}
	switch {
	case set["token-file"]:
		c.tokenFrom = "--token-file"
	case getenv(EnvTokenFile) != "":
		c.tokenFile, c.tokenFrom = getenv(EnvTokenFile), EnvTokenFile
	}
	if set["token-file"] && c.tokenFile == "" {
		return usagef("--token-file is empty: name the file holding an operator's token")
	}
	return nil
}

// credential resolves the token file: the flag's, the environment's, or,
// unless a client certificate is the credential, make run's when it exists
// under dir. None is an error naming all three.
func (c *connFlags) credential(dir string) error {
	if c.tokenFile != "" || c.certFile != "" {
		return nil
	}
	def := filepath.Join(dir, DefaultTokenFile)
	if _, err := os.Stat(def); err == nil {
		c.tokenFile, c.tokenFrom = def, "make run's "+DefaultTokenFile
		return nil
	}
	return fmt.Errorf("no operator credential: pass --token-file FILE, set %s=FILE, or run from the directory `make run` was started in "+
		"(it writes %s; looked for %s, which does not exist)", EnvTokenFile, DefaultTokenFile, def)
}

// dial connects to the decider: the connection and what releases it.
func (r *run) dial() (*grpc.ClientConn, func(), error) {
	c := r.conn
	if err := c.credential(r.env.Dir); err != nil {
		return nil, nil, err
	}
	creds, closeCreds, err := TransportCredentials(c.addr, tlsfiles.Client{CAFile: c.caFile, CertFile: c.certFile, KeyFile: c.keyFile, ServerName: c.serverName}, c.plaintext)
	if err != nil {
		return nil, nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if c.tokenFile != "" {
		tok, err := bearer.NewFile(c.tokenFile, bearer.Options{})
		if err != nil {
			closeCreds()
			return nil, nil, fmt.Errorf("the operator token (%s): %w", c.tokenFrom, err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tok))
	}
	conn, err := grpc.NewClient(c.addr, opts...)
	if err != nil {
		closeCreds()
		return nil, nil, fmt.Errorf("--decider %q: %w", c.addr, err)
	}
	return conn, func() { _ = conn.Close(); closeCreds() }, nil
}

// client connects and returns a client of every service of the decider.
func (r *run) client() (switchboardv1.DeciderClient, func(), error) {
	conn, closeConn, err := r.dial()
	if err != nil {
		return switchboardv1.DeciderClient{}, nil, err
	}
	return switchboardv1.NewDeciderClient(conn), closeConn, nil
}

// once connects, makes one call (as call does) and closes.
func once[Resp any](ctx context.Context, r *run, f func(context.Context, switchboardv1.DeciderClient) (Resp, error)) (Resp, error) {
	c, done, err := r.client() //nolint:contextcheck // credentials outlive any one call; each handshake has its own context
	if err != nil {
		var zero Resp
		return zero, err
	}
	defer done()
	return call(ctx, r, func(ctx context.Context) (Resp, error) { return f(ctx, c) })
}

// call runs one call with the call timeout and turns its error into one
// that says what to do.
func call[Resp any](ctx context.Context, r *run, f func(context.Context) (Resp, error)) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := f(ctx)
	if err != nil {
		return resp, r.explainError(err)
	}
	return resp, nil
}

// explainError says what a failed call means for the user and what to do.
func (r *run) explainError(err error) error {
	c := r.conn
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := st.Message()
	cred := "the token in " + c.tokenFile + " (" + c.tokenFrom + ")"
	if c.tokenFile == "" {
		cred = "the client certificate " + c.certFile
	}
	switch st.Code() {
	case codes.Unavailable:
		if strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such host") || strings.Contains(msg, "connection error") {
			return fmt.Errorf("cannot reach the decider at %s (%s): is it running? `make run` starts one on %s; elsewhere pass --decider HOST:PORT or set %s",
				c.addr, msg, DefaultAddr, EnvAddr)
		}
		return fmt.Errorf("the decider at %s is unavailable: %s", c.addr, msg)
	case codes.Unauthenticated:
		return fmt.Errorf("the decider at %s refused %s: %s; use an operator token of this deployment's catalog "+
			"(make run writes a new %s each run)", c.addr, cred, msg, DefaultTokenFile)
	case codes.PermissionDenied:
		return fmt.Errorf("the decider at %s did not allow this to %s: %s; an operator's credential is needed (role operator in the catalog's callers)", c.addr, cred, msg)
	case codes.DeadlineExceeded:
		return fmt.Errorf("the decider at %s did not answer within %v", c.addr, callTimeout)
	}
	return fmt.Errorf("%s (%s)", msg, codeWords(st.Code()))
}

// codeWords writes a status code in words: NotFound is "not found".
func codeWords(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte(' ')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TransportCredentials returns the credentials to reach the decider at
// addr: TLS when any TLS file or name is given, plaintext when chosen or
// on loopback, and an error naming both choices otherwise; and what
// releases them.
func TransportCredentials(addr string, c tlsfiles.Client, plaintext bool) (credentials.TransportCredentials, func(), error) {
	useTLS := c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != ""
	switch {
	case useTLS && plaintext:
		return nil, nil, errors.New("--plaintext and the TLS flags exclude each other")
	case useTLS:
		creds, err := tlsfiles.NewClient(c)
		if err != nil {
			return nil, nil, err
		}
		return creds.TransportCredentials(), creds.Close, nil
	case plaintext || tlsfiles.Loopback(addr):
		return insecure.NewCredentials(), func() {}, nil
	}
	return nil, nil, fmt.Errorf("--decider %s is not a loopback address: connect with TLS (--ca-file, and --cert-file "+
		"with --key-file for mutual TLS) or choose plaintext explicitly with --plaintext", addr)
}
