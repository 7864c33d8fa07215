package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/debugserver"
	"github.com/switchboard-ai/switchboard/pkg/flagenv"
	"github.com/switchboard-ai/switchboard/pkg/offline"
	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/credentials"
	"github.com/switchboard-ai/switchboard/services/edge/internal/standby"
)

// Defaults of Config.
const (
	DefaultListen              = "127.0.0.1:8080"
	DefaultDecider             = "127.0.0.1:9090"
	DefaultRegion              = "local"
	DefaultMaxBodyBytes        = 32 << 20
	DefaultFirstTokenTimeout   = 60 * time.Second
	DefaultIdleTimeout         = 60 * time.Second
	DefaultMaxAttempts         = 4
	DefaultRetryWait           = 10 * time.Second
	DefaultReportFlushInterval = 200 * time.Millisecond
	DefaultLogFlushInterval    = 100 * time.Millisecond
	DefaultHedgeAcquireTimeout = 200 * time.Millisecond
	DefaultReservationTTL      = 2 * time.Minute
	DefaultReserveTimeout      = 300 * time.Millisecond
	// DefaultShutdownGrace lets streams in flight finish at shutdown. LLM
	// answers are long: 8k output tokens at 30-50 tokens/s take 3-5
	// minutes, after up to a minute to the first token; 5 minutes drains
	// nearly all of them, and a rollout waits no longer than that per pod.
	DefaultShutdownGrace = 5 * time.Minute
	// DefaultBodyReadTimeout bounds reading a request body: a 32 MiB prompt
	// arrives in seconds on any working link, while a client trickling its
	// body holds a connection and memory for nothing.
	DefaultBodyReadTimeout = 30 * time.Second
	// DefaultMaxUnverifiedBodies caps bodies read at once for API keys the
	// edge has not yet seen accepted, so unauthenticated clients cannot tie
	// up the edge's connections and memory with slow or large bodies.
	DefaultMaxUnverifiedBodies = 64
	// DefaultWriteTimeout bounds one write to a client: a client that stops
	// reading is cut after it, and its call is recorded as the client's
	// doing, not the provider's.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultMaxQueueWait is the longest wait of the default batch workload
	// class, so that by default the edge never cuts a class's wait short.
	DefaultMaxQueueWait = 30 * time.Minute
	// DefaultDeciderKeepalive is how often the edge pings the decider's
	// connection while calls are open, and how long it waits for the
	// answer: a decider that stopped answering (paused, cut off) fails the
	// calls waiting on it within twice this, not at their own deadline,
	// which for a request waiting in a queue may be many minutes away. The
	// decider accepts pings every 5 s.
	DefaultDeciderKeepalive = 10 * time.Second
	// DefaultOfflineGrace is how long the edge serves from the decider's
	// last answers once no decider can be reached: none. Offline serving
	// admits by local shares the broker does not see, so it is the
	// operator's choice (a minute rides out a decider's restart or a
	// leader election); by default the edge fails closed and no limit is
	// ever passed.
	DefaultOfflineGrace = 0
	// DefaultOfflineClasses are the workload classes served offline, each
	// with the requests per minute one tenant of it may make across the
	// fleet then. Partner traffic, billed against partners' spend limits,
	// fails closed.
	DefaultOfflineClasses = "interactive=60,background=60,batch=60"
	// DefaultOfflineEndpointRPM is the requests per minute one endpoint is
	// sent across the fleet while offline.
	DefaultOfflineEndpointRPM = 600
)

// maxAttemptsLimit bounds MaxAttempts: each attempt before the first token
// may wait FirstTokenTimeout, so a large value would let one request hold a
// client for many minutes.
const maxAttemptsLimit = 16

var providerKeyPrefix = regexp.MustCompile(`^[A-Z][A-Z0-9_]*_$`)

// envPrefix prefixes the environment variable of every flag:
// --first-token-timeout falls back to SWITCHBOARD_EDGE_FIRST_TOKEN_TIMEOUT.
const envPrefix = "SWITCHBOARD_EDGE_"

// Config is the edge's whole configuration. Start fills zero fields with
// their defaults, so a test can set only what it needs.
type Config struct {
	// Listen is the host:port the HTTP API listens on; port 0 picks a free
	// port (Optional). Defaults to "127.0.0.1:8080". Flag --listen.
	Listen string
	// Decider names the decider replicas (Optional): a host:port, a
	// comma-separated list of them, or a gRPC target resolved to every
	// replica, such as dns:///decider.ns.svc:9090 for a Kubernetes headless
	// Service. The edge spreads its calls over the replicas that are ready
	// and moves its Report stream to one when its own goes. Defaults to
	// "127.0.0.1:9090". Flag --decider.
	Decider string
	// DeciderTokenFile holds the edge's bearer token for the decider (a
	// caller of role edge in the catalog), re-read when it changes
	// (Optional). Flag --decider-token-file.
	DeciderTokenFile string
	// Region is this edge's region, sent with every Decide and in the Report
	// hello (Optional). Defaults to "local". Flag --region.
	Region string
	// EdgeID identifies this edge on the Report stream (Optional). Defaults
	// to "<hostname>-<pid>", unique per process. Flag --edge-id.
	EdgeID string
	// MaxBodyBytes bounds a request body; larger ones get 413 (Optional).
	// Defaults to 32 MiB. Flag --max-body-bytes.
	MaxBodyBytes int64
	// FirstTokenTimeout is how long one attempt may wait for its first token
	// before it counts as a timeout and the next endpoint is tried
	// (Optional). Defaults to 60s. Flag --first-token-timeout.
	FirstTokenTimeout time.Duration
	// IdleTimeout is the longest silence between stream chunks once an answer
	// started (Optional). Defaults to 60s. Flag --stream-idle-timeout.
	IdleTimeout time.Duration
	// MaxAttempts caps the endpoints tried per request, the chosen one plus
	// fallbacks (Optional). Defaults to 4. Flag --max-attempts.
	MaxAttempts int
	// RetryWait is the longest a request waits for an endpoint's pause
	// (the provider's Retry-After, or the back-off) to end to try it again,
	// once every endpoint it may use failed or was refused (Optional).
	// Defaults to 10s; negative never waits. Flag --retry-wait.
	RetryWait time.Duration
	// ReportFlushInterval is the longest a call report waits before it is
	// sent to the decider (Optional). Defaults to 200ms.
	// Flag --report-flush-interval.
	ReportFlushInterval time.Duration
	// HedgeAcquireTimeout bounds the AcquireHedge call made before a hedge
	// starts; a slower decider counts as a refusal, since a hedge exists to
	// save time (Optional). Defaults to 200ms. Flag --hedge-acquire-timeout.
	HedgeAcquireTimeout time.Duration
	// ReservationTTL is how long a rate-limit reservation lives if it is
	// never reconciled, sent with every Decide and Reserve: how soon the
	// capacity of an edge that died comes back. A call that runs longer
	// keeps its reservation, which the edge declares to the decider every
	// ReservationHeartbeat (Optional). Defaults to 2m.
	// Flag --reservation-ttl.
	ReservationTTL time.Duration
	// ReservationHeartbeat is how often the edge declares the reservations
	// of its calls in flight, so the broker keeps them open while they run;
	// it must be well below ReservationTTL (Optional). Defaults to a third
	// of ReservationTTL. Flag --reservation-heartbeat.
	ReservationHeartbeat time.Duration
	// ReserveTimeout bounds the Reserve call made before a fallback or a
	// hedge leg is sent; a slower broker counts as an error and that
	// endpoint is skipped (Optional). Defaults to 300ms.
	// Flag --reserve-timeout.
	ReserveTimeout time.Duration
	// DrainDelay is how long Close keeps serving with /readyz answering 503
	// before it stops accepting connections, so load balancers (a Kubernetes
	// Service, whose endpoint removal is asynchronous) stop routing here
	// before the listener goes away (Optional). Defaults to 0, stopping at
	// once; set a few seconds in production. Flag --drain-delay.
	DrainDelay time.Duration
	// ShutdownGrace is how long Close lets requests in flight (long streams
	// included) finish after the drain delay before it cuts them
	// (Optional). Defaults to 5m. Flag --shutdown-grace.
	ShutdownGrace time.Duration
	// BodyReadTimeout bounds reading one request body; a slower client gets
	// 408 and its connection is closed (Optional). Defaults to 30s.
	// Flag --body-read-timeout.
	BodyReadTimeout time.Duration
	// MaxUnverifiedBodies caps the request bodies read at once for API keys
	// not yet seen accepted by the decider; beyond it such requests get 503
	// without their body being read (Optional). Defaults to 64.
	// Flag --max-unverified-bodies.
	MaxUnverifiedBodies int
	// WriteTimeout bounds each write of an answer to the client; a client
	// that does not take the bytes within it is cut off and the call is
	// recorded as cancelled by the client (Optional). Defaults to 30s.
	// Flag --write-timeout.
	WriteTimeout time.Duration
	// MaxQueueWait is the longest a chat request may wait in its workload
	// class's admission queue: the Decide that reserves may take this much
	// longer than its usual bound. The decider ends a wait at the class's
	// max_wait, so this only caps the catalog's waits on this edge
	// (Optional). Defaults to 30m, the default batch class's wait.
	// Flag --max-queue-wait.
	MaxQueueWait time.Duration
	// DeciderKeepalive is the interval of the edge's pings on its
	// connections to the decider and how long it waits for each answer
	// before it drops the connection and fails the calls on it (Optional).
	// Defaults to 10s; at least 5s, the most often the decider accepts
	// pings. Flag --decider-keepalive.
	DeciderKeepalive time.Duration
	// AdminListen is the host:port of the admin listener: plain HTTP,
	// separate from the API port and without authentication, serving
	// /metrics, /healthz and /readyz (the API port's answers); a port alone
	// listens on loopback. Empty: none.
	// Flag --admin-listen.
	AdminListen string
	// Pprof also serves Go profiles (net/http/pprof under /debug/pprof/) on
	// the admin listener. Flag --pprof.
	Pprof bool
	// DebugListen is the former name of AdminListen, with Pprof: what it
	// served before. Flag --debug-listen (deprecated).
	DebugListen string
	// LogLevel is the minimum level logged by Run (Optional). Defaults to
	// info. Flag --log-level.
	LogLevel slog.Level
	// LogFlushInterval is how long Run holds log lines before writing them
	// out together (64 KiB pending are written at once): a line per request
	// costs a write system call per line otherwise (Optional). 0 writes each
	// line at once. ParseFlags defaults it to DefaultLogFlushInterval. Flag
	// --log-flush-interval.
	LogFlushInterval time.Duration
	// DeciderCAFile holds the CAs of the decider's server certificate, PEM:
	// with it (or any other DeciderCert/Key/ServerName) the edge connects to
	// the decider over TLS (Optional). Empty with TLS on trusts the system's
	// roots. Flag --decider-ca-file.
	DeciderCAFile string
	// DeciderCertFile and DeciderKeyFile are the edge's client certificate
	// and key, PEM, for a decider that requires one (mutual TLS); reloaded
	// when they change (Optional). Flags --decider-cert-file,
	// --decider-key-file.
	DeciderCertFile, DeciderKeyFile string
	// DeciderServerName is the name the decider's certificate must carry
	// (Optional). Defaults to the host of Decider, of each address when it
	// lists several. Flag --decider-server-name.
	DeciderServerName string
	// DeciderPlaintext connects to a non-loopback decider without TLS, which
	// must be chosen explicitly; a loopback decider may be plaintext without
	// it (Optional). Flag --decider-plaintext.
	DeciderPlaintext bool
	// Getenv reads provider credentials by the names the decider gives
	// (api_key_env), only names with ProviderKeyPrefix (Optional). Defaults
	// to os.Getenv; tests inject their own.
	Getenv func(string) string
	// Tracing is where the edge's spans go: its HTTP requests', its calls
	// to the decider's and every provider call's (Optional). Defaults to the
	// process's global tracing (telemetry.Setup: spans only with an OTLP
	// exporter); tests give an in-memory recorder.
	Tracing *telemetry.Tracing
	// ProviderKeyPrefix is what every provider credential's name starts
	// with; a name without it is never read, whoever asks (Optional).
	// Defaults to SWITCHBOARD_PROVIDER_KEY_. Flag --provider-key-prefix.
	ProviderKeyPrefix string
	// ProviderKeyDir is a directory of provider credentials, one file per
	// credential named as the credential (a mounted Kubernetes Secret); a
	// file wins over an environment variable of the same name, and files
	// are re-read every ProviderKeyReload (Optional). Defaults to none.
	// Flag --provider-key-dir.
	ProviderKeyDir string
	// ProviderKeyHosts pins credentials to the hosts they may be sent to,
	// "NAME=host[,host...][;NAME=host...]"; a pinned credential is never
	// sent to any other host. A file <NAME>.hosts in ProviderKeyDir pins
	// too (Optional). Defaults to none. Flag --provider-key-hosts.
	ProviderKeyHosts string
	// ProviderKeyReload is how often ProviderKeyDir is re-read (Optional).
	// Defaults to 10s. Flag --provider-key-reload.
	ProviderKeyReload time.Duration
	// OfflineGrace is how long after the decider's last answer for a kind of
	// request the edge still serves that kind by it when no decider can be
	// reached (Optional). Defaults to 1m; negative turns it off (the flag's
	// 0), so every request fails closed with 503 as the decider is lost. At
	// most 1h. Flag --offline-grace.
	OfflineGrace time.Duration
	// OfflineClasses are the workload classes served offline,
	// "class=rpm[,class=rpm...]": each with the requests per minute one
	// tenant of it may make across the fleet while offline, shared by
	// OfflineShare edges. A class not listed fails closed (Optional).
	// Defaults to DefaultOfflineClasses; "none" lists none. Flag
	// --offline-classes.
	OfflineClasses string
	// OfflineEndpointRPM is the requests per minute one endpoint is sent
	// across the fleet while offline, shared by OfflineShare edges
	// (Optional). Defaults to 600. Flag --offline-endpoint-rpm.
	OfflineEndpointRPM float64
	// OfflineShare is how many edges share the offline limits: each edge
	// admits its 1/OfflineShare of them (Optional). Defaults to 1. Flag
	// --offline-share.
	OfflineShare int
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Decider == "" {
		c.Decider = DefaultDecider
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.EdgeID == "" {
		c.EdgeID = defaultEdgeID()
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.FirstTokenTimeout == 0 {
		c.FirstTokenTimeout = DefaultFirstTokenTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.RetryWait == 0 {
		c.RetryWait = DefaultRetryWait
	}
	if c.ReportFlushInterval == 0 {
		c.ReportFlushInterval = DefaultReportFlushInterval
	}
	if c.HedgeAcquireTimeout == 0 {
		c.HedgeAcquireTimeout = DefaultHedgeAcquireTimeout
	}
	if c.ReservationTTL == 0 {
		c.ReservationTTL = DefaultReservationTTL
	}
	if c.ReservationHeartbeat == 0 {
		c.ReservationHeartbeat = c.ReservationTTL / 3
	}
	if c.ReserveTimeout == 0 {
		c.ReserveTimeout = DefaultReserveTimeout
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.BodyReadTimeout == 0 {
		c.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if c.MaxUnverifiedBodies == 0 {
		c.MaxUnverifiedBodies = DefaultMaxUnverifiedBodies
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.MaxQueueWait == 0 {
		c.MaxQueueWait = DefaultMaxQueueWait
	}
	if c.DeciderKeepalive == 0 {
		c.DeciderKeepalive = DefaultDeciderKeepalive
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if c.ProviderKeyPrefix == "" {
		c.ProviderKeyPrefix = catalog.ProviderKeyPrefix
	}
	if c.ProviderKeyReload == 0 {
		c.ProviderKeyReload = credentials.DefaultReload
	}
	if c.OfflineGrace == 0 {
		c.OfflineGrace = DefaultOfflineGrace
	}
	if c.OfflineClasses == "" {
		c.OfflineClasses = DefaultOfflineClasses
	}
	if c.OfflineEndpointRPM == 0 {
		c.OfflineEndpointRPM = DefaultOfflineEndpointRPM
	}
	if c.OfflineShare == 0 {
		c.OfflineShare = 1
	}
	return c
}

func defaultEdgeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "edge"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// validate returns every problem at once, so an operator fixes them in one go.
func (c Config) validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: %w", c.Listen, err))
	}
	if _, err := parseDeciders(c.Decider); err != nil {
		errs = append(errs, fmt.Errorf("--decider: %w", err))
	}
	if strings.TrimSpace(c.Region) == "" {
		errs = append(errs, errors.New("--region: required"))
	}
	if strings.TrimSpace(c.EdgeID) == "" {
		errs = append(errs, errors.New("--edge-id: required"))
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("--max-body-bytes %d: must be positive", c.MaxBodyBytes))
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > maxAttemptsLimit {
		errs = append(errs, fmt.Errorf("--max-attempts %d: must be between 1 and %d", c.MaxAttempts, maxAttemptsLimit))
	}
	if c.ReservationTTL > 0 && (c.ReservationHeartbeat <= 0 || c.ReservationHeartbeat >= c.ReservationTTL) {
		errs = append(errs, fmt.Errorf("--reservation-heartbeat %s: must be positive and below --reservation-ttl", c.ReservationHeartbeat))
	}
	if c.DrainDelay < 0 {
		errs = append(errs, fmt.Errorf("--drain-delay %s: must not be negative", c.DrainDelay))
	}
	if (c.DeciderCertFile == "") != (c.DeciderKeyFile == "") {
		errs = append(errs, errors.New("--decider-cert-file and --decider-key-file go together"))
	}
	if c.DeciderPlaintext && c.deciderTLS() {
		errs = append(errs, errors.New("--decider-plaintext and the --decider-*-file and --decider-server-name flags exclude each other"))
	}
	if _, err := c.Admin(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxUnverifiedBodies < 1 {
		errs = append(errs, fmt.Errorf("--max-unverified-bodies %d: must be at least 1", c.MaxUnverifiedBodies))
	}
	if !providerKeyPrefix.MatchString(c.ProviderKeyPrefix) {
		errs = append(errs, fmt.Errorf("--provider-key-prefix %q: must be upper-case letters, digits or _, ending in _", c.ProviderKeyPrefix))
	}
	if _, err := credentials.ParsePins(c.ProviderKeyHosts); err != nil {
		errs = append(errs, fmt.Errorf("--provider-key-hosts: %w", err))
	}
	if c.OfflineGrace > offline.MaxGrace {
		errs = append(errs, fmt.Errorf("--offline-grace %s: at most %s", c.OfflineGrace, offline.MaxGrace))
	}
	if _, err := parseOfflineClasses(c.OfflineClasses); err != nil {
		errs = append(errs, fmt.Errorf("--offline-classes: %w", err))
	}
	if c.OfflineEndpointRPM < 0 || math.IsNaN(c.OfflineEndpointRPM) || math.IsInf(c.OfflineEndpointRPM, 0) {
		errs = append(errs, fmt.Errorf("--offline-endpoint-rpm %g: must be a positive number", c.OfflineEndpointRPM))
	}
	if c.OfflineShare < 1 {
		errs = append(errs, fmt.Errorf("--offline-share %d: must be at least 1", c.OfflineShare))
	}
	// Every duration that must be positive.
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--first-token-timeout", c.FirstTokenTimeout},
		{"--stream-idle-timeout", c.IdleTimeout},
		{"--report-flush-interval", c.ReportFlushInterval},
		{"--hedge-acquire-timeout", c.HedgeAcquireTimeout},
		{"--reservation-ttl", c.ReservationTTL},
		{"--reserve-timeout", c.ReserveTimeout},
		{"--shutdown-grace", c.ShutdownGrace},
		{"--body-read-timeout", c.BodyReadTimeout},
		{"--write-timeout", c.WriteTimeout},
		{"--max-queue-wait", c.MaxQueueWait},
		{"--decider-keepalive", c.DeciderKeepalive},
		{"--provider-key-reload", c.ProviderKeyReload},
	} {
		if d.value <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: must be positive", d.flag, d.value))
		}
	}
	if c.DeciderKeepalive > 0 && c.DeciderKeepalive < 5*time.Second {
		errs = append(errs, fmt.Errorf("--decider-keepalive %s: at least 5s, the most often the decider accepts pings", c.DeciderKeepalive))
	}
	return errors.Join(errs...)
}

// deciderTLS reports whether the decider connection uses TLS.
func (c Config) deciderTLS() bool {
	return c.DeciderCAFile != "" || c.DeciderCertFile != "" || c.DeciderKeyFile != "" || c.DeciderServerName != ""
}

// checkPlaintext refuses, at start, a plaintext connection to a decider on
// another machine unless it was chosen explicitly.
func (c Config) checkPlaintext() error {
	if d, err := parseDeciders(c.Decider); err != nil || c.DeciderPlaintext || c.deciderTLS() || d.loopback() {
		return nil // a malformed --decider is validate's to report
	}
	return fmt.Errorf("--decider %s names a decider off this machine (not loopback): connect with TLS (--decider-ca-file, and "+
		"--decider-cert-file with --decider-key-file for mutual TLS) or choose plaintext explicitly with --decider-plaintext", c.Decider)
}

// ParseFlags parses the command line into a Config. Every flag falls back to
// the environment variable SWITCHBOARD_EDGE_<FLAG NAME> (e.g.
// SWITCHBOARD_EDGE_LISTEN), then to its default; a flag on the command line
// wins over the environment. All problems are returned together. getenv
// also becomes Config.Getenv (os.Getenv when nil).
func ParseFlags(args []string, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	cfg := Config{}.withDefaults()
	cfg.LogFlushInterval = DefaultLogFlushInterval
	cfg.Getenv = getenv
	fs := newFlagSet(&cfg)
	err := flagenv.Parse(fs, strings.TrimSuffix(envPrefix, "_"), args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return Config{}, err
	}
	if cfg.OfflineGrace == 0 {
		cfg.OfflineGrace = -1 // --offline-grace=0: off
	}
	if cfg.ReservationHeartbeat == 0 && cfg.ReservationTTL > 0 {
		cfg.ReservationHeartbeat = cfg.ReservationTTL / 3 // from the TTL given
	}
	if err := errors.Join(err, cfg.validate()); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// newFlagSet binds the flags to cfg; flagenv seeds them from the environment.
func newFlagSet(cfg *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "host:port of the HTTP API")
	fs.StringVar(&cfg.Decider, "decider", cfg.Decider, "the decider replicas: host:port, a comma-separated list of them, or a gRPC target resolved to every replica (dns:///decider.ns.svc:9090, a headless Service); calls go to the ready ones")
	fs.StringVar(&cfg.DeciderTokenFile, "decider-token-file", cfg.DeciderTokenFile, "file holding the edge's bearer token for the decider; re-read when it changes")
	fs.StringVar(&cfg.Region, "region", cfg.Region, "region of this edge")
	fs.StringVar(&cfg.EdgeID, "edge-id", cfg.EdgeID, "unique id of this edge (default hostname-pid)")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", cfg.MaxBodyBytes, "largest accepted request body, in bytes")
	fs.DurationVar(&cfg.FirstTokenTimeout, "first-token-timeout", cfg.FirstTokenTimeout, "per attempt: no first token by then tries the next endpoint")
	fs.DurationVar(&cfg.IdleTimeout, "stream-idle-timeout", cfg.IdleTimeout, "longest silence between stream chunks")
	fs.IntVar(&cfg.MaxAttempts, "max-attempts", cfg.MaxAttempts, "endpoints tried per request (chosen plus fallbacks)")
	fs.DurationVar(&cfg.RetryWait, "retry-wait", cfg.RetryWait, "longest a request waits for a paused endpoint to come back to retry it (negative: never)")
	fs.DurationVar(&cfg.ReportFlushInterval, "report-flush-interval", cfg.ReportFlushInterval, "longest a call report waits before it is sent")
	fs.DurationVar(&cfg.HedgeAcquireTimeout, "hedge-acquire-timeout", cfg.HedgeAcquireTimeout, "longest wait for the decider's hedge budget before going without a hedge")
	fs.DurationVar(&cfg.ReservationTTL, "reservation-ttl", cfg.ReservationTTL, "how long a rate-limit reservation lives if never reconciled (calls in flight keep theirs)")
	fs.DurationVar(&cfg.ReservationHeartbeat, "reservation-heartbeat", 0, "how often the reservations of calls in flight are declared to the decider (default a third of --reservation-ttl)")
	fs.DurationVar(&cfg.ReserveTimeout, "reserve-timeout", cfg.ReserveTimeout, "longest wait for a reservation before a fallback or hedge leg; slower skips that endpoint")
	fs.DurationVar(&cfg.DrainDelay, "drain-delay", cfg.DrainDelay, "at shutdown, how long /readyz answers 503 before the listener closes")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", cfg.ShutdownGrace, "at shutdown, how long requests in flight (streams) may take to finish after the drain delay")
	fs.DurationVar(&cfg.BodyReadTimeout, "body-read-timeout", cfg.BodyReadTimeout, "longest time to read one request body (408 beyond)")
	fs.IntVar(&cfg.MaxUnverifiedBodies, "max-unverified-bodies", cfg.MaxUnverifiedBodies, "request bodies read at once for API keys not yet seen accepted (503 beyond)")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "longest time one write to a client may take before the client is cut off")
	fs.DurationVar(&cfg.DeciderKeepalive, "decider-keepalive", cfg.DeciderKeepalive, "interval of the pings on the connections to the decider, and the wait for each answer: a decider that stops answering fails the calls waiting on it within twice this (at least 5s)")
	fs.DurationVar(&cfg.MaxQueueWait, "max-queue-wait", cfg.MaxQueueWait, "longest a request may wait in its workload class's admission queue (the class's max_wait ends it sooner)")
	fs.StringVar(&cfg.ProviderKeyPrefix, "provider-key-prefix", cfg.ProviderKeyPrefix,
		"provider credentials are the environment variables and --provider-key-dir files named with this prefix; no other name is ever read")
	fs.StringVar(&cfg.ProviderKeyDir, "provider-key-dir", cfg.ProviderKeyDir,
		"directory of provider credentials, one file per credential named as it (a mounted Secret); a file wins over the environment variable of the same name, and changed files are picked up without a restart")
	fs.StringVar(&cfg.ProviderKeyHosts, "provider-key-hosts", cfg.ProviderKeyHosts,
		"pins credentials to the hosts they may be sent to, NAME=host[,host...][;NAME=...] (host alone: any port); <NAME>.hosts files in --provider-key-dir pin too")
	fs.DurationVar(&cfg.ProviderKeyReload, "provider-key-reload", cfg.ProviderKeyReload, "how often --provider-key-dir is checked for changed files")
	fs.StringVar(&cfg.AdminListen, "admin-listen", cfg.AdminListen, "host:port of the admin listener (plain HTTP: /metrics, /healthz, /readyz); a port alone listens on loopback (default: none)")
	fs.BoolVar(&cfg.Pprof, "pprof", cfg.Pprof, "also serve Go profiles (/debug/pprof/) on the admin listener")
	fs.StringVar(&cfg.DebugListen, "debug-listen", cfg.DebugListen, "deprecated: --admin-listen with --pprof")
	fs.DurationVar(&cfg.OfflineGrace, "offline-grace", cfg.OfflineGrace, "with no decider reachable, how long after the decider's last answer for a kind of request the edge still serves that kind by it (0: never, fail closed; at most 1h)")
	fs.StringVar(&cfg.OfflineClasses, "offline-classes", cfg.OfflineClasses, "workload classes served offline, class=rpm,...: each with the requests per minute one tenant of it may make across the fleet then; others fail closed (none: every class)")
	fs.Float64Var(&cfg.OfflineEndpointRPM, "offline-endpoint-rpm", cfg.OfflineEndpointRPM, "requests per minute one endpoint is sent across the fleet while offline")
	fs.IntVar(&cfg.OfflineShare, "offline-share", cfg.OfflineShare, "how many edges share the offline limits; each admits its 1/N of them")
	fs.TextVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "minimum log level (debug, info, warn, error)")
	fs.DurationVar(&cfg.LogFlushInterval, "log-flush-interval", cfg.LogFlushInterval, "longest a log line is held to be written with others (0: each at once)")
	// Transport security of the decider connection.
	fs.StringVar(&cfg.DeciderCAFile, "decider-ca-file", cfg.DeciderCAFile, "PEM CAs of the decider's server certificate; any --decider-* TLS flag turns TLS on (empty: the system's roots)")
	fs.StringVar(&cfg.DeciderCertFile, "decider-cert-file", cfg.DeciderCertFile, "PEM client certificate for a decider that requires one (mutual TLS), reloaded on change")
	fs.StringVar(&cfg.DeciderKeyFile, "decider-key-file", cfg.DeciderKeyFile, "PEM private key of --decider-cert-file, in the same directory")
	fs.StringVar(&cfg.DeciderServerName, "decider-server-name", cfg.DeciderServerName, "name the decider's certificate must carry (default: the host of --decider)")
	fs.BoolVar(&cfg.DeciderPlaintext, "decider-plaintext", cfg.DeciderPlaintext, "connect to a non-loopback --decider without TLS (a loopback one may always be plaintext)")
	return fs
}

// usage writes the flag documentation.
func usage(w io.Writer) {
	cfg := Config{}.withDefaults()
	fs := newFlagSet(&cfg)
	fs.SetOutput(w)
	fmt.Fprintf(w, "Usage: edge [flags]\n       edge --version\n\nEvery flag falls back to %s<FLAG> (dashes as underscores, upper case).\n\n", envPrefix)
	fs.PrintDefaults()
}

// Admin is what the admin flags ask for: the admin listener's address
// (empty: none) and whether it serves the profiles.
func (c Config) Admin() (debugserver.Listener, error) {
	return debugserver.Resolve(c.AdminListen, c.DebugListen, c.Pprof)
}

// parseOfflineClasses reads --offline-classes: "none", or class=rpm pairs
// naming each workload class at most once, with a finite rpm of at least 0.
func parseOfflineClasses(v string) (map[switchboardv1.WorkloadClass]float64, error) {
	out := map[switchboardv1.WorkloadClass]float64{}
	if strings.TrimSpace(v) == "none" {
		return out, nil
	}
	byName := map[string]switchboardv1.WorkloadClass{}
	for n := range switchboardv1.WorkloadClass_name {
		if cls := switchboardv1.WorkloadClass(n); cls != switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED {
			byName[switchboardv1.EnumName(cls)] = cls
		}
	}
	for part := range strings.SplitSeq(v, ",") {
		name, rate, ok := strings.Cut(strings.TrimSpace(part), "=")
		cls, known := byName[name]
		if !ok || !known {
			return nil, fmt.Errorf("%q: want class=requests_per_minute with a class of interactive, background, partner, batch", part)
		}
		rpm, err := strconv.ParseFloat(rate, 64)
		if err != nil || rpm < 0 || math.IsInf(rpm, 0) || math.IsNaN(rpm) {
			return nil, fmt.Errorf("%q: the requests per minute must be a number of at least 0", part)
		}
		if _, dup := out[cls]; dup {
			return nil, fmt.Errorf("%q: class %s listed twice", part, name)
		}
		out[cls] = rpm
	}
	return out, nil
}

// standby is what the edge serves with when no decider can be reached,
// as the offline flags configure it (validate checked them).
func (c Config) standby() *standby.Standby {
	classes, _ := parseOfflineClasses(c.OfflineClasses)
	return standby.New(standby.Options{Grace: max(c.OfflineGrace, 0), Share: c.OfflineShare, Classes: classes,
		EndpointRPM: c.OfflineEndpointRPM})
}
