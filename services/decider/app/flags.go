package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/switchboard-ai/switchboard/pkg/flagenv"
)

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
