package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/activity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/affinity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/gate"
	"github.com/switchboard-ai/switchboard/services/decider/internal/grant"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/metrics"
	"github.com/switchboard-ai/switchboard/services/decider/internal/observe"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/probe"
	"github.com/switchboard-ai/switchboard/services/decider/internal/replicas"
	"github.com/switchboard-ai/switchboard/services/decider/internal/report"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/server"
	"github.com/switchboard-ai/switchboard/services/decider/internal/session"
	"github.com/switchboard-ai/switchboard/services/decider/internal/share"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
	"github.com/switchboard-ai/switchboard/services/decider/internal/transfer"
)

// build builds every component, in the order they need each other, and
// starts their background work on bg. Nothing is served from them yet.
func (d *Decider) build(ctx, bg context.Context, peerCreds credentials.TransportCredentials) error {
	if err := d.connectStore(ctx); err != nil {
		return err
	}
	views, oc, err := d.loadViews(ctx)
	if err != nil {
		return err
	}
	expRev, peers, err := d.openLogs(ctx)
	if err != nil {
		return err
	}
	aff := affinity.New(affinity.Options{})
	// Each conversation's turn decided here is told to the other replicas
	// (d.sharer is set before anything is served).
	sessions := session.New(session.Options{Kept: func(tu session.Turn) { d.sharer.PublishTurn(tu) }})
	d.buildRouter(oc, aff, sessions)
	if err := d.startAdmission(ctx, views, peerCreds); err != nil {
		return err
	}
	svcMetrics, err := d.buildMetrics()
	if err != nil {
		return err
	}
	if err := d.buildServer(svcMetrics, oc, aff, sessions, peers); err != nil {
		return err
	}
	d.runBackground(bg, views.Revision, expRev, peers)
	return nil
}

// connectStore connects to etcd: the embedded one, started here, when no
// --etcd is given.
func (d *Decider) connectStore(ctx context.Context) error {
	cfg, logger := d.cfg, d.logger
	var err error
	endpoints := cfg.Etcd
	if len(endpoints) == 0 {
		dir, _ := filepath.Abs(filepath.Join(cfg.DataDir, "etcd"))
		d.embedded, err = store.StartEmbedded(ctx, store.EmbeddedOptions{DataDir: dir, ClientAddr: cfg.EtcdListen,
			MaxRequestBytes: admission.WriteBytesFor(cfg.brokerStateBytes()) + etcdRequestSlack})
		if err != nil {
			return err
		}
		endpoints = []string{d.embedded.Endpoint()}
		logger.Info("embedded etcd started", "endpoint", d.embedded.Endpoint(), "dir", dir)
	}
	etcdTLS, err := cfg.etcdTLS()
	if err != nil {
		return err
	}
	d.store, err = store.ConnectTLSWith(ctx, endpoints, etcdTLS, logger.With("component", "store"),
		admission.WriteBytesFor(cfg.brokerStateBytes())+etcdRequestSlack)
	return err
}

// loadViews restores the routing statistics, which every catalog's routing
// index is bound to, then passes the catalog through the gate and
// publishes its views.
func (d *Decider) loadViews(ctx context.Context) (*gate.Views, *outcomes.Tracker, error) {
	cfg, logger := d.cfg, d.logger
	d.stats = stats.New(stats.Config{Now: cfg.Now})
	if n, err := d.stats.Load(ctx, d.store); err != nil {
		logger.Warn("routing statistics not restored", "err", err)
	} else {
		logger.Info("routing statistics restored", "models", n)
	}
	oc := outcomes.New(outcomes.Config{HalfLife: cfg.RoutingCostHalfLife, LoadWindow: cfg.RoutingCostLoadWindow, Now: cfg.Now})
	d.gate = gate.New(routing.Sources{Stats: d.stats, Outcomes: oc, Stamps: routing.NewStamps(cfg.Now)})
	views, err := d.loadCatalog(ctx)
	if err != nil {
		return nil, nil, err
	}
	d.catalog = gate.NewCurrent(views)
	d.authn = auth.New(d.catalog.PinAuth)
	return views, oc, nil
}

// openLogs loads the grants and experiments and opens this replica's
// activity log, registered for the other replicas to read, and the set of
// replicas whose logs it reads.
func (d *Decider) openLogs(ctx context.Context) (int64, *replicas.Set, error) {
	cfg, logger := d.cfg, d.logger
	var err error
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return 0, nil, fmt.Errorf("data dir: %w", err)
	}
	if d.grants, err = grant.Load(ctx, d.store.Client()); err != nil {
		return 0, nil, err
	}
	expRev, err := d.loadExperiments(ctx)
	if err != nil {
		return 0, nil, err
	}
	d.act, err = activity.Open(activity.Options{
		Path: filepath.Join(cfg.DataDir, "activity.db"), Retention: cfg.ActivityRetention,
		Logger: logger.With("component", "activity"), Now: cfg.Now,
		Stored: d.exps.Observe,
	})
	if err != nil {
		return 0, nil, err
	}
	// Every replica's log is read by every replica: its key says this one
	// holds one, for as long as the log lives.
	if err := d.store.RegisterLog(ctx, cfg.ID); err != nil {
		return 0, nil, err
	}
	d.peers, err = replicas.New(ctx, replicas.Options{Client: d.store.Client(), Self: cfg.ID, Region: cfg.Region, Logger: logger.With("component", "replicas")})
	if err != nil {
		return 0, nil, err
	}
	return expRev, d.peers, nil
}

// buildRouter builds the cool-downs and the router.
func (d *Decider) buildRouter(oc *outcomes.Tracker, aff *affinity.Table, sessions *session.Table) {
	cfg := d.cfg
	d.cool = cooldown.New(cfg.cooldownOptions())
	hedgeFrom := cfg.HedgeFrom
	if cfg.HedgeBudgetUSD == 0 {
		hedgeFrom = -1 // no budget, no hedges: do not make edges ask
	}
	policy, _ := routing.ParsePolicy(cfg.RoutingPolicy) // validated with the flags
	d.router = routing.New(nil, routing.Options{
		Catalog: d.catalog.Routing,
		Stats:   d.stats, Affinity: aff, Cooldown: d.cool,
		Policy: policy, Outcomes: oc, Cost: routing.CostOptions{Margin: cfg.RoutingCostMargin, Floor: cfg.RoutingCostFloor},
		Exploration: cfg.Exploration, Seed: cfg.Seed, Now: cfg.Now,
		HedgeFrom: hedgeFrom, HedgeImmediateFrom: cfg.HedgeImmediateFrom, HedgeDelay: cfg.HedgeDelay,
		FastEnough: cfg.FastEnough, Arm: d.exps.Arm,
		NoSticky: cfg.NoSticky, StickyTTL: cfg.StickyTTL, Sessions: sessions,
	})
}

// startAdmission builds the rate-limit broker of the catalog's views and
// the hedge budget, and starts admission: the broker's ownership and the
// forwarding to its owner.
func (d *Decider) startAdmission(ctx context.Context, views *gate.Views, peerCreds credentials.TransportCredentials) error {
	cfg, logger := d.cfg, d.logger
	var err error
	d.broker, err = broker.New(views.Broker, broker.Options{Now: cfg.Now, QueueReattach: cfg.QueueReattach, MaxStateBytes: cfg.brokerStateBytes(),
		LeaseTerm: cfg.BrokerLeaseTerm, MaxLeaseTerm: cfg.BrokerMaxLeaseTerm})
	if err != nil {
		return fmt.Errorf("rate-limit broker: %w", err)
	}
	d.budget = hedge.NewPaced(hedge.Options{DailyUSD: cfg.HedgeBudgetUSD, Burst: cfg.HedgeBudgetBurst, Now: cfg.Now})
	var dial []grpc.DialOption
	if cfg.TokenFile != "" {
		tok, err := bearer.NewFile(cfg.TokenFile, bearer.Options{})
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		dial = append(dial, grpc.WithPerRPCCredentials(tok))
	}
	d.advertise = cfg.Advertise
	if d.advertise == "" {
		d.advertise = d.lis.Addr().String()
	}
	d.adm, err = admission.Start(ctx, admission.Options{
		Broker: d.broker, Budget: d.budget, Client: d.store.Client(), Addr: d.advertise, Logger: logger.With("component", "broker"), Now: cfg.Now,
		Creds:         peerCreds,
		LeaseTTL:      int((cfg.BrokerSessionTTL + time.Second - 1) / time.Second),
		Every:         cfg.BrokerSnapshotInterval,
		DialOptions:   dial,
		MaxWriteBytes: admission.WriteBytesFor(cfg.brokerStateBytes()),
		Leases:        cfg.BrokerLeases,
	})
	return err
}

// buildMetrics builds the admission and decider metrics, when metrics are
// on; the decider's are nil otherwise.
func (d *Decider) buildMetrics() (*metrics.Service, error) {
	var err error
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
	}
	if !d.metrics.Enabled() {
		return nil, nil
	}
	svcMetrics, err := metrics.NewService(metrics.ServiceOptions{
		Provider: d.metrics.MeterProvider(), Owner: d.adm.Owner, OwnerChanges: d.adm.OwnerChanges,
		Hedges: d.budget.Status, Settled: d.budget.Settled, Admissions: d.adm.Admissions,
		Transfers: func() (int64, int64) {
			_, ok, failed := d.StateTransferred()
			if ok {
				return 1, failed
			}
			return 0, failed
		},
	})
	if err != nil {
		return nil, fmt.Errorf("decider metrics: %w", err)
	}
	return svcMetrics, nil
}

// buildServer builds what serves: the admission policy, the hedge settler,
// the activity sink, the report hub and observer, and the gRPC services.
func (d *Decider) buildServer(svcMetrics *metrics.Service, oc *outcomes.Tracker, aff *affinity.Table, sessions *session.Table, peers *replicas.Set) error {
	cfg, logger := d.cfg, d.logger
	admit := admission.Policy{Admission: d.adm, Budget: d.budget, Contracts: d.authn, Metrics: d.admMetrics}
	d.settler = admission.NewSettler(d.budget, d.adm, logger.With("component", "hedge"))
	d.sink = activity.NewSink(d.act, d.grants, d.settler, logger.With("component", "activity"))

	// The hub hands call reports to the observer, which tells edges of
	// cool-downs through the hub: ob is set before anything is served, so
	// before any Report stream can bring a report. The other replicas get
	// them too (share), and learn from them as from their own edges'.
	var ob *observe.Observer
	d.sharer = share.New(share.Options{Self: cfg.ID, Conn: d.adm.PeerConn, Logger: logger.With("component", "share")})
	if d.metrics.Enabled() {
		if err := d.sharer.Instrument(d.metrics.MeterProvider()); err != nil {
			return fmt.Errorf("sharing metrics: %w", err)
		}
	}
	d.hub = report.NewHub(report.Options{
		Logger: logger.With("component", "report"),
		Sink: func(e *switchboardv1.EdgeHello, rs []*switchboardv1.CallReport) {
			ob.Ingest(e, rs)
			d.sharer.Publish(e, rs)
		},
		Activity:     d.sink.Add,
		Keys:         d.catalog.Keys,
		Reservations: server.Reservations(admit),
		Tracer:       d.cfg.Tracing.Tracer(report.ScopeName),
		Lag:          svcMetrics.ReportLag,
	})
	ob = observe.New(observe.Options{
		Catalog: func() observe.Catalog { return d.catalog.Routing() }, Stats: d.stats, Affinity: aff, Sessions: sessions, Cooldown: d.cool, Outcomes: oc,
		Broadcast: d.hub.Broadcast, Logger: logger.With("component", "observe"), Now: cfg.Now,
	})
	d.observer = ob
	d.learned = transfer.Tables{Affinity: aff, Sessions: sessions, Cooldowns: d.cool, Outcomes: oc, Now: cfg.Now}
	d.svc = server.New(server.Deps{
		Router: d.router, Catalog: d.catalog, Auth: d.authn, Hub: d.hub, Policy: admit, Activity: d.act, Experiments: d.exps, Grants: d.grants,
		Peers: server.Peers{Logs: peers.Logs, Live: peers.Live, Conn: d.adm.PeerConn, Learn: ob.IngestShared, LearnTurn: sessions.KeepShared,
			State: func(ctx context.Context, send func(*switchboardv1.TransferStateResponse) error) error {
				return transfer.Serve(ctx, d.learned, send)
			},
			Logger: logger.With("component", "activity")},
	})
	return nil
}

// runBackground starts the decider's background work, each on d.wg until
// bg ends.
func (d *Decider) runBackground(bg context.Context, catalogRev, expRev int64, peers *replicas.Set) {
	cfg, logger := d.cfg, d.logger
	// Edges replay to each new owner what the ones before applied lately.
	d.wg.Go(func() { d.hub.FollowOwnerTerm(bg, d.adm.OwnerTerm) })
	d.wg.Go(func() { d.store.WatchCatalog(bg, catalogRev, d.onCatalog) })
	d.wg.Go(func() {
		d.stats.Keep(bg, stats.KeepOptions{
			Saver: d.store, Every: cfg.StatsSnapshotInterval, Now: cfg.Now, Logger: logger.With("component", "stats"),
			Expire: []func(time.Time){d.cool.Expire, func(now time.Time) { d.broker.Expire(now) }},
		})
	})
	d.wg.Go(func() { d.settler.Run(bg) })
	d.wg.Go(func() { peers.Run(bg) })
	d.wg.Go(func() { d.sharer.Run(bg, peers.Live) })
	d.wg.Go(func() { d.exps.Run(bg, expRev) })
	if cfg.ProbeInterval > 0 {
		p := probe.New(probe.Options{
			Interval: cfg.ProbeInterval, Sizes: cfg.ProbeSizes,
			// Every replica learns every probe's result (share): each
			// probes its share of the models, not all of them; the
			// replicas of each region share every model among them, and
			// send the probes to their region's edges, so each region's
			// first-token figures have probes of their own.
			Models: func() []routing.ModelEndpoints {
				return slices.DeleteFunc(d.router.Models(), func(m routing.ModelEndpoints) bool { return !peers.Owns(m.Model) })
			},
			Send: func(m *switchboardv1.ReportResponse) bool { return d.hub.SendOne(cfg.Region, m) }, Logger: logger.With("component", "probe"),
		})
		d.wg.Go(func() { p.Run(bg) })
	}
}
