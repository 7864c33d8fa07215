package app

import (
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
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/switchboard-ai/switchboard/pkg/debugserver"
	"github.com/switchboard-ai/switchboard/pkg/flagenv"
	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/probe"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/transfer"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

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
	// Region is where this replica runs, as the edges' --region names
	// regions: it shares the probes with the live replicas of the same
	// region and sends them to its edges of that region, so every region
	// probes every model. (Optional) Defaults to "", none said: the
	// replicas naming none share them, and any edge runs them.
	Region string
	// Advertise is the gRPC address other replicas use to reach this one
	// (forwarding to the broker's owner). (Optional) Defaults to the listen address.
	Advertise string
	// DrainDelay is how long health reports NOT_SERVING before the server
	// stops, so load balancers move away first. (Optional) Defaults to 2s.
	DrainDelay time.Duration
	// NoDrainDelay stops at once, without DrainDelay. (Optional)
	NoDrainDelay bool
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
	// BrokerLeases turns quota leases on: a replica that does not own the
	// broker admits on shares of the large rolling buckets the owner lends
	// it, instead of forwarding every reservation. (Optional) Defaults to
	// false.
	BrokerLeases bool
	// BrokerLeaseTerm is how long a lease the owner grants lasts unless
	// renewed; replicas renew every half term. (Optional) Defaults to 2s.
	BrokerLeaseTerm time.Duration
	// BrokerMaxLeaseTerm bounds every lease term any owner grants; a new
	// owner's learning mode lasts at least that long. The same on every
	// replica. (Optional) Defaults to 10s.
	BrokerMaxLeaseTerm time.Duration

	// ProbeInterval is how often every endpoint is probed at each probe size.
	// (Optional) Defaults to 5m.
	ProbeInterval time.Duration
	// NoProbes turns synthetic probes off. (Optional)
	NoProbes bool
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
	// (Optional) Defaults to 0.10.
	RoutingCostMargin float64
	// RoutingCostFloor is the share of traffic every endpoint keeps under
	// the routing-cost policy. (Optional) Defaults to 0.02; negative
	// disables.
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
	// Defaults to 5.
	HedgeBudgetUSD float64
	// NoHedging turns hedging off: no budget, and edges never ask. (Optional)
	NoHedging bool
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
	// StateTransferTimeout bounds how long a replica that starts while
	// others live waits for one of them to hand it what it learned
	// (affinity, conversations, outcomes, cool-downs); a transfer that does
	// not finish in time is dropped and the replica starts empty.
	// (Optional) Defaults to 15s; negative asks for no transfer.
	StateTransferTimeout time.Duration
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
	// Tracing is where the decider's spans go: its gRPC calls' and its
	// handling of the edges' call reports (Optional). Defaults to the
	// process's global tracing (telemetry.Setup: spans only with an OTLP
	// exporter); tests give an in-memory recorder.
	Tracing *telemetry.Tracing

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
	// AdminListen is the host:port of the admin listener: plain HTTP,
	// separate from the gRPC port and outside its authentication, serving
	// /metrics, /healthz, /readyz and the dashboard (which signs its users
	// in itself); a port alone listens on loopback. (Optional) Empty: none.
	AdminListen string
	// Pprof also serves Go profiles (net/http/pprof under /debug/pprof/) on
	// the admin listener. (Optional) Off by default.
	Pprof bool
	// DebugListen is the former name of AdminListen, with Pprof: what it
	// served before. (Optional, deprecated) Empty: none.
	DebugListen string
	// EtcdCAFile, EtcdCertFile and EtcdKeyFile secure the client of an
	// external etcd (Etcd set): the CA of etcd's server certificates, and a
	// client certificate for a cluster that requires one. An https://
	// endpoint without EtcdCAFile trusts the system's roots. (Optional)
	EtcdCAFile, EtcdCertFile, EtcdKeyFile string
}

// DefaultConfig is the decider's defaults: every flag's default value, and
// what Start takes for every field left zero.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Listen:                 "127.0.0.1:9090",
		DataDir:                "switchboard-data",
		EtcdListen:             "127.0.0.1:2379",
		ID:                     host,
		DrainDelay:             2 * time.Second,
		ShutdownTimeout:        10 * time.Second,
		LogLevel:               "info",
		BrokerSessionTTL:       3 * time.Second,
		BrokerLeaseTerm:        broker.DefaultLeaseTerm,
		BrokerMaxLeaseTerm:     broker.DefaultMaxLeaseTerm,
		ProbeInterval:          5 * time.Minute,
		RoutingPolicy:          "smart",
		RoutingCostMargin:      0.10,
		RoutingCostFloor:       0.02,
		RoutingCostHalfLife:    outcomes.DefaultHalfLife,
		RoutingCostLoadWindow:  outcomes.DefaultLoadWindow,
		CooldownRule:           "breaker",
		StatsSnapshotInterval:  30 * time.Second,
		ExperimentMinBlock:     time.Minute,
		ExperimentSaveInterval: 30 * time.Second,
		HedgeBudgetUSD:         5,
		HedgeBudgetBurst:       hedge.DefaultBurst,
		HedgeDelay:             time.Second,
		FastEnough:             time.Second,
		BrokerStateBytes:       broker.DefaultMaxStateBytes,
		StickyTTL:              10 * time.Minute,
		StateTransferTimeout:   transfer.DefaultTimeout,
		HedgeFrom:              32 * 1024,
		HedgeImmediateFrom:     128 * 1024,
		ActivityRetention:      30 * 24 * time.Hour,
		TLSRefresh:             tlsfiles.DefaultRefresh,
		ProbeSizes:             slices.Clone(probe.DefaultSizes),
	}
}

// withDefaults is c with DefaultConfig's value in every field left zero,
// so that Start(Config{}) runs what the binary runs; NoDrainDelay,
// NoProbes and NoHedging turn off what is on by default.
func (c Config) withDefaults() Config {
	def := DefaultConfig()
	orDefault(&c.Listen, def.Listen)
	orDefault(&c.DataDir, def.DataDir)
	orDefault(&c.EtcdListen, def.EtcdListen)
	orDefault(&c.ID, def.ID)
	orDefault(&c.DrainDelay, def.DrainDelay)
	orDefault(&c.ShutdownTimeout, def.ShutdownTimeout)
	orDefault(&c.LogLevel, def.LogLevel)
	orDefault(&c.BrokerSessionTTL, def.BrokerSessionTTL)
	orDefault(&c.BrokerLeaseTerm, def.BrokerLeaseTerm)
	orDefault(&c.BrokerMaxLeaseTerm, def.BrokerMaxLeaseTerm)
	orDefault(&c.ProbeInterval, def.ProbeInterval)
	orDefault(&c.RoutingPolicy, def.RoutingPolicy)
	orDefault(&c.RoutingCostMargin, def.RoutingCostMargin)
	orDefault(&c.RoutingCostFloor, def.RoutingCostFloor)
	orDefault(&c.RoutingCostHalfLife, def.RoutingCostHalfLife)
	orDefault(&c.RoutingCostLoadWindow, def.RoutingCostLoadWindow)
	orDefault(&c.CooldownRule, def.CooldownRule)
	orDefault(&c.StatsSnapshotInterval, def.StatsSnapshotInterval)
	orDefault(&c.ExperimentMinBlock, def.ExperimentMinBlock)
	orDefault(&c.ExperimentSaveInterval, def.ExperimentSaveInterval)
	orDefault(&c.HedgeBudgetUSD, def.HedgeBudgetUSD)
	orDefault(&c.HedgeBudgetBurst, def.HedgeBudgetBurst)
	orDefault(&c.HedgeDelay, def.HedgeDelay)
	orDefault(&c.FastEnough, def.FastEnough)
	orDefault(&c.BrokerStateBytes, def.BrokerStateBytes)
	orDefault(&c.StickyTTL, def.StickyTTL)
	orDefault(&c.StateTransferTimeout, def.StateTransferTimeout)
	orDefault(&c.HedgeFrom, def.HedgeFrom)
	orDefault(&c.HedgeImmediateFrom, def.HedgeImmediateFrom)
	orDefault(&c.ActivityRetention, def.ActivityRetention)
	orDefault(&c.TLSRefresh, def.TLSRefresh)
	if len(c.ProbeSizes) == 0 {
		c.ProbeSizes = def.ProbeSizes
	}
	if c.NoDrainDelay {
		c.DrainDelay = 0
	}
	if c.NoProbes {
		c.ProbeInterval = 0
	}
	if c.NoHedging {
		c.HedgeBudgetUSD = 0
	}
	return c
}

// orDefault sets *v to def when it is zero.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// joinSizes writes probe sizes as --probe-sizes takes them.
func joinSizes(sizes []int64) string {
	s := make([]string, len(sizes))
	for i, n := range sizes {
		s[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(s, ",")
}

// ParseFlags parses args, with SWITCHBOARD_DECIDER_* environment fallbacks,
// and reports every invalid setting at once.
func ParseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	def := DefaultConfig()
	var cfg Config
	var etcd string
	fs := flag.NewFlagSet("decider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: decider [flags]            serve: routing, admission, the activity log
       decider explain [flags]    show how a request would be routed (an operator's call)
       decider experiment start|stop|show [flags]
                                  run a switchback experiment on a running decider
       decider certs [flags]      write a CA and certificates for mutual TLS
       decider --version          print the version

Each command takes -help. Every serve flag falls back to SWITCHBOARD_DECIDER_<FLAG>.

Serve flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Listen, "listen", def.Listen, "gRPC listen address")
	fs.StringVar(&cfg.Catalog, "catalog", "", "YAML catalog file; validated and stored in etcd (empty: use the stored catalog)")
	fs.StringVar(&etcd, "etcd", "", "comma-separated etcd endpoints (empty: embedded etcd under --data-dir)")
	fs.StringVar(&cfg.DataDir, "data-dir", def.DataDir, "data directory of the embedded etcd")
	fs.StringVar(&cfg.EtcdListen, "etcd-listen", def.EtcdListen, "client address of the embedded etcd")
	fs.StringVar(&cfg.ID, "id", def.ID, "replica id in the membership list")
	fs.StringVar(&cfg.Region, "region", "", "region this replica runs in, as the edges' --region names regions: its probes are shared with the replicas of this region and run by its edges of this region (default: none, any edge)")
	fs.StringVar(&cfg.Advertise, "advertise", "", "gRPC address other replicas reach this one at (default: the listen address)")
	fs.DurationVar(&cfg.DrainDelay, "drain-delay", def.DrainDelay, "time NOT_SERVING before stopping on SIGTERM")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", def.ShutdownTimeout, "graceful stop bound")
	fs.StringVar(&cfg.LogLevel, "log-level", def.LogLevel, "debug, info, warn or error")
	fs.DurationVar(&cfg.BrokerSessionTTL, "broker-session-ttl", def.BrokerSessionTTL, "TTL of the broker owner's election session: how long a crashed owner blocks failover (whole seconds, at least 2s)")
	fs.BoolVar(&cfg.BrokerLeases, "broker-leases", def.BrokerLeases, "quota leases: replicas that do not own the rate-limit broker admit on shares of its large rolling buckets the owner lends them, instead of forwarding each reservation")
	fs.DurationVar(&cfg.BrokerLeaseTerm, "broker-lease-term", def.BrokerLeaseTerm, "how long a quota lease lasts unless renewed (replicas renew every half term)")
	fs.DurationVar(&cfg.BrokerMaxLeaseTerm, "broker-max-lease-term", def.BrokerMaxLeaseTerm, "the longest lease term any broker owner grants, the least a new owner's learning mode lasts; the same on every replica")
	fs.DurationVar(&cfg.ProbeInterval, "probe-interval", def.ProbeInterval, "how often each endpoint is probed at each size (0 disables)")
	probeSizes := fs.String("probe-sizes", joinSizes(def.ProbeSizes), "comma-separated probe prompt sizes in tokens (one in each size bucket)")
	fs.Float64Var(&cfg.Exploration, "exploration", 0, "share of fresh requests sent to endpoints with too little data (0: none; probes measure every endpoint)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the exploration randomness (0: from the clock)")
	fs.StringVar(&cfg.RoutingPolicy, "routing-policy", def.RoutingPolicy, "default routing policy of models whose catalog entry sets none: smart or routing-cost")
	fs.Float64Var(&cfg.RoutingCostMargin, "routing-cost-margin", def.RoutingCostMargin, "routing-cost policy: endpoints within this fraction of the lowest routing cost share the traffic fully")
	fs.Float64Var(&cfg.RoutingCostFloor, "routing-cost-floor", def.RoutingCostFloor, "routing-cost policy: the share of traffic every endpoint keeps (negative disables)")
	fs.DurationVar(&cfg.RoutingCostHalfLife, "routing-cost-half-life", def.RoutingCostHalfLife, "routing-cost policy: age at which a call weighs half in an endpoint's rates")
	fs.DurationVar(&cfg.RoutingCostLoadWindow, "routing-cost-load-window", def.RoutingCostLoadWindow, "routing-cost policy: time constant of the per-endpoint load that 429 caps are learned against")
	fs.StringVar(&cfg.CooldownRule, "cooldown-rule", def.CooldownRule, "rule that benches endpoints that refuse calls: breaker (3 refusals within 1m bench for 2m) or first-refusal (1 refusal benches for 15m); the three flags below override its parts")
	fs.DurationVar(&cfg.Cooldown, "cooldown", 0, "how long an endpoint that refused calls is not used (0: the rule's)")
	fs.IntVar(&cfg.CooldownErrors, "cooldown-errors", 0, "refusals within --cooldown-window that start a cool-down (0: the rule's)")
	fs.DurationVar(&cfg.CooldownWindow, "cooldown-window", 0, "window of --cooldown-errors (0: the rule's)")
	fs.DurationVar(&cfg.StatsSnapshotInterval, "stats-snapshot-interval", def.StatsSnapshotInterval, "how often routing statistics are saved to etcd")
	fs.DurationVar(&cfg.ExperimentMinBlock, "experiment-min-block", def.ExperimentMinBlock, "shortest block a switchback experiment may have")
	fs.DurationVar(&cfg.ExperimentSaveInterval, "experiment-save-interval", def.ExperimentSaveInterval, "how often this replica's experiment figures are saved to etcd")
	fs.Float64Var(&cfg.HedgeBudgetUSD, "hedge-budget-usd", def.HedgeBudgetUSD, "daily budget (USD, UTC day) for hedged second calls, shared by all edges; 0 disables hedging")
	fs.DurationVar(&cfg.HedgeBudgetBurst, "hedge-budget-burst", def.HedgeBudgetBurst, "pace the hedge budget over the UTC day: by time t of the day hedges may spend the budget's share of t plus this; 24h spends it as hedges come")
	fs.DurationVar(&cfg.HedgeDelay, "hedge-delay", def.HedgeDelay, "wait for a first token before hedging a 32k-128k streaming request")
	fs.DurationVar(&cfg.FastEnough, "fast-enough", def.FastEnough, "typical time to first token under which an endpoint is never too slow to route to")
	sticky := fs.Bool("sticky", !def.NoSticky, "keep a conversation's later turns on the endpoint holding its prompt cache (false: rank every turn afresh)")
	fs.IntVar(&cfg.BrokerStateBytes, "broker-state-bytes", def.BrokerStateBytes, "bytes the rate-limit broker's saved state may take, which bounds the reservations open at once (about 500 bytes each); an external etcd's --max-request-bytes must be at least this plus 496 KiB")
	fs.DurationVar(&cfg.QueueReattach, "queue-reattach", 0, "how long a queued request with an idempotency key keeps its place after its caller went away (a broken call, a failover), for the caller's retry; 0 removes it at once")
	fs.DurationVar(&cfg.StickyTTL, "sticky-ttl", def.StickyTTL, "how long a conversation stays with the endpoint of its last turn; each turn starts it again")
	fs.DurationVar(&cfg.StateTransferTimeout, "state-transfer-timeout", def.StateTransferTimeout, "how long a starting replica waits for a live one to hand it what it learned (affinity, conversations, outcomes, cool-downs) before it starts empty; negative: no transfer")
	fs.Int64Var(&cfg.HedgeFrom, "hedge-from-tokens", def.HedgeFrom, "prompt size from which streaming requests are hedged after --hedge-delay")
	fs.Int64Var(&cfg.HedgeImmediateFrom, "hedge-immediate-from-tokens", def.HedgeImmediateFrom, "prompt size from which both endpoints start at once")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "file holding this replica's bearer token (role replica), sent to the broker's owner; re-read when it changes")
	fs.DurationVar(&cfg.ActivityRetention, "activity-retention", def.ActivityRetention, "how long the activity log keeps calls")
	// Transport security.
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "PEM certificate chain to serve TLS with; also the client certificate for other replicas, so it needs serverAuth and clientAuth usages and the --peer-server-name (reloaded on change)")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file, in the same directory")
	fs.StringVar(&cfg.TLSClientCAFile, "tls-client-ca-file", "", "PEM CAs of client certificates: every caller must present one they signed (mutual TLS)")
	fs.StringVar(&cfg.TLSCAFile, "tls-ca-file", "", "PEM CAs of the other replicas' server certificates (default: --tls-client-ca-file, else the system's roots)")
	fs.StringVar(&cfg.PeerServerName, "peer-server-name", "", "name verified in another replica's certificate when forwarding to it by --advertise address (default: the first DNS name of --tls-cert-file's certificate)")
	fs.DurationVar(&cfg.TLSRefresh, "tls-refresh", def.TLSRefresh, "how often the TLS files are checked for a rotation")
	fs.StringVar(&cfg.HealthListen, "health-listen", "", "host:port of a plaintext listener serving only grpc.health.v1, for probes that cannot do TLS (default: none)")
	fs.StringVar(&cfg.AdminListen, "admin-listen", "", "host:port of the admin listener (plain HTTP: /metrics, /healthz, /readyz, the dashboard at /dashboard/); a port alone listens on loopback (default: none)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "also serve Go profiles (/debug/pprof/) on the admin listener")
	fs.StringVar(&cfg.DebugListen, "debug-listen", "", "deprecated: --admin-listen with --pprof")
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
	// A flag's 0 that turns a feature off says so to Start, which reads
	// zero as the default.
	cfg.NoDrainDelay = cfg.DrainDelay == 0
	cfg.NoProbes = cfg.ProbeInterval == 0
	cfg.NoHedging = cfg.HedgeBudgetUSD == 0
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
	if c.BrokerLeaseTerm < 0 || c.BrokerMaxLeaseTerm < 0 || (c.BrokerLeaseTerm > 0 && c.BrokerLeaseTerm < 200*time.Millisecond) ||
		(c.BrokerMaxLeaseTerm > 0 && c.BrokerLeaseTerm > c.BrokerMaxLeaseTerm) {
		errs = append(errs, fmt.Errorf("--broker-lease-term %v must be at least 200ms and at most --broker-max-lease-term %v", c.BrokerLeaseTerm, c.BrokerMaxLeaseTerm))
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
	if err := validate.Name("--region", c.Region); err != nil {
		errs = append(errs, err)
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
	if _, err := c.Admin(); err != nil {
		errs = append(errs, err)
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

// Admin is what the admin flags ask for: the admin listener's address
// (empty: none) and whether it serves the profiles.
func (c Config) Admin() (debugserver.Listener, error) {
	return debugserver.Resolve(c.AdminListen, c.DebugListen, c.Pprof)
}
