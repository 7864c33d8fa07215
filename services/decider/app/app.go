// Package app is the decider's program: flags, start-up order, and shutdown.
// cmd/decider is a thin main around Run; tests start a decider with Start.
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
	"strings"
	"sync"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/flagenv"
	"github.com/switchboard-ai/switchboard/pkg/grpcserver"
	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	pb "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/report"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/server"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

// Version is the build version, set with -ldflags.
var Version = "dev"

// Config is the decider's configuration.
type Config struct {
	// Listen is the gRPC address. (Optional) Defaults to 127.0.0.1:9090.
	Listen string
	// Catalog is a YAML catalog file, validated and stored in etcd at start.
	// (Optional) Without it the catalog already stored in etcd is used.
	Catalog string
	// Etcd lists etcd client endpoints. (Optional) Empty starts an embedded
	// etcd under DataDir.
	Etcd []string
	// DataDir is where the embedded etcd keeps its data. (Optional) Defaults to ./switchboard-data.
	DataDir string
	// EtcdListen is the embedded etcd's client address. (Optional) Defaults to
	// 127.0.0.1:2379; "127.0.0.1:0" picks a free port.
	EtcdListen string
	// ID names this replica in the membership list. (Optional) Defaults to the host name.
	ID string
	// DrainDelay is how long health reports NOT_SERVING before the server
	// stops, so load balancers move away first. (Optional) Defaults to 2s.
	DrainDelay time.Duration
	// ShutdownTimeout bounds the graceful stop. (Optional) Defaults to 10s.
	ShutdownTimeout time.Duration
	// LogLevel is debug, info, warn or error. (Optional) Defaults to info.
	LogLevel string
}

// ParseFlags parses args, with SWITCHBOARD_DECIDER_* environment fallbacks,
// and reports every invalid setting at once.
func ParseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	host, _ := os.Hostname()
	var cfg Config
	var etcd string
	fs := flag.NewFlagSet("decider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:9090", "gRPC listen address")
	fs.StringVar(&cfg.Catalog, "catalog", "", "YAML catalog file; validated and stored in etcd (empty: use the stored catalog)")
	fs.StringVar(&etcd, "etcd", "", "comma-separated etcd endpoints (empty: embedded etcd under --data-dir)")
	fs.StringVar(&cfg.DataDir, "data-dir", "switchboard-data", "data directory of the embedded etcd")
	fs.StringVar(&cfg.EtcdListen, "etcd-listen", "127.0.0.1:2379", "client address of the embedded etcd")
	fs.StringVar(&cfg.ID, "id", host, "replica id in the membership list")
	fs.DurationVar(&cfg.DrainDelay, "drain-delay", 2*time.Second, "time NOT_SERVING before stopping on SIGTERM")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "graceful stop bound")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "debug, info, warn or error")
	if err := flagenv.Parse(fs, "SWITCHBOARD_DECIDER", args, getenv); err != nil {
		return cfg, err
	}
	for _, e := range strings.Split(etcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.Etcd = append(cfg.Etcd, e)
		}
	}
	return cfg, cfg.validate()
}

func (c *Config) validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: %w", c.Listen, err))
	}
	if len(c.Etcd) == 0 {
		if c.DataDir == "" {
			errs = append(errs, errors.New("--data-dir is required with the embedded etcd"))
		}
		if _, _, err := net.SplitHostPort(c.EtcdListen); err != nil {
			errs = append(errs, fmt.Errorf("--etcd-listen %q: %w", c.EtcdListen, err))
		}
	}
	if c.DrainDelay < 0 || c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("--drain-delay must be >= 0 and --shutdown-timeout > 0"))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: %w", c.LogLevel, err))
	}
	if c.ID == "" {
		c.ID = "decider"
	}
	return errors.Join(errs...)
}

// Decider is a running decider.
type Decider struct {
	cfg      Config
	logger   *slog.Logger
	lis      net.Listener
	srv      *grpcserver.Server
	hub      *report.Hub
	embedded *store.Embedded
	store    *store.Store
	router   *routing.Router
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	once     sync.Once
}

// Start starts a decider and returns once it serves: etcd reachable and the
// catalog loaded. On error everything started is stopped again.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (_ *Decider, err error) {
	d := &Decider{cfg: cfg, logger: logger}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	defer func() {
		if err != nil {
			d.Close()
		}
	}()

	// Serve first so health checks get answers (NOT_SERVING) while etcd starts.
	d.lis, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	d.hub = report.NewHub(logger.With("component", "report"), nil)
	svc := server.New(d.hub)
	d.srv = grpcserver.New(logger.With("component", "grpc"), grpcserver.Options{})
	pb.RegisterDeciderServiceServer(d.srv.GRPC, svc)
	d.wg.Go(func() {
		if err := d.srv.GRPC.Serve(d.lis); err != nil {
			logger.Error("grpc serve", "err", err)
		}
	})

	endpoints := cfg.Etcd
	if len(endpoints) == 0 {
		dir, _ := filepath.Abs(filepath.Join(cfg.DataDir, "etcd"))
		d.embedded, err = store.StartEmbedded(ctx, store.EmbeddedOptions{DataDir: dir, ClientAddr: cfg.EtcdListen})
		if err != nil {
			return nil, err
		}
		endpoints = []string{d.embedded.Endpoint()}
		logger.Info("embedded etcd started", "endpoint", d.embedded.Endpoint(), "dir", dir)
	}
	d.store, err = store.Connect(ctx, endpoints, logger.With("component", "store"))
	if err != nil {
		return nil, err
	}

	data, rev, err := d.loadCatalog(ctx)
	if err != nil {
		return nil, err
	}
	c, err := catalog.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("stored catalog: %w", err)
	}
	d.router = routing.New(c)
	svc.SetRouter(d.router)
	d.wg.Go(func() { d.store.WatchCatalog(bg, rev, d.onCatalog) })
	if err := d.store.Register(bg, cfg.ID, d.lis.Addr().String(), 10); err != nil {
		return nil, err
	}
	d.srv.SetServing(true, pb.DeciderService_ServiceDesc.ServiceName)
	logger.Info("decider serving", "addr", d.lis.Addr().String(), "models", len(c.Models), "tenants", len(c.Tenants), "catalog_revision", rev)
	return d, nil
}

// loadCatalog validates the --catalog file and stores it, or reads the stored one.
func (d *Decider) loadCatalog(ctx context.Context) ([]byte, int64, error) {
	if d.cfg.Catalog == "" {
		return d.store.GetCatalog(ctx)
	}
	data, err := os.ReadFile(d.cfg.Catalog)
	if err != nil {
		return nil, 0, fmt.Errorf("read catalog: %w", err)
	}
	if _, err := catalog.Parse(data); err != nil {
		return nil, 0, fmt.Errorf("catalog %s: %w", d.cfg.Catalog, err)
	}
	rev, err := d.store.PutCatalog(ctx, data)
	return data, rev, err
}

// onCatalog applies a catalog another replica or an operator stored; an
// invalid one is refused and the current one kept.
func (d *Decider) onCatalog(data []byte, rev int64) {
	c, err := catalog.Parse(data)
	if err != nil {
		d.logger.Error("stored catalog is invalid; keeping the current one", "revision", rev, "err", err)
		return
	}
	d.router.SetCatalog(c)
	d.hub.Broadcast(&pb.ReportResponse{Command: &pb.ReportResponse_Config{Config: &pb.ConfigCommand{CatalogRevision: rev}}})
	d.logger.Info("catalog updated", "revision", rev, "models", len(c.Models))
}

// Addr returns the gRPC address.
func (d *Decider) Addr() string { return d.lis.Addr().String() }

// EtcdEndpoint returns the embedded etcd's client address, "" with an external etcd.
func (d *Decider) EtcdEndpoint() string {
	if d.embedded == nil {
		return ""
	}
	return d.embedded.Endpoint()
}

// ReportsReceived returns how many call reports edges have sent.
func (d *Decider) ReportsReceived() int64 { return d.hub.Received() }

// Edges returns the connected edges.
func (d *Decider) Edges() []*pb.EdgeHello { return d.hub.Edges() }

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
		} else if d.lis != nil {
			_ = d.lis.Close()
		}
		d.cancel()
		d.wg.Wait()
		if d.store != nil {
			_ = d.store.Close()
		}
		if d.embedded != nil {
			d.embedded.Close()
		}
	})
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
	shutdown, err := telemetry.Setup(ctx, "switchboard-decider", Version)
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()
	d, err := Start(ctx, cfg, logger)
	if err != nil {
		return err
	}
	<-ctx.Done()
	logger.Info("shutting down", "drain", cfg.DrainDelay)
	d.Close()
	return nil
}
