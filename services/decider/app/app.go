// Package app is the decider's program: flags, start-up order, and shutdown.
// cmd/decider is a thin main around Run; tests start a decider with Start.
package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/debugserver"
	"github.com/switchboard-ai/switchboard/pkg/flagenv"
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
	// Advertise is the gRPC address other replicas use to reach this one
	// (forwarding to the broker's owner). (Optional) Defaults to the listen address.
	Advertise string
	// DrainDelay is how long health reports NOT_SERVING before the server
	// stops, so load balancers move away first. (Optional) Defaults to 2s.
	DrainDelay time.Duration
	// ShutdownTimeout bounds the graceful stop. (Optional) Defaults to 10s.
	ShutdownTimeout time.Duration
	// LogLevel is debug, info, warn or error. (Optional) Defaults to info.
	LogLevel string
	// BrokerSessionTTL is the TTL of the election session that makes one
	// replica the owner of the rate-limit broker and the hedge budget: after
	// a crash, the next owner takes over once it expires (a clean stop
	// resigns at once). Shorter means faster failover, but a pause longer
	// than it costs the owner its ownership. Whole seconds. (Optional)
	// Defaults to 3s.
	BrokerSessionTTL time.Duration
	// BrokerSnapshotInterval is how often the broker's owner saves its state
	// (only when it changed); an unclean failover loses what came after the
	// last save but for the reconciliations the edges replay. (Optional)
	// Defaults to 1s; tests lengthen it to know which state a crash loses.
	BrokerSnapshotInterval time.Duration

	// ProbeInterval is how often every endpoint is probed at each probe size.
	// (Optional) 0 disables probes; the flag defaults to 5m.
	ProbeInterval time.Duration
	// ProbeSizes are the probe prompt sizes in tokens. (Optional) Defaults to 2k, 20k, 60k, 150k: one in each size bucket.
	ProbeSizes []int64
	// Exploration is the share of requests sent to endpoints with too little
	// data. (Optional) Defaults to none (0 or negative).
	Exploration float64
	// Seed makes exploration reproducible. (Optional) 0 seeds from the clock.
	Seed uint64
	// RoutingPolicy is the deployment's default routing policy, for models
	// whose catalog entry sets none: smart or routing-cost. (Optional)
	// Defaults to smart.
	RoutingPolicy string
	// RoutingCostMargin is the routing-cost policy's competitive margin.
	// (Optional) The flag defaults to 0.10.
	RoutingCostMargin float64
	// RoutingCostFloor is the share of traffic every endpoint keeps under
	// the routing-cost policy. (Optional) The flag defaults to 0.02;
	// negative disables.
	RoutingCostFloor float64
	// RoutingCostHalfLife is the age at which a call weighs half in the
	// routing-cost policy's rates (429s, errors, quality, price charged,
	// throughput). (Optional) Defaults to 5m.
	RoutingCostHalfLife time.Duration
	// RoutingCostLoadWindow is the time constant of the load measured per
	// endpoint, against which 429 caps are learned. (Optional) Defaults to 1m.
	RoutingCostLoadWindow time.Duration
	// CooldownRule names the rule that benches endpoints that refuse calls
	// (cooldown.Rules: "breaker", "first-refusal"); Cooldown,
	// CooldownErrors and CooldownWindow override its parts. (Optional)
	// Defaults to "breaker": 3 refusals within 1m bench for 2m.
	CooldownRule string
	// Cooldown is how long an endpoint that refused calls is benched. (Optional) Defaults to the rule's.
	Cooldown time.Duration
	// CooldownErrors refusals within CooldownWindow bench an endpoint. (Optional) Defaults to the rule's.
	CooldownErrors int
	// CooldownWindow (Optional) Defaults to the rule's.
	CooldownWindow time.Duration
	// StatsSnapshotInterval is how often routing statistics are written to
	// etcd; a crash loses at most this much. (Optional) Defaults to 30s.
	StatsSnapshotInterval time.Duration
	// ExperimentMinBlock is the shortest block a switchback experiment may
	// have. (Optional) Defaults to 1m.
	ExperimentMinBlock time.Duration
	// ExperimentSaveInterval is how often this replica's figures of the
	// running experiment are written to etcd; a crash loses at most this
	// much. (Optional) Defaults to 30s.
	ExperimentSaveInterval time.Duration
	// HedgeBudgetUSD is the daily hedge budget shared by all edges. (Optional)
	// The flag defaults to 5; 0 means no hedging.
	HedgeBudgetUSD float64
	// HedgeBudgetBurst paces the hedge budget over the UTC day: at time t of
	// the day hedges may have spent HedgeBudgetUSD × (t + HedgeBudgetBurst) /
	// (24h + HedgeBudgetBurst), so the budget lasts through the busy hours.
	// (Optional) Defaults to 1h; 24h or more spends the day's budget as
	// hedges come.
	HedgeBudgetBurst time.Duration
	// HedgeDelay is how long a 32k-128k streaming request waits for a first
	// token before it is hedged. (Optional) Defaults to 1s.
	HedgeDelay time.Duration
	// FastEnough is the typical time to first token under which an endpoint
	// is never left out as too slow, however much faster another is.
	// (Optional) Defaults to 1s.
	FastEnough time.Duration
	// NoSticky turns cache-aware stickiness off: every turn of a
	// conversation is ranked afresh. (Optional) The --sticky flag defaults
	// to on.
	NoSticky bool
	// BrokerStateBytes bounds the rate-limit broker's saved state, in
	// bytes, and so how many reservations may be open at once (about 500
	// bytes each, 2 KiB at most). The snapshot is one etcd transaction of
	// this plus the hedge budget's state: an external etcd's
	// --max-request-bytes must hold admission.WriteBytesFor of it (the
	// embedded etcd is configured so). (Optional) Defaults to 1 MiB, within
	// etcd's default limit of 1.5 MiB.
	BrokerStateBytes int
	// QueueReattach is how long a queued request with an idempotency key
	// keeps its place after its caller went away (a broken call, or a
	// failover: queued requests are in the snapshot), for the caller's
	// retry to re-attach. 0 removes it with its caller.
	QueueReattach time.Duration
	// StickyTTL is how long a conversation stays with the endpoint of its
	// last turn, each turn starting it again. (Optional) Defaults to 10m.
	StickyTTL time.Duration
	// HedgeFrom and HedgeImmediateFrom are the prompt sizes, in tokens, from
	// which streaming requests are hedged after HedgeDelay, and at once.
	// (Optional) Default to 32768 and 131072.
	HedgeFrom, HedgeImmediateFrom int64
	// ActivityRetention is how long the activity log keeps calls. (Optional) Defaults to 30 days.
	ActivityRetention time.Duration
	// TokenFile holds this replica's bearer token, sent when it forwards to
	// the broker's owner (a caller of role replica in the catalog); re-read
	// when it changes. (Optional) Without it, or a client certificate, the
	// owner refuses what other replicas forward.
	TokenFile string
	// Now is the clock of routing decisions, statistics and the hedge
	// budget's UTC day. (Optional) Defaults to time.Now.
	Now func() time.Time

	// Transport security.

	// TLSCertFile and TLSKeyFile are the decider's certificate chain and
	// private key, PEM, in one directory: with them it serves TLS. The same
	// certificate is its client certificate when it forwards to the replica
	// that owns the broker, so it needs both the serverAuth and clientAuth
	// extended key usages, and the name other replicas verify
	// (PeerServerName). Both or neither. (Optional)
	TLSCertFile, TLSKeyFile string
	// TLSClientCAFile holds the CAs of client certificates, PEM: with it every
	// caller (edges, services, operators, other replicas) must present a
	// certificate one of them signed (mutual TLS). Needs TLSCertFile. (Optional)
	TLSClientCAFile string
	// TLSCAFile holds the CAs of the other replicas' server certificates, PEM.
	// (Optional) Defaults to TLSClientCAFile (one CA for the deployment), or
	// the system's roots without it.
	TLSCAFile string
	// PeerServerName is the name a replica verifies in the certificate of the
	// replica it forwards to. Replicas reach each other by Advertise, usually
	// a pod IP that no certificate names, so they verify one fixed name that
	// every replica's certificate carries instead. (Optional) Defaults to the
	// first DNS name of TLSCertFile's certificate (replicas share one
	// certificate, or one name); without any, the host of the address
	// dialled, which the certificate must then name as an IP address.
	PeerServerName string
	// TLSRefresh is how often the TLS files are checked for a rotation.
	// (Optional) Defaults to 1m.
	TLSRefresh time.Duration
	// Plaintext serves without TLS on an address other machines reach: it
	// must be chosen explicitly. A loopback listen address may be plaintext
	// without it. (Optional)
	Plaintext bool
	// GRPCReflection registers gRPC server reflection, which lists every
	// service and message to whoever can connect. (Optional) Off by default.
	GRPCReflection bool
	// HealthListen is a second, plaintext listener that serves only
	// grpc.health.v1, with the main server's status, for probes that cannot
	// speak TLS (kubelet's gRPC probes). Every other service is
	// Unimplemented there. (Optional) Empty: none.
	HealthListen string
	// DebugListen is the host:port of a plain HTTP listener serving Go
	// profiles (net/http/pprof under /debug/pprof/), separate from the gRPC
	// port and outside its authentication; a port alone listens on loopback.
	// (Optional) Empty: none.
	DebugListen string
	// EtcdCAFile, EtcdCertFile and EtcdKeyFile secure the client of an
	// external etcd (Etcd set): the CA of etcd's server certificates, and a
	// client certificate for a cluster that requires one. An https://
	// endpoint without EtcdCAFile trusts the system's roots. (Optional)
	EtcdCAFile, EtcdCertFile, EtcdKeyFile string
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
	fs.StringVar(&cfg.Advertise, "advertise", "", "gRPC address other replicas reach this one at (default: the listen address)")
	fs.DurationVar(&cfg.DrainDelay, "drain-delay", 2*time.Second, "time NOT_SERVING before stopping on SIGTERM")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "graceful stop bound")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&cfg.BrokerSessionTTL, "broker-session-ttl", 3*time.Second, "TTL of the broker owner's election session: how long a crashed owner blocks failover (whole seconds, at least 2s)")
	fs.DurationVar(&cfg.ProbeInterval, "probe-interval", 5*time.Minute, "how often each endpoint is probed at each size (0 disables)")
	probeSizes := fs.String("probe-sizes", "2048,20480,61440,153600", "comma-separated probe prompt sizes in tokens (one in each size bucket)")
	fs.Float64Var(&cfg.Exploration, "exploration", 0, "share of fresh requests sent to endpoints with too little data (0: none; probes measure every endpoint)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the exploration randomness (0: from the clock)")
	fs.StringVar(&cfg.RoutingPolicy, "routing-policy", "smart", "default routing policy of models whose catalog entry sets none: smart or routing-cost")
	fs.Float64Var(&cfg.RoutingCostMargin, "routing-cost-margin", 0.10, "routing-cost policy: endpoints within this fraction of the lowest routing cost share the traffic fully")
	fs.Float64Var(&cfg.RoutingCostFloor, "routing-cost-floor", 0.02, "routing-cost policy: the share of traffic every endpoint keeps (negative disables)")
	fs.DurationVar(&cfg.RoutingCostHalfLife, "routing-cost-half-life", outcomes.DefaultHalfLife, "routing-cost policy: age at which a call weighs half in an endpoint's rates")
	fs.DurationVar(&cfg.RoutingCostLoadWindow, "routing-cost-load-window", outcomes.DefaultLoadWindow, "routing-cost policy: time constant of the per-endpoint load that 429 caps are learned against")
	fs.StringVar(&cfg.CooldownRule, "cooldown-rule", "breaker", "rule that benches endpoints that refuse calls: breaker (3 refusals within 1m bench for 2m) or first-refusal (1 refusal benches for 15m); the three flags below override its parts")
	fs.DurationVar(&cfg.Cooldown, "cooldown", 0, "how long an endpoint that refused calls is not used (0: the rule's)")
	fs.IntVar(&cfg.CooldownErrors, "cooldown-errors", 0, "refusals within --cooldown-window that start a cool-down (0: the rule's)")
	fs.DurationVar(&cfg.CooldownWindow, "cooldown-window", 0, "window of --cooldown-errors (0: the rule's)")
	fs.DurationVar(&cfg.StatsSnapshotInterval, "stats-snapshot-interval", 30*time.Second, "how often routing statistics are saved to etcd")
	fs.DurationVar(&cfg.ExperimentMinBlock, "experiment-min-block", time.Minute, "shortest block a switchback experiment may have")
	fs.DurationVar(&cfg.ExperimentSaveInterval, "experiment-save-interval", 30*time.Second, "how often this replica's experiment figures are saved to etcd")
	fs.Float64Var(&cfg.HedgeBudgetUSD, "hedge-budget-usd", 5, "daily budget (USD, UTC day) for hedged second calls, shared by all edges; 0 disables hedging")
	fs.DurationVar(&cfg.HedgeBudgetBurst, "hedge-budget-burst", hedge.DefaultBurst, "pace the hedge budget over the UTC day: by time t of the day hedges may spend the budget's share of t plus this; 24h spends it as hedges come")
	fs.DurationVar(&cfg.HedgeDelay, "hedge-delay", time.Second, "wait for a first token before hedging a 32k-128k streaming request")
	fs.DurationVar(&cfg.FastEnough, "fast-enough", time.Second, "typical time to first token under which an endpoint is never too slow to route to")
	sticky := fs.Bool("sticky", true, "keep a conversation's later turns on the endpoint holding its prompt cache (false: rank every turn afresh)")
	fs.IntVar(&cfg.BrokerStateBytes, "broker-state-bytes", broker.DefaultMaxStateBytes, "bytes the rate-limit broker's saved state may take, which bounds the reservations open at once (about 500 bytes each); an external etcd's --max-request-bytes must be at least this plus 496 KiB")
	fs.DurationVar(&cfg.QueueReattach, "queue-reattach", 0, "how long a queued request with an idempotency key keeps its place after its caller went away (a broken call, a failover), for the caller's retry; 0 removes it at once")
	fs.DurationVar(&cfg.StickyTTL, "sticky-ttl", 10*time.Minute, "how long a conversation stays with the endpoint of its last turn; each turn starts it again")
	fs.Int64Var(&cfg.HedgeFrom, "hedge-from-tokens", 32*1024, "prompt size from which streaming requests are hedged after --hedge-delay")
	fs.Int64Var(&cfg.HedgeImmediateFrom, "hedge-immediate-from-tokens", 128*1024, "prompt size from which both endpoints start at once")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "file holding this replica's bearer token (role replica), sent to the broker's owner; re-read when it changes")
	fs.DurationVar(&cfg.ActivityRetention, "activity-retention", 30*24*time.Hour, "how long the activity log keeps calls")
	// Transport security.
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "PEM certificate chain to serve TLS with; also the client certificate for other replicas, so it needs serverAuth and clientAuth usages and the --peer-server-name (reloaded on change)")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file, in the same directory")
	fs.StringVar(&cfg.TLSClientCAFile, "tls-client-ca-file", "", "PEM CAs of client certificates: every caller must present one they signed (mutual TLS)")
	fs.StringVar(&cfg.TLSCAFile, "tls-ca-file", "", "PEM CAs of the other replicas' server certificates (default: --tls-client-ca-file, else the system's roots)")
	fs.StringVar(&cfg.PeerServerName, "peer-server-name", "", "name verified in another replica's certificate when forwarding to it by --advertise address (default: the first DNS name of --tls-cert-file's certificate)")
	fs.DurationVar(&cfg.TLSRefresh, "tls-refresh", tlsfiles.DefaultRefresh, "how often the TLS files are checked for a rotation")
	fs.StringVar(&cfg.HealthListen, "health-listen", "", "host:port of a plaintext listener serving only grpc.health.v1, for probes that cannot do TLS (default: none)")
	fs.StringVar(&cfg.DebugListen, "debug-listen", "", "host:port of a plain HTTP listener serving Go profiles (/debug/pprof/); a port alone listens on loopback (default: none)")
	fs.BoolVar(&cfg.Plaintext, "plaintext", false, "serve without TLS on a non-loopback --listen address (loopback may always be plaintext)")
	fs.BoolVar(&cfg.GRPCReflection, "grpc-reflection", false, "register gRPC server reflection (lists every service to whoever connects)")
	fs.StringVar(&cfg.EtcdCAFile, "etcd-ca-file", "", "PEM CAs of the external etcd's server certificates (with --etcd)")
	fs.StringVar(&cfg.EtcdCertFile, "etcd-cert-file", "", "PEM client certificate for the external etcd (with --etcd)")
	fs.StringVar(&cfg.EtcdKeyFile, "etcd-key-file", "", "PEM private key of --etcd-cert-file")
	parseErr := flagenv.Parse(fs, "SWITCHBOARD_DECIDER", args, getenv)
	if errors.Is(parseErr, flag.ErrHelp) {
		return cfg, parseErr
	}
	cfg.NoSticky = !*sticky
	var sizeErr error
	cfg.ProbeSizes, sizeErr = parseSizes(*probeSizes)
	for _, e := range strings.Split(etcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.Etcd = append(cfg.Etcd, e)
		}
	}
	return cfg, errors.Join(parseErr, sizeErr, cfg.validate())
}

// cooldownOptions is the cool-down rule: the named rule with the parts
// the flags set over it.
func (c Config) cooldownOptions() cooldown.Options {
	return cooldown.Options{Duration: c.Cooldown, Errors: c.CooldownErrors, Window: c.CooldownWindow}.Over(cooldown.Rules[c.CooldownRule])
}

func parseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--probe-sizes: %q is not a positive number of tokens", f)
		}
		out = append(out, n)
	}
	return out, nil
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
	if c.BrokerSessionTTL != 0 && c.BrokerSessionTTL < 2*time.Second {
		errs = append(errs, fmt.Errorf("--broker-session-ttl %v must be at least 2s", c.BrokerSessionTTL))
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
	if _, ok := cooldown.Rules[c.CooldownRule]; !ok && c.CooldownRule != "" {
		errs = append(errs, fmt.Errorf("--cooldown-rule: unknown rule %q (breaker or first-refusal)", c.CooldownRule))
	}
	if c.ProbeInterval < 0 || c.Cooldown < 0 || c.CooldownWindow < 0 || c.StatsSnapshotInterval < 0 || c.CooldownErrors < 0 {
		errs = append(errs, errors.New("--probe-interval, --cooldown, --cooldown-window, --stats-snapshot-interval and --cooldown-errors must not be negative"))
	}
	if c.ExperimentMinBlock < 0 || c.ExperimentSaveInterval < 0 {
		errs = append(errs, errors.New("--experiment-min-block and --experiment-save-interval must not be negative"))
	}
	if c.HedgeBudgetUSD < 0 || c.HedgeBudgetBurst < 0 || c.HedgeDelay < 0 || c.FastEnough < 0 || c.HedgeFrom < 0 || c.HedgeImmediateFrom < 0 || c.ActivityRetention < 0 {
		errs = append(errs, errors.New("--hedge-*, --fast-enough and --activity-retention must not be negative"))
	}
	if c.BrokerStateBytes != 0 && c.BrokerStateBytes < minBrokerStateBytes {
		errs = append(errs, fmt.Errorf("--broker-state-bytes %d must be at least %d", c.BrokerStateBytes, minBrokerStateBytes))
	}
	if c.QueueReattach < 0 {
		errs = append(errs, fmt.Errorf("--queue-reattach %v must not be negative", c.QueueReattach))
	}
	if c.StickyTTL < 0 {
		errs = append(errs, fmt.Errorf("--sticky-ttl %v must not be negative", c.StickyTTL))
	}
	if c.Exploration >= 1 {
		errs = append(errs, fmt.Errorf("--exploration %g must be below 1", c.Exploration))
	}
	if _, err := routing.ParsePolicy(c.RoutingPolicy); err != nil {
		errs = append(errs, fmt.Errorf("--routing-policy: %w", err))
	}
	if c.RoutingCostHalfLife < 0 || c.RoutingCostLoadWindow < 0 {
		errs = append(errs, errors.New("--routing-cost-half-life and --routing-cost-load-window must not be negative"))
	}
	if c.RoutingCostMargin < 0 || c.RoutingCostMargin > 10 || c.RoutingCostFloor >= 0.5 {
		errs = append(errs, fmt.Errorf("--routing-cost-margin %g must be between 0 and 10 and --routing-cost-floor %g below 0.5", c.RoutingCostMargin, c.RoutingCostFloor))
	}
	errs = append(errs, c.validateTLS()...)
	return errors.Join(errs...)
}

// validateTLS checks the transport security flags agree with each other.
func (c *Config) validateTLS() []error {
	var errs []error
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file go together"))
	}
	if c.TLSCertFile == "" && (c.TLSClientCAFile != "" || c.TLSCAFile != "") {
		errs = append(errs, errors.New("--tls-client-ca-file and --tls-ca-file need --tls-cert-file and --tls-key-file"))
	}
	if c.TLSCertFile == "" && c.PeerServerName != "" {
		errs = append(errs, errors.New("--peer-server-name needs --tls-cert-file and --tls-key-file"))
	}
	if c.HealthListen != "" {
		if _, _, err := net.SplitHostPort(c.HealthListen); err != nil {
			errs = append(errs, fmt.Errorf("--health-listen %q: %w", c.HealthListen, err))
		}
	}
	if c.DebugListen != "" {
		if _, err := debugserver.Addr(c.DebugListen); err != nil {
			errs = append(errs, fmt.Errorf("--debug-listen %q: %w", c.DebugListen, err))
		}
	}
	if c.TLSRefresh < 0 {
		errs = append(errs, fmt.Errorf("--tls-refresh %v must not be negative", c.TLSRefresh))
	}
	if c.Plaintext && c.TLSCertFile != "" {
		errs = append(errs, errors.New("--plaintext and --tls-cert-file exclude each other"))
	}
	if (c.EtcdCertFile == "") != (c.EtcdKeyFile == "") {
		errs = append(errs, errors.New("--etcd-cert-file and --etcd-key-file go together"))
	}
	if len(c.Etcd) == 0 && (c.EtcdCAFile != "" || c.EtcdCertFile != "") {
		errs = append(errs, errors.New("--etcd-ca-file, --etcd-cert-file and --etcd-key-file are for an external etcd: set --etcd"))
	}
	return errs
}

// checkPlaintext refuses to serve plaintext where other machines can
// connect unless that was chosen explicitly.
func (c *Config) checkPlaintext() error {
	if c.TLSCertFile != "" || c.Plaintext || tlsfiles.Loopback(c.Listen) {
		return nil
	}
	return fmt.Errorf("--listen %s is reachable from other machines and no TLS is configured: "+
		"serve TLS with --tls-cert-file and --tls-key-file (and --tls-client-ca-file for mutual TLS), "+
		"or choose plaintext explicitly with --plaintext", c.Listen)
}

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
	actLog   atomic.Pointer[activity.Store] // read by Report streams that may start before it opens
	grants   atomic.Pointer[grant.Signer]   // set before actLog
	forged   atomic.Int64                   // activity records dropped for want of a valid grant
	overCaps atomic.Int64                   // activity records dropped for a bill beyond their decision's caps
	broker   *broker.Broker
	adm      *admission.Admission
	admP     atomic.Pointer[admission.Admission] // adm, for activity batches that may arrive before it is set
	observer atomic.Pointer[observe.Observer]
	cool     *cooldown.Tracker
	exps     *experiment.Manager
	settleQ  chan settlement // from activity batches to the budget's owner
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
// catalog loaded. On error everything started is stopped again.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (_ *Decider, err error) {
	d := &Decider{cfg: cfg, logger: logger, settleQ: make(chan settlement, 4096)}
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
	d.authn = auth.New()
	svc := server.New(d.hub, d.budget, d.authn)
	d.svc = svc
	d.hub.SetReservations(svc.Reservations())
	dial := []grpc.DialOption{grpc.WithChainUnaryInterceptor(auth.ForwardInterceptor())}
	if cfg.TokenFile != "" {
		tok, err := bearer.NewFile(cfg.TokenFile, bearer.Options{})
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		dial = append(dial, grpc.WithPerRPCCredentials(tok))
	}
	d.srv = grpcserver.New(logger.With("component", "grpc"), grpcserver.Options{
		HotMethods: []string{
			switchboardv1.DeciderService_Decide_FullMethodName, switchboardv1.DeciderService_Reserve_FullMethodName,
			switchboardv1.DeciderService_Reconcile_FullMethodName, switchboardv1.DeciderService_AcquireHedge_FullMethodName,
		},
		Unary:      []grpc.UnaryServerInterceptor{d.authn.UnaryInterceptor()},
		Stream:     []grpc.StreamServerInterceptor{d.authn.StreamInterceptor()},
		Creds:      creds,
		Reflection: cfg.GRPCReflection,
	})
	switchboardv1.RegisterDeciderServiceServer(d.srv.GRPC, svc)
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
	d.grants.Store(g)
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
	d.actLog.Store(act)
	svc.SetActivity(act)
	d.stats = stats.New(stats.Config{Now: cfg.Now})
	if err := d.restoreStats(ctx); err != nil {
		logger.Warn("routing statistics not restored", "err", err)
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
	d.admP.Store(d.adm)
	d.observer.Store(observe.New(observe.Options{
		Catalog: d.router, Stats: d.stats, Affinity: aff, Sessions: sessions, Cooldown: d.cool, Outcomes: oc,
		Broadcast: d.hub.Broadcast, Logger: logger.With("component", "observe"), Now: cfg.Now,
	}))
	svc.SetRouter(d.router)
	svc.SetExperiments(d.exps)
	d.hub.SetKeySet(views.Keys)
	d.views.Store(views)
	d.wg.Go(func() { d.store.WatchCatalog(bg, rev, d.onCatalog) })
	d.wg.Go(func() { d.maintain(bg) })
	d.wg.Go(func() { d.settleHedges(bg, svc) })
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
	d.srv.SetServing(true, switchboardv1.DeciderService_ServiceDesc.ServiceName)
	d.watchAdmission(bg)
	logger.Info("decider serving", "addr", d.lis.Addr().String(), "models", len(c.Models), "tenants", len(c.Tenants), "catalog_revision", rev)
	return d, nil
}

// onActivity stores finished requests and settles the hedge budget with the
// real cost of each cancelled hedge leg: at once when this replica holds the
// budget, else queued for the replica that does, never waiting for it. Only
// records whose grant matches a decision the deciders made for their
// request, tenant, key and caps, and whose bill is within those caps, are
// taken; the others (forged, from an edge that does not copy grants, or
// billing more than the decision allowed) are dropped, counted and logged.
func (d *Decider) onActivity(ctx context.Context, edge *switchboardv1.EdgeHello, records []*switchboardv1.ActivityRecord) error {
	act := d.actLog.Load()
	if act == nil {
		return errors.New("the activity log is not open yet")
	}
	records, refused := d.grants.Load().Filter(records)
	if n := refused.Ungranted; n > 0 {
		d.forged.Add(int64(n))
		d.logger.Warn("activity records without a valid grant dropped", "edge", edge.GetEdgeId(), "records", n)
	}
	if n := refused.OverCaps; n > 0 {
		d.overCaps.Add(int64(n))
		d.logger.Warn("activity records beyond their decision's caps dropped", "edge", edge.GetEdgeId(), "records", n, "first", refused.Why)
	}
	// Settle before the records become readable, so whoever reads a hedged
	// call's record sees the budget settled too; a batch that fails to store
	// is sent again and settling twice changes nothing.
	for _, r := range records {
		// A hedge granted but never started (the primary answered while the
		// budget was asked) settles at 0; settling ignores unknown ids.
		h := r.GetHedge()
		if h == nil {
			continue
		}
		if adm := d.admP.Load(); adm != nil && adm.Owner() {
			d.budget.Settle(r.GetId(), h.GetLoserCostUsd()) // in memory, at once
			continue
		}
		select {
		case d.settleQ <- settlement{caller: auth.FromContext(ctx), st: &switchboardv1.HedgeSettlement{RequestId: r.GetId(), LoserCostUsd: h.GetLoserCostUsd()}}:
		default:
			d.logger.Warn("hedge settlements queue full; the estimate stays charged", "request_id", r.GetId())
		}
	}
	return act.Add(records)
}

// settlement is a hedge settlement waiting to be sent to the budget's
// owner, with the caller (the edge whose activity record it comes from) it
// is sent on behalf of: the owner refuses a replica's call that names none.
type settlement struct {
	caller *auth.Principal
	st     *switchboardv1.HedgeSettlement
}

// settleHedges sends queued hedge settlements, in batches (one per edge
// caller), to the budget's owner (itself when this replica owns it),
// retrying a few times. A settlement that cannot be delivered leaves the
// estimate charged, which errs on the side of spending less; settling twice
// changes nothing.
func (d *Decider) settleHedges(ctx context.Context, svc *server.Server) {
	for {
		var queued []settlement
		select {
		case <-ctx.Done():
			return
		case st := <-d.settleQ:
			queued = append(queued, st)
		}
	more:
		for len(queued) < 500 {
			select {
			case st := <-d.settleQ:
				queued = append(queued, st)
			default:
				break more
			}
		}
		for _, b := range settlementBatches(queued) {
			if !d.settle(ctx, svc, b.caller, b.settlements) {
				return
			}
		}
	}
}

// settlementBatch is the settlements of one caller.
type settlementBatch struct {
	caller      *auth.Principal
	settlements []*switchboardv1.HedgeSettlement
}

// settlementBatches groups queued settlements by their caller, in order of
// each caller's first.
func settlementBatches(queued []settlement) []settlementBatch {
	var out []settlementBatch
	at := map[*auth.Principal]int{}
	for _, q := range queued {
		i, ok := at[q.caller]
		if !ok {
			i = len(out)
			at[q.caller] = i
			out = append(out, settlementBatch{caller: q.caller})
		}
		out[i].settlements = append(out[i].settlements, q.st)
	}
	return out
}

// settle sends one caller's settlements, retrying a few times; false when
// ctx ended.
func (d *Decider) settle(ctx context.Context, svc *server.Server, caller *auth.Principal, batch []*switchboardv1.HedgeSettlement) bool {
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if caller != nil {
			cctx = auth.NewContext(cctx, caller)
		}
		_, err := svc.SettleHedge(cctx, &switchboardv1.SettleHedgeRequest{Settlements: batch})
		cancel()
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			return true
		}
		if attempt == 5 {
			d.logger.Warn("hedge settlements not delivered; their estimates stay charged", "settlements", len(batch), "err", err)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}

// restoreStats loads the routing statistics saved in etcd, so a restart
// does not send traffic back to "no data" routing.
func (d *Decider) restoreStats(ctx context.Context) error {
	shards, err := d.store.GetStats(ctx)
	if err != nil {
		return err
	}
	if err := d.stats.Restore(shards); err != nil {
		return err
	}
	d.logger.Info("routing statistics restored", "models", len(shards))
	return nil
}

// maintain refreshes aging statistics every second, expires cool-downs, and
// saves the statistics to etcd every StatsSnapshotInterval — off the request
// path, and only the shards that changed.
func (d *Decider) maintain(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	written := map[string]string{}
	lastSave := time.Now()
	save := func(ctx context.Context) {
		n, err := d.store.PutStats(ctx, d.stats.Snapshot(), written)
		if err != nil {
			d.logger.Warn("saving routing statistics", "err", err)
			return
		}
		if n > 0 {
			d.logger.Debug("routing statistics saved", "shards", n)
		}
	}
	for {
		select {
		case <-ctx.Done():
			// A last save on the way out, so a clean restart loses nothing.
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			save(sctx)
			cancel()
			return
		case <-tick.C:
		}
		d.stats.Refresh()
		d.cool.Expire(d.cfg.Now())
		d.broker.Expire(d.cfg.Now())
		if iv := d.cfg.StatsSnapshotInterval; iv > 0 && time.Since(lastSave) >= iv {
			lastSave = time.Now()
			save(ctx)
		}
	}
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

// Addr returns the gRPC address.
func (d *Decider) Addr() string { return d.lis.Addr().String() }

// EtcdEndpoint returns the embedded etcd's client address, "" with an external etcd.
func (d *Decider) EtcdEndpoint() string {
	if d.embedded == nil {
		return ""
	}
	return d.embedded.Endpoint()
}

// ActivityRejected returns how many activity records were dropped because
// their grant did not match their request, tenant and key (or was missing).
func (d *Decider) ActivityRejected() int64 { return d.forged.Load() }

// ActivityOverCaps returns how many activity records were dropped because,
// with a valid grant, their tokens or costs exceeded the caps of the
// decision it names.
func (d *Decider) ActivityOverCaps() int64 { return d.overCaps.Load() }

// ReportsInvalid returns how many call reports, reconciliations,
// reservation ids and activity records the Report stream dropped for
// failing their bounds (package validate).
func (d *Decider) ReportsInvalid() int64 { return d.hub.Invalid() }

// ReservationHeartbeats returns how many of the edges' reservation
// heartbeats were applied on the broker's owner.
func (d *Decider) ReservationHeartbeats() int64 { return d.hub.Heartbeats() }

// ReportsReceived returns how many call reports edges have sent.
func (d *Decider) ReportsReceived() int64 { return d.hub.Received() }

// HedgeBudget returns today's hedge spend and budget, and how many hedges
// were granted and refused.
func (d *Decider) HedgeBudget() (spent, daily float64, granted, refused int64) {
	return d.budget.Status()
}

// ProbeCost returns how many probes reported back and what they cost, USD.
func (d *Decider) ProbeCost() (int64, float64) {
	if ob := d.observer.Load(); ob != nil {
		return ob.ProbeCost()
	}
	return 0, 0
}

// ReconcilesScoped returns how many reconciliations this replica's broker
// applied for their reservation's tenant only (a service the catalog does
// not trust for shared provider state): their pauses kept to that tenant,
// their headers' limits and usage not learned.
func (d *Decider) ReconcilesScoped() int64 { return d.broker.Scoped() }

// ReportsImplausible returns how many call reports' timing was not believed
// (a first token faster than any provider reads the prompt, generation
// beyond 5,000 tokens/s, a call of more than an hour), so added no speed
// sample.
func (d *Decider) ReportsImplausible() int64 {
	if ob := d.observer.Load(); ob != nil {
		return ob.Implausible()
	}
	return 0
}

// LimitStatus is one of a tenant's own quota buckets as this replica's
// broker holds it (the owner's is the one that admits).
type LimitStatus struct {
	// Unit and Window name the bucket, as in the catalog ("usd", "day").
	Unit, Window string
	// Limit is its limit; Remaining what it can admit now.
	Limit, Remaining float64
}

// TenantLimits returns a tenant's own quota buckets, for operators and tests.
func (d *Decider) TenantLimits(tenantID string) []LimitStatus {
	var out []LimitStatus
	for _, b := range d.broker.Limits(broker.Identity{TenantID: tenantID}) {
		out = append(out, LimitStatus{Unit: b.Unit.String(), Window: b.Window.String(), Limit: b.Limit, Remaining: b.Remaining})
	}
	return out
}

// Edges returns the connected edges.
func (d *Decider) Edges() []*switchboardv1.EdgeHello { return d.hub.Edges() }

// BrokerSnapshotVersion returns how many times the rate-limit broker's state
// has been saved to etcd (the version of its snapshot key; 0 before the
// first). The owner saves about once a second, off the request path: a
// failover drill or a test that must know a grant is saved waits for two
// saves after the grant (the first may have been taken just before it)
// rather than for a guessed delay.
func (d *Decider) BrokerSnapshotVersion(ctx context.Context) (int64, error) {
	resp, err := d.store.Client().Get(ctx, admission.SnapshotKey)
	if err != nil {
		return 0, fmt.Errorf("read broker snapshot: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].Version, nil
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
		if act := d.actLog.Load(); act != nil {
			_ = act.Close()
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

// DebugAddr is the host:port of the debug listener, "" without one.
func (d *Decider) DebugAddr() string {
	if d.debug == nil {
		return ""
	}
	return d.debug.Addr()
}

// HealthAddr returns the address of the health-only listener, "" without one.
func (d *Decider) HealthAddr() string {
	if d.healthLis == nil {
		return ""
	}
	return d.healthLis.Addr().String()
}

// firstDNSName returns the first DNS name of the certificate in certFile,
// "" when it names none.
func firstDNSName(certFile string) (string, error) {
	data, err := os.ReadFile(certFile)
	if err != nil {
		return "", fmt.Errorf("--tls-cert-file: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return "", fmt.Errorf("--tls-cert-file %s holds no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("--tls-cert-file %s: %w", certFile, err)
	}
	if len(cert.DNSNames) == 0 {
		return "", nil
	}
	return cert.DNSNames[0], nil
}

// etcdTLS returns the TLS configuration of the external etcd's client: nil
// for the embedded etcd, and for http:// endpoints without TLS flags.
func (c *Config) etcdTLS() (*tls.Config, error) {
	if len(c.Etcd) == 0 {
		return nil, nil
	}
	https := false
	for _, e := range c.Etcd {
		https = https || strings.HasPrefix(e, "https://")
	}
	if !https && c.EtcdCAFile == "" && c.EtcdCertFile == "" {
		return nil, nil
	}
	info := transport.TLSInfo{TrustedCAFile: c.EtcdCAFile, CertFile: c.EtcdCertFile, KeyFile: c.EtcdKeyFile}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	return cfg, nil
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

// minBrokerStateBytes is the least --broker-state-bytes: room for the
// queue's part of the state and some hundred reservations.
const minBrokerStateBytes = 256 << 10

// etcdRequestSlack is what an etcd request holds beside the snapshot
// transaction's values: keys, the compare, gRPC framing.
const etcdRequestSlack = 64 << 10

// brokerStateBytes is --broker-state-bytes, or its default.
func (c *Config) brokerStateBytes() int {
	if c.BrokerStateBytes <= 0 {
		return broker.DefaultMaxStateBytes
	}
	return c.BrokerStateBytes
}
