// Package app wires the edge together: configuration, the decider
// connection, the upstream HTTP client, the Report stream, probes and the
// OpenAI-compatible HTTP API. cmd/edge and the end-to-end tests start it.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/debugserver"
	"github.com/switchboard-ai/switchboard/pkg/gotune"
	"github.com/switchboard-ai/switchboard/pkg/logbuf"
	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/edge/internal/credentials"
	"github.com/switchboard-ai/switchboard/services/edge/internal/dispatch"
	"github.com/switchboard-ai/switchboard/services/edge/internal/httpapi"
	"github.com/switchboard-ai/switchboard/services/edge/internal/probe"
	"github.com/switchboard-ai/switchboard/services/edge/internal/report"
)

// Edge is a running edge.
type Edge struct {
	cfg     Config
	log     *slog.Logger
	ln      net.Listener
	srv     *http.Server
	api     *httpapi.Server
	reports *report.Stream
	debug   *debugserver.Server // the admin listener, nil without one
	// stack is what Start opened, each part's cleanup registered once as it
	// is opened: run in reverse on a start that fails, and by Close.
	stack closers
	wg    sync.WaitGroup
	// serveErr carries the HTTP server's failure, if it stops on its own.
	serveErr chan error

	closeOnce sync.Once
	closeErr  error
}

// Start starts an edge and returns once it is listening. ctx bounds the
// start-up only; the edge runs until Close. Start does not wait for the
// decider: while it is unreachable, requests are answered 503 and the
// Report stream keeps reconnecting in the background.
//
// Each part is built in order, and what it opened is registered once, as
// it is opened, on one stack of cleanups: a step that fails runs the stack
// (listeners closed, goroutines stopped) and returns its error; Close runs
// it after the drain.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (_ *Edge, err error) {
	cfg = cfg.withDefaults()
	if err := errors.Join(cfg.validate(), cfg.checkPlaintext()); err != nil {
		return nil, fmt.Errorf("edge config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var stack closers
	defer func() {
		if err != nil {
			_ = stack.close()
		}
	}()
	conn, err := dialDecider(cfg, &stack)
	if err != nil {
		return nil, err
	}
	decider := switchboardv1.NewRouterServiceClient(conn)
	edgeService := switchboardv1.NewEdgeServiceClient(conn)

	transport := providerTransport()

	pins, err := credentials.ParsePins(cfg.ProviderKeyHosts)
	if err != nil {
		return nil, fmt.Errorf("--provider-key-hosts: %w", err)
	}
	creds, err := credentials.New(credentials.Options{
		Prefix: cfg.ProviderKeyPrefix, Getenv: cfg.Getenv, Dir: cfg.ProviderKeyDir, Hosts: pins,
		Reload: cfg.ProviderKeyReload, Logger: logger.With("component", "credentials"),
	})
	if err != nil {
		return nil, err
	}
	stack.add(func() error { transport.CloseIdleConnections(); return nil })

	commands := &commandHandler{}
	reports := report.New(report.Options{
		Client:            edgeService,
		Hello:             &switchboardv1.EdgeHello{EdgeId: cfg.EdgeID, Region: cfg.Region, Version: BuildVersion()},
		Handler:           commands,
		FlushInterval:     cfg.ReportFlushInterval,
		HeartbeatInterval: cfg.ReservationHeartbeat,
		Logger:            logger.With("component", "report"),
	})
	cooldowns := cooldown.New(nil)
	dispatcher := dispatch.New(dispatch.Options{
		Client:            &http.Client{Transport: transport},
		Credentials:       creds,
		Cooldowns:         cooldowns,
		Reporter:          reports,
		Ledger:            reports,
		Hedges:            edgeService,
		HedgeTimeout:      cfg.HedgeAcquireTimeout,
		Broker:            decider,
		ReserveTimeout:    cfg.ReserveTimeout,
		FirstTokenTimeout: cfg.FirstTokenTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		MaxAttempts:       cfg.MaxAttempts,
		RetryWait:         cfg.RetryWait,
		UserAgent:         "switchboard-edge/" + BuildVersion(),
		Tracer:            cfg.Tracing.Tracer(dispatch.ScopeName),
		Logger:            logger.With("component", "dispatch"),
	})
	probes := probe.New(probe.Options{Prober: dispatcher, Logger: logger.With("component", "probe")})
	commands.probes, commands.cooldowns = probes, cooldowns

	api := httpapi.New(httpapi.Options{
		Decider:        decider,
		Dispatcher:     dispatcher,
		Region:         cfg.Region,
		MaxBodyBytes:   cfg.MaxBodyBytes,
		ReservationTTL: cfg.ReservationTTL,
		QueueWait:      cfg.MaxQueueWait,
		Standby:        cfg.standby(),
		DeciderState:   func() string { return conn.GetState().String() },
		Ready:          deciderReady(healthpb.NewHealthClient(conn)),
		// Bodies are read under their own deadline; the server's
		// ReadTimeout would also cut the long answers that follow.
		BodyReadTimeout:     cfg.BodyReadTimeout,
		MaxUnverifiedBodies: cfg.MaxUnverifiedBodies,
		Logger:              logger.With("component", "httpapi"),
	})
	commands.keys = api

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	stack.add(func() error { _ = ln.Close(); return nil }) // closed already once the server shut down
	handler, debug, err := startAdmin(ctx, cfg, logger, api, reports, &stack)
	if err != nil {
		return nil, err
	}
	e := &Edge{
		cfg: cfg, log: logger, ln: ln, api: api, reports: reports, debug: debug,
		srv: &http.Server{
			Handler:           cfg.Tracing.HTTPHandler(handler, "edge"),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
	}
	e.run(ctx, &stack, probes, creds)
	conn.Connect()
	e.stack = stack
	logger.Info("edge listening", "addr", e.Addr(), "decider", cfg.Decider, "region", cfg.Region, "edge_id", cfg.EdgeID)
	return e, nil
}

// dialDecider is the client connection to the decider replicas, its
// cleanups registered on stack; it connects once Start is done.
func dialDecider(cfg Config, stack *closers) (*grpc.ClientConn, error) {
	deciderCreds := insecure.NewCredentials()
	if cfg.deciderTLS() {
		tlsCreds, err := tlsfiles.NewClient(tlsfiles.Client{
			CAFile: cfg.DeciderCAFile, CertFile: cfg.DeciderCertFile, KeyFile: cfg.DeciderKeyFile, ServerName: cfg.DeciderServerName,
		})
		if err != nil {
			return nil, fmt.Errorf("decider TLS: %w", err)
		}
		stack.add(func() error { tlsCreds.Close(); return nil }) // it reloads the files until then
		deciderCreds = tlsCreds.TransportCredentials()
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(deciderCreds),
		// Pings while calls are open: a decider that stops answering (a
		// paused process, a cut network) fails the calls waiting on it,
		// among them requests waiting in an admission queue, within twice
		// the interval instead of at their deadline. The decider accepts
		// pings every 5 s (pkg/grpcserver).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: cfg.DeciderKeepalive, Timeout: cfg.DeciderKeepalive}),
		// The decider is on the local network: reconnect within a second of
		// a restart (the default starts at 1s and grows to 2 minutes; a
		// restarted decider's slots come back only once its edges have
		// reconnected and replayed), at one dial a second while it is down.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	dialOpts = append(dialOpts, cfg.Tracing.GRPCClient()...)
	if cfg.DeciderTokenFile != "" {
		tok, err := bearer.NewFile(cfg.DeciderTokenFile, bearer.Options{})
		if err != nil {
			return nil, fmt.Errorf("--decider-token-file: %w", err)
		}
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(tok))
	}
	conn, err := dialDeciders(cfg.Decider, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("decider client %s: %w", cfg.Decider, err)
	}
	stack.add(func() error {
		if err := conn.Close(); err != nil {
			return fmt.Errorf("close decider connection: %w", err)
		}
		return nil
	})
	return conn, nil
}

// providerTransport is the HTTP transport of the calls to providers.
func providerTransport() *http.Transport {
	return &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		DialContext:       (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2: true,
		// Many concurrent requests go to few providers: keep plenty of idle
		// connections per host so bursts do not pay for new TLS handshakes.
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Transparent gzip would buffer server-sent events inside the
		// decompressor; chunks must reach the client as they arrive.
		DisableCompression: true,
	}
}

// startAdmin starts the admin listener when the flags ask for one, with the
// metrics it serves and the API handler wrapped to count into them; it
// returns the API's handler, wrapped or not, and the admin server, nil
// without one. Its cleanups are registered on stack.
func startAdmin(ctx context.Context, cfg Config, logger *slog.Logger, api *httpapi.Server, reports *report.Stream, stack *closers) (http.Handler, *debugserver.Server, error) {
	var debug *debugserver.Server
	var metrics *telemetry.Metrics
	handler := api.Handler()
	admin, err := cfg.Admin()
	if err != nil {
		return nil, nil, err
	}
	if admin.Addr != "" {
		var em *edgeMetrics
		if metrics, em, err = startMetrics(reportBacklog{activityBatches: reports.Unacked, reconciles: reports.UnackedReconciles}); err != nil {
			return nil, nil, err
		}
		stack.add(func() error { _ = metrics.Shutdown(context.Background()); return nil })
		handler = em.handler(handler)
		// /healthz and /readyz answer as on the API port: the API's own
		// handlers, for probes and scrapers kept off the public port.
		debug, err = debugserver.Start(ctx, admin, logger.With("component", "admin"),
			debugserver.Mount{Pattern: "/metrics", Handler: metrics.Handler()},
			debugserver.Mount{Pattern: "/healthz", Handler: api.Handler()},
			debugserver.Mount{Pattern: "/readyz", Handler: api.Handler()})
		if err != nil {
			return nil, nil, err
		}
		stack.add(func() error { debug.Close(); return nil })
	}
	return handler, debug, nil
}

// run starts the edge's background work and serves its listener, each
// stopped by a cleanup registered on stack.
func (e *Edge) run(ctx context.Context, stack *closers, probes *probe.Runner, creds *credentials.Store) {
	// Background work lives until Close, not until the start-up context
	// ends, so Close can drain requests before the Report stream stops;
	// probes stop first, so that what they report is still sent.
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stack.add(func() error { cancel(); e.wg.Wait(); return nil })
	stack.add(func() error { probes.Close(); return nil })
	e.wg.Go(func() { e.reports.Run(bg) })
	e.wg.Go(func() { creds.Run(bg) })
	e.serveErr = make(chan error, 1)
	e.wg.Go(func() {
		if err := e.srv.Serve(e.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("http server stopped", "error", err)
			e.serveErr <- err
		}
	})
}

// Addr is the host:port the HTTP API listens on.
func (e *Edge) Addr() string { return e.ln.Addr().String() }

// URL is the OpenAI base URL clients use, "http://<addr>/v1".
func (e *Edge) URL() string { return "http://" + e.Addr() + "/v1" }

// DebugAddr is the host:port of the admin listener, "" without one.
func (e *Edge) DebugAddr() string {
	if e.debug == nil {
		return ""
	}
	return e.debug.Addr()
}

// UnackedReconciles returns how many reservation reconciliations wait for
// the decider's acknowledgement.
func (e *Edge) UnackedReconciles() int { return e.reports.UnackedReconciles() }

// HeldReservations returns the reservations of the calls in flight, as the
// edge declares them to the decider.
func (e *Edge) HeldReservations() []string { return e.reports.Held() }

// KeySetVersion is the version of the decider's key set the edge refuses
// unknown API keys by, 0 before it has one.
func (e *Edge) KeySetVersion() uint64 { return e.api.KeySetVersion() }

// Close shuts the edge down gracefully: /readyz turns 503 (for DrainDelay,
// while new requests are still served), requests in flight finish (up to
// ShutdownGrace, then they are cut), probes stop, the last call reports and activity
// records are flushed and the decider connection closes. It is safe to call
// more than once.
func (e *Edge) Close() error {
	e.closeOnce.Do(func() {
		var errs []error
		e.api.SetDraining()
		if e.cfg.DrainDelay > 0 {
			e.log.Info("draining", "delay", e.cfg.DrainDelay)
			time.Sleep(e.cfg.DrainDelay)
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.ShutdownGrace)
		if err := e.srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("graceful shutdown: %w", err))
			_ = e.srv.Close()
		}
		cancel()
		if err := e.stack.close(); err != nil {
			errs = append(errs, err)
		}
		if d := e.reports.Dropped(); d > 0 {
			e.log.Warn("call reports dropped during this run", "dropped", d)
		}
		if d := e.reports.DroppedActivity(); d > 0 {
			e.log.Error("activity records dropped during this run", "dropped", d)
		}
		e.closeErr = errors.Join(errs...)
		e.log.Info("edge stopped")
	})
	return e.closeErr
}

// closers are cleanups, run last first.
type closers []func() error

// add registers a cleanup, run before every one added earlier.
func (c *closers) add(f func() error) { *c = append(*c, f) }

// close runs every cleanup, last added first, once, and joins their errors.
func (c *closers) close() error {
	var errs []error
	for i := len(*c) - 1; i >= 0; i-- {
		errs = append(errs, (*c)[i]())
	}
	*c = nil
	return errors.Join(errs...)
}

// Run parses args, starts the edge, and serves until ctx ends, then shuts
// down gracefully. A clean shutdown returns nil; so does -help.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := ParseFlags(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		usage(stderr)
		return nil
	}
	if err != nil {
		return fmt.Errorf("edge: %w (run with -help for usage)", err)
	}
	if cfg.LogFlushInterval > 0 {
		lw := logbuf.New(stderr, cfg.LogFlushInterval)
		defer func() { _ = lw.Close() }()
		stderr = lw
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	if s := gotune.Apply(os.Getenv); s != (gotune.Settings{}) {
		logger.Info("garbage collector", "gc_percent", s.GCPercent, "memory_limit_bytes", s.MemoryLimit)
	}
	shutdown, err := telemetry.Setup(ctx, "switchboard-edge", Version)
	if err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	e, err := Start(ctx, cfg, logger)
	if err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	return e.wait(ctx)
}

// wait serves until ctx ends, then shuts down gracefully; or until the HTTP
// server fails on its own (its listener broke), then stops everything else
// and returns why, so the process exits non-zero and is restarted.
func (e *Edge) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		e.log.Info("shutting down", "cause", context.Cause(ctx))
		return e.Close()
	case err := <-e.serveErr:
		return errors.Join(fmt.Errorf("edge: http server: %w", err), e.Close())
	}
}

// commandHandler routes the decider's commands to the probe runner, the
// cool-down table and the HTTP API (the key set).
type commandHandler struct {
	probes    *probe.Runner
	cooldowns *cooldown.Table
	keys      *httpapi.Server
}

// KeySet implements [report.Handler.KeySet].
func (h *commandHandler) KeySet(ks *switchboardv1.KeySet) { h.keys.SetKeySet(ks) }

// Probe implements [report.Handler.Probe].
func (h *commandHandler) Probe(cmd *switchboardv1.ProbeCommand) { h.probes.Start(cmd) }

// Cooldown implements [report.Handler.Cooldown].
func (h *commandHandler) Cooldown(cmd *switchboardv1.CooldownCommand) {
	h.cooldowns.Set(cmd.GetEndpointId(), cmd.GetUntil().AsTime())
}

// Version is the build version, set with -ldflags "-X …/services/edge/app.Version=…".
var Version = "dev"

// BuildVersion is the edge's version, for the Report hello, the User-Agent
// and --version: Version when the build set it (make build does), else the
// binary's module version, else "dev".
func BuildVersion() string {
	if Version != "dev" && Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
