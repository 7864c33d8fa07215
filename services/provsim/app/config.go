package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

// Config is the whole simulator configuration (one process may serve several
// providers).
type Config struct {
	// Providers are the simulated upstreams (Required, at least one).
	Providers []ProviderConfig `yaml:"providers" json:"providers"`
	// Seed seeds the random draws of jitter and faults (Optional). Defaults to
	// 0: runs are reproducible unless asked otherwise.
	Seed int64 `yaml:"seed" json:"seed"`
	// TimeScale multiplies every delay the simulator produces — time to first
	// token, the gap between output tokens, the Retry-After it sends — so a
	// scenario measured in seconds can be replayed in a fraction of the time
	// (Optional, above 0). Defaults to 1. Quota windows and cache lifetimes
	// are not scaled.
	TimeScale float64 `yaml:"time_scale" json:"time_scale"`
}

// ProviderConfig is one simulated provider: one listener, one API key, its
// own models, caches, quotas and counters.
type ProviderConfig struct {
	// Name identifies the provider in logs and Sim.Provider (Required, unique).
	Name string `yaml:"name" json:"name"`
	// Listen is the host:port to listen on; port 0 picks a free port (Required).
	Listen string `yaml:"listen" json:"listen"`
	// APIKey, when set, is required as "Authorization: Bearer <key>" on /v1
	// endpoints (Optional). Defaults to no authentication.
	APIKey string `yaml:"api_key" json:"api_key"`
	// Models are the models the provider serves (Required, at least one).
	Models []ModelConfig `yaml:"models" json:"models"`
}

// ModelConfig is the behaviour of one model at one provider. Zero values pick
// the documented defaults, so a runtime update can send only what it changes
// from zero.
type ModelConfig struct {
	// ID is the model name clients send (Required, unique per provider).
	ID string `yaml:"id" json:"id"`
	// TTFT is the delay before the first byte of a reply (Optional). Defaults to none.
	TTFT TTFTConfig `yaml:"ttft" json:"ttft"`
	// TokensPerSecond is the output speed after the first token (Optional).
	// Defaults to 0, as fast as possible.
	TokensPerSecond float64 `yaml:"tokens_per_second" json:"tokens_per_second"`
	// DefaultOutputTokens is the reply length when the request sets no max
	// tokens (Optional). Defaults to 16.
	DefaultOutputTokens int64 `yaml:"default_output_tokens" json:"default_output_tokens"`
	// MaxOutputTokens caps the reply length (Optional). Defaults to 0, no cap.
	MaxOutputTokens int64 `yaml:"max_output_tokens" json:"max_output_tokens"`
	// Cache simulates automatic prompt-prefix caching (Optional). Defaults to off.
	Cache CacheConfig `yaml:"cache" json:"cache"`
	// Faults are injected at random by rate, or on demand by directive (Optional).
	Faults []FaultConfig `yaml:"faults" json:"faults"`
	// Limits are the provider's per-minute quotas for this model (Optional).
	// Defaults to unlimited.
	Limits LimitsConfig `yaml:"limits" json:"limits"`
	// Refusals are scripted error answers to requests whose messages
	// contain a marker, checked after the quotas and before the faults, the
	// first match winning (Optional). Defaults to none. A marker configured
	// on every provider makes a request that every provider refuses, as a
	// content filter or an input that crashes the model would.
	Refusals []RefusalConfig `yaml:"refusals" json:"refusals,omitempty"`
	// Capacity is the load above which the provider's servers answer 429,
	// the rule of the routing simulation's providers (Optional). Defaults to
	// unlimited.
	Capacity CapacityConfig `yaml:"capacity" json:"capacity"`
}

// CapacityConfig is a provider's capacity as the routing simulation models
// it (services/decider/internal/sim, Capacity): over a sliding minute of the
// simulator's scaled clock, a call that would make more than
// RequestsPerMinute admitted calls, or more than TokensPerMinute admitted
// prompt tokens, is answered 429 at once with a fixed Retry-After and is not
// counted. Unlike Limits it is not a quota the provider announces: no
// x-ratelimit-* headers are sent, so a gateway learns it only from the 429s.
type CapacityConfig struct {
	// RequestsPerMinute caps admitted calls per sliding minute (Optional). 0 means unlimited.
	RequestsPerMinute int64 `yaml:"requests_per_minute" json:"requests_per_minute"`
	// TokensPerMinute caps admitted prompt tokens per sliding minute (Optional). 0 means unlimited.
	TokensPerMinute int64 `yaml:"tokens_per_minute" json:"tokens_per_minute"`
	// RetryAfter is sent with each 429, times the time scale (Optional). Defaults to 30s.
	RetryAfter Duration `yaml:"retry_after" json:"retry_after"`
}

// RefusalConfig is one scripted refusal: an error answer, in OpenAI's error
// format, to every request one of whose messages contains Match.
type RefusalConfig struct {
	// Match is the text a message must contain, compared as is (Required).
	Match string `yaml:"match" json:"match"`
	// Status is the HTTP status answered, 400 to 599 (Required).
	Status int `yaml:"status" json:"status"`
	// Type is the error's type (Optional). Defaults to
	// "invalid_request_error" for a 4xx and "server_error" for a 5xx.
	Type string `yaml:"type" json:"type"`
	// Code is the error's code (Optional). Defaults to none.
	Code string `yaml:"code" json:"code"`
	// Message is the error's message (Optional). Defaults to
	// "request refused (simulated)".
	Message string `yaml:"message" json:"message"`
}

// maxRefusals bounds a model's scripted refusals: each is matched against
// every message of every request.
const maxRefusals = 32

// TTFTConfig is a time-to-first-token curve: a base delay plus a cost per 1k
// uncached and per 1k cached prompt tokens, which is how prefill time grows
// with prompt size at real providers (cached tokens skip most of the work).
type TTFTConfig struct {
	// Base is the delay of an empty prompt (Optional).
	Base Duration `yaml:"base" json:"base"`
	// Per1KTokens is added per 1024 uncached prompt tokens (Optional).
	Per1KTokens Duration `yaml:"per_1k_tokens" json:"per_1k_tokens"`
	// Per1KCachedTokens is added per 1024 cached prompt tokens (Optional).
	Per1KCachedTokens Duration `yaml:"per_1k_cached_tokens" json:"per_1k_cached_tokens"`
	// Jitter multiplies the delay by a uniform factor in [1-jitter, 1+jitter]
	// drawn from the seeded generator (Optional, 0 to 1). Defaults to 0.
	Jitter float64 `yaml:"jitter" json:"jitter"`
	// Spread multiplies the delay by e^(spread·Z), Z a standard normal draw
	// from the seeded generator: a lognormal spread around the curve, the
	// shape real first-token times have (Optional, 0 to 3). Defaults to 0.
	Spread float64 `yaml:"spread" json:"spread"`
	// ByBucket replaces the curve for prompts of one size bucket, keyed by
	// tokens.Bucket labels "<8k", "8k-32k", "32k-128k", ">128k" (Optional), so
	// a provider can be fast on short prompts and fall off a cliff on long ones.
	ByBucket map[string]TTFTCurve `yaml:"by_bucket" json:"by_bucket,omitempty"`
}

// TTFTCurve is the curve of one size bucket; see TTFTConfig.
type TTFTCurve struct {
	// Base is the delay of an empty prompt.
	Base Duration `yaml:"base" json:"base"`
	// Per1KTokens is added per 1024 uncached prompt tokens.
	Per1KTokens Duration `yaml:"per_1k_tokens" json:"per_1k_tokens"`
	// Per1KCachedTokens is added per 1024 cached prompt tokens.
	Per1KCachedTokens Duration `yaml:"per_1k_cached_tokens" json:"per_1k_cached_tokens"`
}

// CacheConfig configures the prompt-prefix cache; the rule is documented on
// package internal/promptcache and in the README.
type CacheConfig struct {
	// Enabled turns caching on (Optional). Defaults to false.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// BlockTokens is the cache granularity (Optional). Defaults to 128, as OpenAI.
	BlockTokens int64 `yaml:"block_tokens" json:"block_tokens"`
	// MinTokens is the smallest prompt and hit that counts (Optional). Defaults to 1024, as OpenAI.
	MinTokens int64 `yaml:"min_tokens" json:"min_tokens"`
	// TTL is how long an unused prefix stays cached (Optional). Defaults to 5m.
	TTL Duration `yaml:"ttl" json:"ttl"`
	// MaxEntries bounds the blocks kept, least recently used evicted first
	// (Optional). Defaults to 10000.
	MaxEntries int `yaml:"max_entries" json:"max_entries"`
}

// FaultKind names a fault.
type FaultKind string

// The fault kinds.
const (
	// FaultRateLimit answers 429 with Retry-After.
	FaultRateLimit FaultKind = "rate_limit"
	// FaultUnavailable answers 503 (or Status).
	FaultUnavailable FaultKind = "unavailable"
	// FaultHang sends nothing until the client gives up.
	FaultHang FaultKind = "hang"
	// FaultDrop cuts the connection after AfterTokens streamed tokens.
	FaultDrop FaultKind = "drop"
	// FaultMalformed sends a first event that is not valid JSON, then ends.
	FaultMalformed FaultKind = "malformed"
	// FaultSpendLimit answers 429 whose error code says the account's quota
	// is spent (OpenAI's insufficient_quota), without Retry-After: a policy
	// refusal that waiting does not cure.
	FaultSpendLimit FaultKind = "spend_limit"
	// FaultOverloaded answers 529 with Anthropic's overloaded_error and
	// Retry-After.
	FaultOverloaded FaultKind = "overloaded"
	// FaultStreamError streams AfterTokens tokens, then an error event (the
	// client API's own), and ends the stream; non-streamed, it answers 500
	// after the same time.
	FaultStreamError FaultKind = "stream_error"
)

var faultKinds = []FaultKind{FaultRateLimit, FaultUnavailable, FaultHang, FaultDrop, FaultMalformed, FaultSpendLimit, FaultOverloaded, FaultStreamError}

// FaultConfig is one injectable fault.
type FaultConfig struct {
	// Kind is one of rate_limit, unavailable, hang, drop, malformed,
	// spend_limit, overloaded (Required).
	Kind FaultKind `yaml:"kind" json:"kind"`
	// Rate is the probability per request, 0 to 1 (Optional). Defaults to 0:
	// only a directive triggers it. The rates of a model add up to at most 1.
	Rate float64 `yaml:"rate" json:"rate"`
	// AfterTokens is how many tokens a drop or stream_error sends first (Optional). Defaults to 3.
	AfterTokens int64 `yaml:"after_tokens" json:"after_tokens"`
	// RetryAfter is sent by rate_limit and overloaded, rounded up to
	// seconds (Optional). Defaults to 1s.
	RetryAfter Duration `yaml:"retry_after" json:"retry_after"`
	// Status is the 5xx code of unavailable (Optional). Defaults to 503.
	Status int `yaml:"status" json:"status"`
}

// LimitsConfig are rolling one-minute quotas; 0 means unlimited.
type LimitsConfig struct {
	// RequestsPerMinute caps admitted requests per rolling minute (Optional).
	RequestsPerMinute int64 `yaml:"requests_per_minute" json:"requests_per_minute"`
	// TokensPerMinute caps prompt plus requested output tokens per rolling
	// minute, counted at admission as OpenAI does (Optional).
	TokensPerMinute int64 `yaml:"tokens_per_minute" json:"tokens_per_minute"`
	// RequestsPerSecond caps admitted requests per rolling second
	// (Optional): a steady capacity with no minute-long burst allowance, as
	// a provider whose servers are full answers 429 above a load.
	RequestsPerSecond int64 `yaml:"requests_per_second" json:"requests_per_second"`
}

// Defaults of ModelConfig, filled in for zero values.
const (
	DefaultOutputTokens     = 16               // ModelConfig.DefaultOutputTokens
	DefaultCacheBlockTokens = 128              // CacheConfig.BlockTokens, OpenAI's cache granularity
	DefaultCacheMinTokens   = 1024             // CacheConfig.MinTokens, OpenAI's smallest cacheable prompt
	DefaultCacheTTL         = 5 * time.Minute  // CacheConfig.TTL, OpenAI's minimum retention
	DefaultCacheMaxEntries  = 10000            // CacheConfig.MaxEntries
	DefaultDropAfterTokens  = 3                // FaultConfig.AfterTokens
	DefaultRetryAfter       = time.Second      // FaultConfig.RetryAfter
	DefaultUnavailable      = 503              // FaultConfig.Status
	DefaultCapacityRetry    = 30 * time.Second // CapacityConfig.RetryAfter, as the routing simulation's
)

// LoadConfig reads, parses and validates the YAML file at path.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig parses YAML and validates it, returning every problem at once
// (errors.Join), each prefixed by its field path. Unknown fields are errors:
// a misspelt fault would otherwise silently never fire. Defaults are filled
// in on success.
func ParseConfig(data []byte) (Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("parse yaml: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	for i := range cfg.Providers {
		for j := range cfg.Providers[i].Models {
			cfg.Providers[i].Models[j] = cfg.Providers[i].Models[j].withDefaults()
		}
	}
	return cfg, nil
}

// Validate returns every problem of c joined, nil if none.
func (c Config) Validate() error {
	var errs []error
	if c.TimeScale < 0 || math.IsNaN(c.TimeScale) || math.IsInf(c.TimeScale, 0) {
		errs = append(errs, fmt.Errorf("time_scale: must be a finite number above 0, got %v", c.TimeScale))
	}
	if len(c.Providers) == 0 {
		errs = append(errs, errors.New("providers: at least one provider is required"))
	}
	names := map[string]int{}
	listens := map[string]int{}
	for i, p := range c.Providers {
		path := fmt.Sprintf("providers[%d]", i)
		if p.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: required", path))
		} else if j, dup := names[p.Name]; dup {
			errs = append(errs, fmt.Errorf("%s.name: %q already used by providers[%d]", path, p.Name, j))
		} else {
			names[p.Name] = i
		}
		if p.Listen == "" {
			errs = append(errs, fmt.Errorf("%s.listen: required", path))
		} else if _, port, err := net.SplitHostPort(p.Listen); err != nil {
			errs = append(errs, fmt.Errorf("%s.listen: %w", path, err))
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s.listen: invalid port %q", path, port))
		} else if n != 0 {
			if j, dup := listens[p.Listen]; dup {
				errs = append(errs, fmt.Errorf("%s.listen: %q already used by providers[%d]", path, p.Listen, j))
			}
			listens[p.Listen] = i
		}
		if len(p.Models) == 0 {
			errs = append(errs, fmt.Errorf("%s.models: at least one model is required", path))
		}
		ids := map[string]int{}
		for j, m := range p.Models {
			mpath := fmt.Sprintf("%s.models[%d]", path, j)
			errs = append(errs, m.validate(mpath)...)
			if m.ID == "" {
				continue
			}
			if k, dup := ids[m.ID]; dup {
				errs = append(errs, fmt.Errorf("%s.id: %q already used by models[%d]", mpath, m.ID, k))
			}
			ids[m.ID] = j
		}
	}
	return errors.Join(errs...)
}

// Validate returns every problem of m joined, nil if none.
func (m ModelConfig) Validate() error {
	return errors.Join(m.validate("model")...)
}

func (m ModelConfig) validate(path string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: "+format, append([]any{path, field}, args...)...))
	}
	if m.ID == "" {
		bad("id", "required")
	}
	checkCurve := func(prefix string, c TTFTCurve) {
		for _, f := range []struct {
			name string
			d    Duration
		}{{"base", c.Base}, {"per_1k_tokens", c.Per1KTokens}, {"per_1k_cached_tokens", c.Per1KCachedTokens}} {
			if f.d < 0 {
				bad(prefix+f.name, "must not be negative, got %s", f.d)
			}
		}
	}
	checkCurve("ttft.", m.TTFT.curve())
	if m.TTFT.Jitter < 0 || m.TTFT.Jitter > 1 || math.IsNaN(m.TTFT.Jitter) {
		bad("ttft.jitter", "must be between 0 and 1, got %v", m.TTFT.Jitter)
	}
	if m.TTFT.Spread < 0 || m.TTFT.Spread > 3 || math.IsNaN(m.TTFT.Spread) {
		bad("ttft.spread", "must be between 0 and 3, got %v", m.TTFT.Spread)
	}
	for _, k := range slices.Sorted(maps.Keys(m.TTFT.ByBucket)) {
		if !validBucket(k) {
			bad("ttft.by_bucket", "unknown bucket %q (want one of %q)", k, bucketLabels())
			continue
		}
		checkCurve(fmt.Sprintf("ttft.by_bucket[%q].", k), m.TTFT.ByBucket[k])
	}
	if m.TokensPerSecond < 0 || math.IsNaN(m.TokensPerSecond) || math.IsInf(m.TokensPerSecond, 0) {
		bad("tokens_per_second", "must be a finite number not below 0, got %v", m.TokensPerSecond)
	}
	if m.DefaultOutputTokens < 0 {
		bad("default_output_tokens", "must not be negative, got %d", m.DefaultOutputTokens)
	}
	if m.MaxOutputTokens < 0 {
		bad("max_output_tokens", "must not be negative, got %d", m.MaxOutputTokens)
	}
	if m.Cache.BlockTokens < 0 {
		bad("cache.block_tokens", "must not be negative, got %d", m.Cache.BlockTokens)
	}
	if m.Cache.MinTokens < 0 {
		bad("cache.min_tokens", "must not be negative, got %d", m.Cache.MinTokens)
	}
	if m.Cache.TTL < 0 {
		bad("cache.ttl", "must not be negative, got %s", m.Cache.TTL)
	}
	if m.Cache.MaxEntries < 0 {
		bad("cache.max_entries", "must not be negative, got %d", m.Cache.MaxEntries)
	}
	total := 0.0
	for i, f := range m.Faults {
		fpath := fmt.Sprintf("faults[%d]", i)
		if !slices.Contains(faultKinds, f.Kind) {
			bad(fpath+".kind", "unknown fault %q (want one of %q)", f.Kind, faultKinds)
		}
		if f.Rate < 0 || f.Rate > 1 || math.IsNaN(f.Rate) {
			bad(fpath+".rate", "must be between 0 and 1, got %v", f.Rate)
		} else {
			total += f.Rate
		}
		if f.AfterTokens < 0 {
			bad(fpath+".after_tokens", "must not be negative, got %d", f.AfterTokens)
		}
		if f.RetryAfter < 0 {
			bad(fpath+".retry_after", "must not be negative, got %s", f.RetryAfter)
		}
		if f.Status != 0 && (f.Status < 500 || f.Status > 599) {
			bad(fpath+".status", "must be a 5xx code, got %d", f.Status)
		}
	}
	if total > 1+1e-9 {
		bad("faults", "rates add up to %v, more than 1", total)
	}
	if len(m.Refusals) > maxRefusals {
		bad("refusals", "at most %d, got %d", maxRefusals, len(m.Refusals))
	}
	for i, r := range m.Refusals {
		rpath := fmt.Sprintf("refusals[%d]", i)
		if r.Match == "" {
			bad(rpath+".match", "must not be empty")
		}
		if r.Status < 400 || r.Status > 599 {
			bad(rpath+".status", "must be a 4xx or 5xx code, got %d", r.Status)
		}
	}
	if m.Limits.RequestsPerMinute < 0 {
		bad("limits.requests_per_minute", "must not be negative, got %d", m.Limits.RequestsPerMinute)
	}
	if m.Limits.TokensPerMinute < 0 {
		bad("limits.tokens_per_minute", "must not be negative, got %d", m.Limits.TokensPerMinute)
	}
	if m.Limits.RequestsPerSecond < 0 {
		bad("limits.requests_per_second", "must not be negative, got %d", m.Limits.RequestsPerSecond)
	}
	if m.Capacity.RequestsPerMinute < 0 {
		bad("capacity.requests_per_minute", "must not be negative, got %d", m.Capacity.RequestsPerMinute)
	}
	if m.Capacity.TokensPerMinute < 0 {
		bad("capacity.tokens_per_minute", "must not be negative, got %d", m.Capacity.TokensPerMinute)
	}
	if m.Capacity.RetryAfter < 0 {
		bad("capacity.retry_after", "must not be negative, got %s", m.Capacity.RetryAfter)
	}
	return errs
}

// withDefaults returns m with every zero default filled in and its reference
// fields copied, so the caller's slices and maps can change afterwards
// without racing the handlers.
func (m ModelConfig) withDefaults() ModelConfig {
	if m.DefaultOutputTokens == 0 {
		m.DefaultOutputTokens = DefaultOutputTokens
	}
	if m.Cache.BlockTokens == 0 {
		m.Cache.BlockTokens = DefaultCacheBlockTokens
	}
	if m.Cache.MinTokens == 0 {
		m.Cache.MinTokens = DefaultCacheMinTokens
	}
	if m.Cache.TTL == 0 {
		m.Cache.TTL = Duration(DefaultCacheTTL)
	}
	if m.Cache.MaxEntries == 0 {
		m.Cache.MaxEntries = DefaultCacheMaxEntries
	}
	if m.Capacity.RetryAfter == 0 {
		m.Capacity.RetryAfter = Duration(DefaultCapacityRetry)
	}
	m.Refusals = slices.Clone(m.Refusals)
	for i := range m.Refusals {
		r := &m.Refusals[i]
		if r.Type == "" {
			r.Type = "invalid_request_error"
			if r.Status >= 500 {
				r.Type = "server_error"
			}
		}
		if r.Message == "" {
			r.Message = "request refused (simulated)"
		}
	}
	m.Faults = slices.Clone(m.Faults)
	for i := range m.Faults {
		f := &m.Faults[i]
		if f.AfterTokens == 0 {
			f.AfterTokens = DefaultDropAfterTokens
		}
		if f.RetryAfter == 0 {
			f.RetryAfter = Duration(DefaultRetryAfter)
		}
		if f.Status == 0 {
			f.Status = DefaultUnavailable
		}
	}
	m.TTFT.ByBucket = maps.Clone(m.TTFT.ByBucket)
	return m
}

func (t TTFTConfig) curve() TTFTCurve {
	return TTFTCurve{Base: t.Base, Per1KTokens: t.Per1KTokens, Per1KCachedTokens: t.Per1KCachedTokens}
}

// FirstTokenDelay returns the jitter-free time to first token of a prompt of
// promptTokens tokens of which cachedTokens were cached: the bucket's curve
// (or the default one) evaluated as
//
//	base + per_1k_tokens × uncached/1024 + per_1k_cached_tokens × cached/1024.
//
// Tests aim at it instead of at wall-clock durations.
func (m ModelConfig) FirstTokenDelay(promptTokens, cachedTokens int64) time.Duration {
	c := m.TTFT.curve()
	if bc, ok := m.TTFT.ByBucket[tokens.BucketOf(promptTokens).String()]; ok {
		c = bc
	}
	cachedTokens = min(max(cachedTokens, 0), max(promptTokens, 0))
	uncached := max(promptTokens, 0) - cachedTokens
	d := float64(c.Base) +
		float64(c.Per1KTokens)*float64(uncached)/tokens.K +
		float64(c.Per1KCachedTokens)*float64(cachedTokens)/tokens.K
	return time.Duration(d)
}

// jittered scales d by the jitter factor for a uniform draw u in [0, 1).
func (t TTFTConfig) jittered(d time.Duration, u float64) time.Duration {
	if t.Jitter == 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + t.Jitter*(2*u-1)))
}

func validBucket(label string) bool {
	return slices.Contains(bucketLabels(), label)
}

func bucketLabels() []string {
	labels := make([]string, 0, tokens.NumBuckets)
	for b := range tokens.Bucket(tokens.NumBuckets) {
		labels = append(labels, b.String())
	}
	return labels
}
