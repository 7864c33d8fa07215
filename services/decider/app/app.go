// Package app is the decider's program: flags, start-up order, and shutdown.
// cmd/decider is a thin main around Run; tests start a decider with Start.
//
// By file: config.go is the configuration, its flags and validation;
// app.go the start-up order and shutdown; catalog.go applies what the
// catalog gate takes; activity.go hands activity to its sink
// (activity.Sink, which settles hedges through admission.Settler); the
// statistics' upkeep is stats.Store.Keep; accessors.go reads a running
// decider for operators and tests.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/debugserver"
	"github.com/switchboard-ai/switchboard/pkg/gotune"
	"github.com/switchboard-ai/switchboard/pkg/grpcserver"
	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/activity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/affinity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/experiment"
	"github.com/switchboard-ai/switchboard/services/decider/internal/gate"
	"github.com/switchboard-ai/switchboard/services/decider/internal/grant"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/metrics"
	"github.com/switchboard-ai/switchboard/services/decider/internal/observe"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/probe"
	"github.com/switchboard-ai/switchboard/services/decider/internal/report"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/server"
	"github.com/switchboard-ai/switchboard/services/decider/internal/session"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

// Version is the build version, set with -ldflags.
var Version = "dev"

// Decider is a running decider.
type Decider struct {
	cfg      Config
	logger   *slog.Logger
	lis      net.Listener
	srv      *grpcserver.Server
	svc      *server.Server
	hub      *report.Hub
	embedded *store.Embedded
	store    *store.Store
	router   *routing.Router
	authn    *auth.Authenticator
	stats    *stats.Store
	budget   *hedge.Budget
	act      *activity.Store
	sink     atomic.Pointer[activity.Sink] // read by Report streams that may start before it exists
	grants   *grant.Signer
	settler  *admission.Settler // settles hedges where the budget is held
	broker   *broker.Broker
	adm      *admission.Admission
	observer atomic.Pointer[observe.Observer]
	cool     *cooldown.Tracker
	exps     *experiment.Manager
	tlsSrv   *tlsfiles.Creds // the server's credentials, nil in plaintext
	tlsPeer  *tlsfiles.Creds // the client credentials to other replicas, nil in plaintext
	// healthSrv serves grpc.health.v1 alone on healthLis, nil without --health-listen.
	healthSrv *grpc.Server
	healthLis net.Listener
	// debug serves the profiles and the metrics, nil without --debug-listen.
	debug  *debugserver.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	// serveErr carries the gRPC server's failure, if it stops on its own.
	serveErr chan error
	// metrics is the meter provider: exported at the debug listener's
	// /metrics with --debug-listen, no-op without.
	metrics *telemetry.Metrics
	// admMetrics records the admission metrics, nil without --debug-listen.
	admMetrics *metrics.Admission
	// views is the catalog applied and its derived views; refused counts
	// the catalog changes the gate refused.
	views   atomic.Pointer[gate.Views]
	refused atomic.Int64
}

// Start starts a decider and returns once it serves: etcd reachable and the
// catalog loaded. Every field of cfg left zero takes DefaultConfig's value.
// On error everything started is stopped again.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (_ *Decider, err error) {
	cfg = cfg.withDefaults()
	d := &Decider{cfg: cfg, logger: logger}
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
	var creds, peerCreds credentials.TransportCredentials
	if cfg.TLSCertFile != "" {
		d.tlsSrv, err = tlsfiles.NewServer(tlsfiles.Server{
			CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, ClientCAFile: cfg.TLSClientCAFile, Refresh: cfg.TLSRefresh,
		})
		if err != nil {
			return nil, err
		}
		peerCA := cfg.TLSCAFile
		if peerCA == "" {
			peerCA = cfg.TLSClientCAFile
		}
		peerName := cfg.PeerServerName
		if peerName == "" {
			if peerName, err = firstDNSName(cfg.TLSCertFile); err != nil {
				return nil, err
			}
		}
		d.tlsPeer, err = tlsfiles.NewClient(tlsfiles.Client{
			CAFile: peerCA, CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, ServerName: peerName, Refresh: cfg.TLSRefresh,
		})
		if err != nil {
			return nil, err
		}
		creds, peerCreds = d.tlsSrv.TransportCredentials(), d.tlsPeer.TransportCredentials()
	}

	// Serve first so health checks get answers (NOT_SERVING) while etcd starts.
	d.lis, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d.cfg = cfg
	// Reports that arrive before the catalog is loaded are dropped: there is
	// nothing to attribute them to yet.
	d.hub = report.NewHub(logger.With("component", "report"), func(e *switchboardv1.EdgeHello, rs []*switchboardv1.CallReport) {
		if ob := d.observer.Load(); ob != nil {
			ob.Ingest(e, rs)
		}
	}, d.onActivity)
	d.budget = hedge.NewPaced(hedge.Options{DailyUSD: cfg.HedgeBudgetUSD, Burst: cfg.HedgeBudgetBurst, Now: cfg.Now})
	d.settler = admission.NewSettler(d.budget, logger.With("component", "hedge"))
	d.authn = auth.New()
	svc := server.New(d.hub, d.budget, d.authn)
	d.svc = svc
	d.hub.SetReservations(svc.Reservations())
	var dial []grpc.DialOption
	if cfg.TokenFile != "" {
		tok, err := bearer.NewFile(cfg.TokenFile, bearer.Options{})
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		dial = append(dial, grpc.WithPerRPCCredentials(tok))
	}
	d.srv = grpcserver.New(logger.With("component", "grpc"), grpcserver.Options{
		HotMethods: server.HotMethods,
		Unary:      []grpc.UnaryServerInterceptor{d.authn.UnaryInterceptor()},
		Stream:     []grpc.StreamServerInterceptor{d.authn.StreamInterceptor()},
		Creds:      creds,
		Reflection: cfg.GRPCReflection,
	})
	server.Register(d.srv.GRPC, svc)
	d.serveErr = make(chan error, 2)
	d.wg.Go(func() {
		if err := d.srv.GRPC.Serve(d.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			logger.Error("grpc serve", "err", err)
			d.serveErr <- err
		}
	})
	if cfg.HealthListen != "" {
		if err := d.serveHealth(cfg.HealthListen); err != nil {
			return nil, err
		}
	}
	if d.metrics, err = telemetry.NewMetrics("switchboard-decider", Version, cfg.DebugListen != ""); err != nil {
		return nil, err
	}
	if cfg.DebugListen != "" {
		d.debug, err = debugserver.Start(ctx, cfg.DebugListen, logger.With("component", "debug"),
			debugserver.Mount{Pattern: "/metrics", Handler: d.metrics.Handler()})
		if err != nil {
			return nil, err
		}
	}

	endpoints := cfg.Etcd
	if len(endpoints) == 0 {
		dir, _ := filepath.Abs(filepath.Join(cfg.DataDir, "etcd"))
		d.embedded, err = store.StartEmbedded(ctx, store.EmbeddedOptions{DataDir: dir, ClientAddr: cfg.EtcdListen,
			MaxRequestBytes: admission.WriteBytesFor(cfg.brokerStateBytes()) + etcdRequestSlack})
		if err != nil {
			return nil, err
		}
		endpoints = []string{d.embedded.Endpoint()}
		logger.Info("embedded etcd started", "endpoint", d.embedded.Endpoint(), "dir", dir)
	}
	etcdTLS, err := cfg.etcdTLS()
	if err != nil {
		return nil, err
	}
	d.store, err = store.ConnectTLSWith(ctx, endpoints, etcdTLS, logger.With("component", "store"),
		admission.WriteBytesFor(cfg.brokerStateBytes())+etcdRequestSlack)
	if err != nil {
		return nil, err
	}

	views, err := d.loadCatalog(ctx)
	if err != nil {
		return nil, err
	}
	c, rev := views.Catalog, views.Revision
	d.authn.SetCatalog(c)
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	g, err := grant.Load(ctx, d.store.Client())
	if err != nil {
		return nil, err
	}
	d.grants = g
	svc.SetGrants(g)
	expRev, err := d.loadExperiments(ctx)
	if err != nil {
		return nil, err
	}
	act, err := activity.Open(activity.Options{
		Path: filepath.Join(cfg.DataDir, "activity.db"), Retention: cfg.ActivityRetention,
		Logger: logger.With("component", "activity"), Now: cfg.Now,
		Stored: d.exps.Observe,
	})
	if err != nil {
		return nil, err
	}
	d.act = act
	svc.SetActivity(act)
	d.stats = stats.New(stats.Config{Now: cfg.Now})
	if n, err := d.stats.Load(ctx, d.store); err != nil {
		logger.Warn("routing statistics not restored", "err", err)
	} else {
		logger.Info("routing statistics restored", "models", n)
	}
	aff := affinity.New(affinity.Options{})
	sessions := session.New(session.Options{})
	d.cool = cooldown.New(cfg.cooldownOptions())
	hedgeFrom := cfg.HedgeFrom
	if cfg.HedgeBudgetUSD == 0 {
		hedgeFrom = -1 // no budget, no hedges: do not make edges ask
	}
	policy, _ := routing.ParsePolicy(cfg.RoutingPolicy) // validated with the flags
	oc := outcomes.New(outcomes.Config{HalfLife: cfg.RoutingCostHalfLife, LoadWindow: cfg.RoutingCostLoadWindow, Now: cfg.Now})
	d.router = routing.New(c, routing.Options{
		Stats: d.stats, Affinity: aff, Cooldown: d.cool,
		Policy: policy, Outcomes: oc, Cost: routing.CostOptions{Margin: cfg.RoutingCostMargin, Floor: cfg.RoutingCostFloor},
		Exploration: cfg.Exploration, Seed: cfg.Seed, Now: cfg.Now,
		HedgeFrom: hedgeFrom, HedgeImmediateFrom: cfg.HedgeImmediateFrom, HedgeDelay: cfg.HedgeDelay,
		FastEnough: cfg.FastEnough, Arm: d.exps.Arm,
		NoSticky: cfg.NoSticky, StickyTTL: cfg.StickyTTL, Sessions: sessions,
	})
	d.broker, err = broker.New(views.Broker, broker.Options{Now: cfg.Now, QueueReattach: cfg.QueueReattach, MaxStateBytes: cfg.brokerStateBytes()})
	if err != nil {
		return nil, fmt.Errorf("rate-limit broker: %w", err)
	}
	advertise := cfg.Advertise
	if advertise == "" {
		advertise = d.lis.Addr().String()
	}
	d.adm, err = admission.Start(ctx, admission.Options{
		Broker: d.broker, Budget: d.budget, Client: d.store.Client(), Addr: advertise, Logger: logger.With("component", "broker"), Now: cfg.Now,
		Creds:         peerCreds,
		LeaseTTL:      int((cfg.BrokerSessionTTL + time.Second - 1) / time.Second),
		Every:         cfg.BrokerSnapshotInterval,
		DialOptions:   dial,
		MaxWriteBytes: admission.WriteBytesFor(cfg.brokerStateBytes()),
	})
	if err != nil {
		return nil, err
	}
	// Edges replay to each new owner what the ones before applied lately.
	d.wg.Go(func() { d.hub.FollowOwnerTerm(bg, d.adm.OwnerTerm) })
	if d.metrics.Enabled() {
		d.admMetrics, err = metrics.New(metrics.Options{
			Provider: d.metrics.MeterProvider(), Buckets: d.broker, Queues: d.broker, Reservations: d.broker,
			KnownRoute: func(id string) bool { _, _, ok := d.router.Endpoint(id); return ok },
			Owner:      d.adm.Owner,
			Snapshots: func() metrics.Snapshots {
				s := d.adm.Snapshots()
				return metrics.Snapshots{Owner: s.Owner, Failures: s.Failures, Age: s.Age}
			},
			State: d.broker.StateBytes,
		})
		if err != nil {
			return nil, fmt.Errorf("admission metrics: %w", err)
		}
		svc.SetMetrics(d.admMetrics)
	}
	svc.SetAdmission(d.adm)
	d.settler.SetAdmission(d.adm)
	d.sink.Store(activity.NewSink(act, g, d.settler, logger.With("component", "activity")))
	d.observer.Store(observe.New(observe.Options{
		Catalog: d.router, Stats: d.stats, Affinity: aff, Sessions: sessions, Cooldown: d.cool, Outcomes: oc,
		Broadcast: d.hub.Broadcast, Logger: logger.With("component", "observe"), Now: cfg.Now,
	}))
	svc.SetRouter(d.router)
	svc.SetExperiments(d.exps)
	d.hub.SetKeySet(views.Keys)
	d.views.Store(views)
	d.wg.Go(func() { d.store.WatchCatalog(bg, rev, d.onCatalog) })
	d.wg.Go(func() {
		d.stats.Keep(bg, stats.KeepOptions{
			Saver: d.store, Every: cfg.StatsSnapshotInterval, Now: cfg.Now, Logger: logger.With("component", "stats"),
			Expire: []func(time.Time){d.cool.Expire, func(now time.Time) { d.broker.Expire(now) }},
		})
	})
	d.wg.Go(func() { d.settler.Run(bg) })
	d.wg.Go(func() { d.exps.Run(bg, expRev) })
	if cfg.ProbeInterval > 0 {
		p := probe.New(probe.Options{
			Interval: cfg.ProbeInterval, Sizes: cfg.ProbeSizes, Models: d.router.Models,
			Send: d.hub.SendOne, Logger: logger.With("component", "probe"),
		})
		d.wg.Go(func() { p.Run(bg) })
	}
	if err := d.store.Register(bg, cfg.ID, d.lis.Addr().String(), 10); err != nil {
		return nil, err
	}
	d.srv.SetServing(true, server.Services...)
	d.watchAdmission(bg)
	logger.Info("decider serving", "addr", d.lis.Addr().String(), "models", len(c.Models), "tenants", len(c.Tenants), "catalog_revision", rev)
	return d, nil
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

// Close reports NOT_SERVING, waits the drain delay, ends the Report streams,
// stops the server gracefully, and then etcd.
func (d *Decider) Close() {
	d.once.Do(func() {
		if d.srv != nil {
			d.srv.Health.Shutdown()
			if d.cfg.DrainDelay > 0 {
				time.Sleep(d.cfg.DrainDelay)
			}
			d.hub.Close()
			d.srv.Shutdown(0, max(d.cfg.ShutdownTimeout, time.Second))
			if d.healthSrv != nil {
				d.healthSrv.Stop() // after the main server: probes saw NOT_SERVING while it drained
			}
			if d.adm != nil {
				// After the server stopped admitting: the final snapshot of
				// the broker and the hedge budget is complete, so the next
				// owner needs no learning mode.
				d.adm.Close()
			}
		} else if d.lis != nil {
			_ = d.lis.Close()
		}
		if d.adm != nil {
			d.adm.Close() // no-op when already closed above
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
// main server's health service, so both report the same status.
func (d *Decider) serveHealth(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--health-listen %s: %w", addr, err)
	}
	d.healthLis = lis
	d.healthSrv = grpc.NewServer()
	healthpb.RegisterHealthServer(d.healthSrv, d.srv.Health)
	d.wg.Go(func() {
		if err := d.healthSrv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			d.logger.Error("grpc health serve", "err", err)
			d.serveErr <- err
		}
	})
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
