package app

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/debugserver"
	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	"github.com/switchboard-ai/switchboard/pkg/tlsfiles"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/probe"
	"github.com/switchboard-ai/switchboard/services/decider/internal/transfer"
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

// cooldownOptions is the cool-down rule: the named rule with the parts
// the flags set over it.
func (c Config) cooldownOptions() cooldown.Options {
	return cooldown.Options{Duration: c.Cooldown, Errors: c.CooldownErrors, Window: c.CooldownWindow}.Over(cooldown.Rules[c.CooldownRule])
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

// Admin is what the admin flags ask for: the admin listener's address
// (empty: none) and whether it serves the profiles.
func (c Config) Admin() (debugserver.Listener, error) {
	return debugserver.Resolve(c.AdminListen, c.DebugListen, c.Pprof)
}
