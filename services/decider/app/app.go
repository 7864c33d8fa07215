// Package app is the decider's program: flags, start-up order, and shutdown.
// cmd/decider is a thin main around Run; tests start a decider with Start.
//
// By file: config.go is the configuration, its flags and validation;
// app.go the start-up order and shutdown: build.go builds every component,
// each with what it needs, before app.go registers and serves the services;
// listener.go the listener a start-up server answers health checks on
// until the real server takes it over; catalog.go applies what the catalog
// gate takes; the edges' activity goes to activity.Sink, which settles
// hedges through admission.Settler; the statistics' upkeep is
// stats.Store.Keep; accessors.go reads a running decider for operators and
// tests.
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
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/debugserver"
	"github.com/switchboard-ai/switchboard/pkg/gotune"
	"github.com/switchboard-ai/switchboard/pkg/grpcserver"
	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	"github.com/switchboard-ai/switchboard/services/decider/internal/activity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/experiment"
	"github.com/switchboard-ai/switchboard/services/decider/internal/gate"
	"github.com/switchboard-ai/switchboard/services/decider/internal/grant"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/metrics"
	"github.com/switchboard-ai/switchboard/services/decider/internal/observe"
	"github.com/switchboard-ai/switchboard/services/decider/internal/replicas"
	"github.com/switchboard-ai/switchboard/services/decider/internal/report"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/server"
	"github.com/switchboard-ai/switchboard/services/decider/internal/share"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
	"github.com/switchboard-ai/switchboard/services/decider/internal/transfer"
)

// Version is the build version, set with -ldflags.
var Version = "dev"

// Decider is a running decider.
type Decider struct {
	cfg      Config
	logger   *slog.Logger
	lis      net.Listener
	handoff  *handoff
	health   *health.Server // the one health service every server of this decider answers from
	starting *grpc.Server   // serves the listener while the decider starts (serveStarting)
	srv      *grpcserver.Server
	svc      *server.Server
	hub      *report.Hub
	embedded *store.Embedded
	store    *store.Store
	// gate prepares every catalog; catalog is the one applied, its views
	// swapped whole (gate.Current) and read by router, authn and hub.
	gate     *gate.Gate
	catalog  *gate.Current
	router   *routing.Router
	authn    *auth.Authenticator
	stats    *stats.Store
	budget   *hedge.Budget
	act      *activity.Store
	sink     *activity.Sink
	grants   *grant.Signer
	settler  *admission.Settler // settles hedges where the budget is held
	broker   *broker.Broker
	adm      *admission.Admission
	observer *observe.Observer
	// sharer sends the other replicas what this one's edges report.
	sharer *share.Sharer
	// peers are the other replicas as etcd says.
	peers *replicas.Set
	// learned are the tables of what this replica learned from the
	// reports besides the statistics: handed to a replica that starts
	// (transfer.Serve), taken from a live one at start (takeState).
	learned transfer.Tables
	// transferred is what the state transfer at start took, and whether
	// it failed (transfer.go).
	transferred stateTransfer
	// advertise is the address other replicas reach this one at.
	advertise string
	cool      *cooldown.Tracker
	exps      *experiment.Manager
	tlsSrv    *tlsfiles.Creds // the server's credentials, nil in plaintext
	tlsPeer   *tlsfiles.Creds // the client credentials to other replicas, nil in plaintext
	// healthSrv serves grpc.health.v1 alone on healthLis, nil without --health-listen.
	healthSrv *grpc.Server
	healthLis net.Listener
	// debug is the admin listener (metrics, health, the dashboard, with
	// --pprof the profiles), nil without --admin-listen.
	debug *debugserver.Server
	// dash is the dashboard the admin listener serves once built.
	dash   atomic.Pointer[http.Handler]
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	// serveErr carries the failure of a gRPC server that stopped on its own.
	serveErr chan error
	// metrics is the meter provider: exported at the admin listener's
	// /metrics with --admin-listen, no-op without.
	metrics *telemetry.Metrics
	// admMetrics records the admission metrics, nil without --admin-listen.
	admMetrics *metrics.Admission
	// refused counts the catalog changes the gate refused.
	refused atomic.Int64
}

// Start starts a decider and returns once it serves: etcd reachable and the
// catalog loaded. Every field of cfg left zero takes DefaultConfig's value.
// On error everything started is stopped again.
//
// The order is the composition: the listener first, served by a start-up
// server that answers health checks with NOT_SERVING (and anything else
// with UNAVAILABLE) from the decider's one health service; then every
// component, each given what it needs when it is built (build); only then
// the real gRPC server, its services registered, which the listener is
// handed to (serve).
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (_ *Decider, err error) {
	cfg = cfg.withDefaults()
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &Decider{cfg: cfg, logger: logger, serveErr: make(chan error, 1)}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	defer func() {
		if err != nil {
			d.Close()
		}
	}()

	if err := cfg.checkPlaintext(); err != nil {
		return nil, err
	}
	creds, peerCreds, err := d.loadTLS()
	if err != nil {
		return nil, err
	}
	d.lis, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	d.handoff = newHandoff(d.lis)
	d.health = health.NewServer()
	d.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	d.serveStarting(creds)
	if cfg.HealthListen != "" {
		if err := d.serveHealth(cfg.HealthListen); err != nil {
			return nil, err
		}
	}
	admin, err := cfg.Admin()
	if err != nil {
		return nil, err
	}
	if d.metrics, err = telemetry.NewMetrics("switchboard-decider", Version, admin.Addr != ""); err != nil {
		return nil, err
	}
	if admin.Addr != "" {
		// The listener answers health from the start; the dashboard once
		// every component it reads is built.
		d.debug, err = debugserver.Start(ctx, admin, logger.With("component", "admin"), d.adminMounts()...)
		if err != nil {
			return nil, err
		}
	}
	if err := d.build(ctx, bg, peerCreds); err != nil {
		return nil, err
	}
	if admin.Addr != "" {
		d.startDashboard(bg)
	}
	d.serve(creds)
	if err := d.store.Register(bg, cfg.ID, store.Member{Addr: d.advertise, Region: cfg.Region}, 10); err != nil {
		return nil, err
	}
	// Registered first, so the peers share their reports with this replica
	// from about now on; the transfer then brings what they learned before.
	d.takeState(bg)
	d.srv.SetServing(true, server.Services...)
	d.watchAdmission(bg)
	v := d.catalog.Load()
	logger.Info("decider serving", "addr", d.lis.Addr().String(), "region", d.cfg.Region, "models", len(v.Catalog.Models), "tenants", len(v.Catalog.Tenants), "catalog_revision", v.Revision)
	return d, nil
}

// loadTLS reads the server's credentials and the client credentials to
// other replicas; both nil in plaintext.
func (d *Decider) loadTLS() (creds, peerCreds credentials.TransportCredentials, err error) {
	cfg := d.cfg
	if cfg.TLSCertFile == "" {
		return nil, nil, nil
	}
	d.tlsSrv, err = tlsfiles.NewServer(tlsfiles.Server{
		CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, ClientCAFile: cfg.TLSClientCAFile, Refresh: cfg.TLSRefresh,
	})
	if err != nil {
		return nil, nil, err
	}
	peerCA := cfg.TLSCAFile
	if peerCA == "" {
		peerCA = cfg.TLSClientCAFile
	}
	peerName := cfg.PeerServerName
	if peerName == "" {
		if peerName, err = firstDNSName(cfg.TLSCertFile); err != nil {
			return nil, nil, err
		}
	}
	d.tlsPeer, err = tlsfiles.NewClient(tlsfiles.Client{
		CAFile: peerCA, CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, ServerName: peerName, Refresh: cfg.TLSRefresh,
	})
	if err != nil {
		return nil, nil, err
	}
	return d.tlsSrv.TransportCredentials(), d.tlsPeer.TransportCredentials(), nil
}

// serveStarting serves the listener while the decider starts: the
// decider's health service, NOT_SERVING, and UNAVAILABLE for every other
// call (a replica forwarding to this one, an edge already dialling), which
// callers retry, as they would a replica that is down.
func (d *Decider) serveStarting(creds credentials.TransportCredentials) {
	opts := []grpc.ServerOption{grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return status.Error(codes.Unavailable, "decider is starting")
	})}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	d.starting = grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(d.starting, d.health)
	d.goServe("grpc start-up", d.starting, d.handoff.Serve())
}

// serve builds the real gRPC server on the decider's health service,
// registers the decider's services, stops the start-up server and hands
// it the listener.
func (d *Decider) serve(creds credentials.TransportCredentials) {
	d.srv = grpcserver.New(d.logger.With("component", "grpc"), grpcserver.Options{
		HotMethods: server.HotMethods,
		Unary:      []grpc.UnaryServerInterceptor{d.authn.UnaryInterceptor()},
		Stream:     []grpc.StreamServerInterceptor{d.authn.StreamInterceptor()},
		Creds:      creds,
		Reflection: d.cfg.GRPCReflection,
		Health:     d.health,
		// The calls' count and duration by method, with a debug listener.
		Metrics: d.metrics,
		Tracing: d.cfg.Tracing,
	})
	d.register(d.srv.GRPC)
	d.starting.Stop()
	d.goServe("grpc", d.srv.GRPC, d.handoff.Serve())
}

// register registers the decider's services on gs.
func (d *Decider) register(gs *grpc.Server) {
	server.Register(gs, d.svc)
}

// goServe serves lis with gs until gs stops; a server that stops on its
// own (its listener broke) is logged and reported to wait.
func (d *Decider) goServe(name string, gs *grpc.Server, lis net.Listener) {
	d.wg.Go(func() {
		if err := gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			d.logger.Error(name+" serve", "err", err)
			select {
			case d.serveErr <- err:
			default: // one failure is enough to stop
			}
		}
	})
}

// Kill stops the decider the way a crash would, as far as the broker is
// concerned: no final snapshot and no clean-stop marker, so the next owner
// restores the last periodic snapshot and admits conservatively. For failover
// tests and drills; everything else shuts down as in Close.
func (d *Decider) Kill() {
	if d.adm != nil {
		d.adm.Abandon()
	}
	d.Close()
}

// Close reports NOT_SERVING and hands the broker over when this replica
// owns it (Admission.Handover: a request queued here is admitted by the next
// owner), then waits the drain delay, ends the Report streams, stops the
// server gracefully — calls still under way are forwarded to the new owner —
// and then etcd.
func (d *Decider) Close() {
	d.once.Do(func() {
		if d.health != nil {
			d.health.Shutdown()
		}
		if d.adm != nil {
			// Before the drain: the server is stopping, and another
			// replica takes over at once with the final snapshot, so the
			// next owner needs no learning mode.
			d.adm.Handover()
		}
		if d.srv != nil {
			if d.cfg.DrainDelay > 0 {
				time.Sleep(d.cfg.DrainDelay)
			}
			d.hub.Close()
			d.srv.Shutdown(0, max(d.cfg.ShutdownTimeout, time.Second))
		}
		if d.starting != nil {
			d.starting.Stop() // a no-op once the real server took over
		}
		if d.handoff != nil {
			_ = d.handoff.Close()
		} else if d.lis != nil {
			_ = d.lis.Close()
		}
		if d.healthSrv != nil {
			d.healthSrv.Stop() // after the main server: probes saw NOT_SERVING while it drained
		}
		if d.adm != nil {
			d.adm.Close()
		}
		d.cancel()
		d.wg.Wait()
		if d.act != nil {
			_ = d.act.Close()
		}
		if d.store != nil {
			_ = d.store.Close()
		}
		if d.embedded != nil {
			d.embedded.Close()
		}
		d.tlsSrv.Close()
		d.tlsPeer.Close()
		d.debug.Close()
		_ = d.admMetrics.Close()
		_ = d.metrics.Shutdown(context.Background())
	})
}

// serveHealth serves grpc.health.v1, alone and in plaintext, on addr: the
// decider's one health service, so it reports what the main listener does.
func (d *Decider) serveHealth(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--health-listen %s: %w", addr, err)
	}
	d.healthLis = lis
	d.healthSrv = grpc.NewServer()
	healthpb.RegisterHealthServer(d.healthSrv, d.health)
	d.goServe("grpc health", d.healthSrv, lis)
	return nil
}

// Run is the decider's main: it parses args, serves until ctx ends, and shuts down.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := ParseFlags(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl})).With("service", "decider")
	if s := gotune.Apply(os.Getenv); s != (gotune.Settings{}) {
		logger.Info("garbage collector", "gc_percent", s.GCPercent, "memory_limit_bytes", s.MemoryLimit)
	}
	shutdown, err := telemetry.Setup(ctx, "switchboard-decider", Version)
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()
	d, err := Start(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return d.wait(ctx)
}

// wait serves until ctx ends, then shuts down cleanly; or until the gRPC
// server fails on its own (its listener broke), then hands over, stops and
// returns why, so the process exits non-zero and is restarted.
func (d *Decider) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		d.logger.Info("shutting down", "drain", d.cfg.DrainDelay)
		d.Close()
		return nil
	case err := <-d.serveErr:
		d.Close()
		return fmt.Errorf("decider: grpc server: %w", err)
	}
}
