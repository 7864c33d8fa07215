package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/flagenv"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cli"
)

// Explain is the `decider explain` command: it asks a running decider, as
// an operator (OperatorService.Explain), what it would do with a
// hypothetical request (nothing reserved, explored or recorded) and prints
// every candidate's figures, as `switchboard explain` does.
func Explain(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("decider explain", flag.ContinueOnError)
	fs.SetOutput(stdout)
	dial := addDialFlags(fs)
	model := fs.String("model", "", "model id, optionally with :floor or :nitro (required)")
	in := fs.Int64("input-tokens", 1000, "prompt tokens")
	cached := fs.Int64("cached-tokens", 0, "cached prompt tokens (0: let the decider estimate)")
	maxOut := fs.Int64("max-tokens", 0, "max output tokens (0: the model's typical output)")
	tenant := fs.String("tenant", "", "tenant id (trusted caller)")
	key := fs.String("api-key", "", "an API key, authenticated like the edge does (instead of --tenant)")
	stream := fs.Bool("stream", false, "a streaming request")
	session := fs.String("session-id", "", "a conversation's session id (X-Session-Id): shows whether its next turn stays on its endpoint")
	provider := fs.String("provider", "", `routing options as the HTTP API's provider object, e.g. '{"sort":"latency","max_price":{"prompt":0.3}}'`)
	if err := flagenv.Parse(fs, "SWITCHBOARD_EXPLAIN", args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *model == "" {
		return errors.New("--model is required")
	}
	req := &switchboardv1.ExplainRequest{
		Model: *model, Stream: *stream, SessionId: *session,
		Identity: &switchboardv1.Identity{TenantId: *tenant},
		Tokens:   &switchboardv1.TokenEstimate{InputTokens: *in, CachedInputTokens: *cached, MaxOutputTokens: *maxOut},
	}
	if *key != "" {
		req.Identity = &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(*key)}
	}
	prefs, err := cli.ParseProvider(*provider, "", "")
	if err != nil {
		return err
	}
	req.Provider = prefs
	//nolint:contextcheck // credentials outlive any one call; each handshake has its own context
	conn, closeConn, err := dial.dial()
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := switchboardv1.NewOperatorServiceClient(conn).Explain(ctx, req)
	if err != nil {
		return err
	}
	cli.PrintExplanation(stdout, req, resp)
	return nil
}

// dialFlags are the flags of a command that calls a running decider.
type dialFlags struct {
	addr, tokenFile                       *string
	caFile, certFile, keyFile, serverName *string
	plaintext                             *bool
}

// addDialFlags registers the flags that say how to reach the decider.
func addDialFlags(fs *flag.FlagSet) *dialFlags {
	return &dialFlags{
		addr:      fs.String("decider", "127.0.0.1:9090", "decider gRPC address"),
		tokenFile: fs.String("token-file", "", "file holding an operator's bearer token"),
		// Transport security: the same rule as the edge's, plaintext only on
		// loopback unless chosen.
		caFile:     fs.String("ca-file", "", "PEM CAs of the decider's server certificate (TLS; empty with another TLS flag: the system's roots)"),
		certFile:   fs.String("cert-file", "", "PEM client certificate, for a decider that requires one (mutual TLS)"),
		keyFile:    fs.String("key-file", "", "PEM private key of --cert-file"),
		serverName: fs.String("server-name", "", "name the decider's certificate must carry (default: the host of --decider)"),
		plaintext:  fs.Bool("plaintext", false, "connect without TLS to a non-loopback --decider"),
	}
}

// dial connects to the decider as the flags say; close releases the
// connection and its credentials.
func (f *dialFlags) dial() (_ *grpc.ClientConn, closeConn func(), err error) {
	creds, closeCreds, err := cli.TransportCredentials(*f.addr, tlsfiles.Client{CAFile: *f.caFile, CertFile: *f.certFile, KeyFile: *f.keyFile, ServerName: *f.serverName}, *f.plaintext)
	if err != nil {
		return nil, nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if *f.tokenFile != "" {
		tok, err := bearer.NewFile(*f.tokenFile, bearer.Options{})
		if err != nil {
			closeCreds()
			return nil, nil, fmt.Errorf("--token-file: %w", err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tok))
	}
	conn, err := grpc.NewClient(*f.addr, opts...)
	if err != nil {
		closeCreds()
		return nil, nil, err
	}
	return conn, func() { _ = conn.Close(); closeCreds() }, nil
}
