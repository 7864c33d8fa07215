// Package app is the provider simulator: HTTP servers speaking OpenAI's chat
// completions and Anthropic's Messages API that play the upstream LLM providers for the demo and for end-to-end tests of the
// gateway, with configurable time to first token by prompt size, output speed,
// prompt caching, quotas and injected faults.
//
// It is not internal because the repository's end-to-end tests start
// simulators in-process with Start and flip their behaviour with SetModel.
package app

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-ai/switchboard/services/provsim/internal/promptcache"
	"github.com/switchboard-ai/switchboard/services/provsim/internal/ratelimit"
)

// defaultShutdownGrace is how long Close lets in-flight replies finish before
// it cuts them: long enough for a short stream to end cleanly, short enough
// that Ctrl-C on the demo does not wait for a slow provider's long answer.
const defaultShutdownGrace = 5 * time.Second

// readHeaderTimeout bounds slow-loris clients; bodies and replies are not
// bounded because a simulated long prompt legitimately takes long.
const readHeaderTimeout = 10 * time.Second

// Sim is a running simulator: one HTTP server per configured provider.
type Sim struct {
	providers []*Provider
	byName    map[string]*Provider
	cancel    context.CancelFunc
	grace     time.Duration

	closeOnce sync.Once
	closeErr  error
}

// Provider is one simulated upstream provider.
type Provider struct {
	name   string
	apiKey string
	logger *slog.Logger
	now    func() time.Time
	born   time.Time

	ln     net.Listener
	srv    *http.Server
	served chan struct{} // closed when Serve returned
	// closing is closed when Close starts, so hung requests stop waiting for
	// a client that may never leave.
	closing chan struct{}

	// lifeMu orders handler registration against Close, so inflight.Add never
	// races inflight.Wait.
	lifeMu   sync.Mutex
	closed   bool
	inflight sync.WaitGroup

	rngMu sync.Mutex
	rng   *rand.Rand
	// scale multiplies every delay (Config.TimeScale).
	scale float64

	mu     sync.RWMutex
	models map[string]*modelState
	order  []string // model ids in configuration order, for /v1/models

	seq   atomic.Uint64
	stats counters
}

// modelState is one model's live configuration and the state that outlives a
// SetModel: its cache (unless the cache settings change), quota window and
// counters.
type modelState struct {
	mu     sync.Mutex
	cfg    ModelConfig
	cache  *promptcache.Cache // nil when caching is off
	window ratelimit.Window
	second ratelimit.Window // Length 1s: limits.requests_per_second
	// capacity counts calls for Capacity over a minute of the scaled clock.
	capacity ratelimit.Window
}

// options are the test seams of Start.
type options struct {
	now   func() time.Time
	grace time.Duration
}

// Start validates cfg, listens on every provider's address and serves them.
// It returns once every provider listens, so Provider(name).URL() is usable at
// once. ctx bounds only the start-up: the servers run until Close. A nil
// logger discards logs.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (*Sim, error) {
	return start(ctx, cfg, logger, options{now: time.Now, grace: defaultShutdownGrace})
}

func start(ctx context.Context, cfg Config, logger *slog.Logger, opts options) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// Requests get a context that Close cancels but the caller's ctx does not:
	// a test's context ending must not turn in-flight replies into errors
	// before Close decides how to end them.
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Sim{byName: map[string]*Provider{}, cancel: cancel, grace: opts.grace}
	var lc net.ListenConfig
	for _, pc := range cfg.Providers {
		ln, err := lc.Listen(ctx, "tcp", pc.Listen)
		if err != nil {
			cancel()
			for _, p := range s.providers {
				_ = p.ln.Close()
			}
			return nil, fmt.Errorf("provider %s: listen %s: %w", pc.Name, pc.Listen, err)
		}
		p := newProvider(pc, cfg.Seed, cfg.TimeScale, logger.With("component", "provsim", "provider", pc.Name), opts)
		p.ln = ln
		p.srv = &http.Server{
			Handler:           p.routes(),
			ReadHeaderTimeout: readHeaderTimeout,
			BaseContext:       func(net.Listener) context.Context { return base },
			ErrorLog:          slog.NewLogLogger(p.logger.Handler(), slog.LevelDebug),
		}
		s.providers = append(s.providers, p)
		s.byName[p.name] = p
	}
	for _, p := range s.providers {
		go func() {
			defer close(p.served)
			if err := p.srv.Serve(p.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				p.logger.Error("serve", "err", err)
			}
		}()
		p.logger.Info("listening", "url", p.URL())
	}
	return s, nil
}

func newProvider(pc ProviderConfig, seed int64, timeScale float64, logger *slog.Logger, opts options) *Provider {
	if timeScale == 0 {
		timeScale = 1
	}
	// Each provider gets its own stream of draws, derived from the seed and
	// its name, so one provider's traffic does not change another's faults.
	h := fnv.New64a()
	_, _ = h.Write([]byte(pc.Name)) // a hash never fails to write
	p := &Provider{
		name:    pc.Name,
		apiKey:  pc.APIKey,
		logger:  logger,
		now:     opts.now,
		born:    opts.now(),
		served:  make(chan struct{}),
		closing: make(chan struct{}),
		rng:     rand.New(rand.NewPCG(uint64(seed), h.Sum64())),
		scale:   timeScale,
		models:  map[string]*modelState{},
	}
	for _, mc := range pc.Models {
		// Validated by the caller.
		_, _ = p.setModel(mc)
	}
	return p
}

// Provider returns the provider called name, nil if unknown.
func (s *Sim) Provider(name string) *Provider { return s.byName[name] }

// Providers returns every provider in configuration order.
func (s *Sim) Providers() []*Provider { return append([]*Provider(nil), s.providers...) }

// Close stops every provider and waits for all their handlers to return. It
// first releases hung requests, then lets in-flight replies finish for up to
// five seconds, then cancels the rest. It is safe to call more than once.
func (s *Sim) Close() error {
	s.closeOnce.Do(func() {
		for _, p := range s.providers {
			close(p.closing)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(s.providers))
		for i, p := range s.providers {
			wg.Go(func() { errs[i] = p.shutdown(s.grace, s.cancel) })
		}
		wg.Wait()
		s.cancel()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

func (p *Provider) shutdown(grace time.Duration, cancelRequests context.CancelFunc) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var err error
	if serr := p.srv.Shutdown(ctx); serr != nil {
		p.logger.Warn("graceful shutdown timed out, cancelling in-flight replies", "err", serr)
		cancelRequests()
		if cerr := p.srv.Close(); cerr != nil {
			err = fmt.Errorf("provider %s: close: %w", p.name, cerr)
		}
	}
	p.lifeMu.Lock()
	p.closed = true
	p.lifeMu.Unlock()
	p.inflight.Wait()
	<-p.served
	return err
}

// Name returns the provider's configured name.
func (p *Provider) Name() string { return p.name }

// Addr returns the address the provider listens on, with the chosen port.
func (p *Provider) Addr() string { return p.ln.Addr().String() }

// URL returns the OpenAI base URL of the provider, "http://ADDR/v1".
func (p *Provider) URL() string { return "http://" + p.Addr() + "/v1" }

// SetModel adds a model or replaces its behaviour at runtime, so tests can
// flip speeds and faults between calls. Counters and the quota window are
// kept; the cache is kept unless its settings change.
func (p *Provider) SetModel(mc ModelConfig) error {
	_, err := p.setModel(mc)
	return err
}

func (p *Provider) setModel(mc ModelConfig) (ModelConfig, error) {
	if err := mc.Validate(); err != nil {
		return ModelConfig{}, err
	}
	mc = mc.withDefaults()
	p.mu.Lock()
	defer p.mu.Unlock()
	ms, ok := p.models[mc.ID]
	if !ok {
		ms = &modelState{second: ratelimit.Window{Length: time.Second}, capacity: ratelimit.Window{Length: p.scaled(time.Minute)}}
		p.models[mc.ID] = ms
		p.order = append(p.order, mc.ID)
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	want := promptcache.Config{
		BlockTokens: mc.Cache.BlockTokens,
		MinTokens:   mc.Cache.MinTokens,
		TTL:         mc.Cache.TTL.D(),
		MaxEntries:  mc.Cache.MaxEntries,
	}
	switch {
	case !mc.Cache.Enabled:
		ms.cache = nil
	case ms.cache == nil || ms.cache.Config() != want:
		ms.cache = promptcache.New(want)
	}
	ms.cfg = mc
	return mc, nil
}

// Stats returns a snapshot of the provider's counters.
func (p *Provider) Stats() Stats { return p.stats.snapshot() }

func (p *Provider) model(id string) *modelState {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.models[id]
}

// snapshot returns the model's configuration and cache as of now; a SetModel
// during the request does not change a reply half-way.
func (ms *modelState) snapshot() (ModelConfig, *promptcache.Cache) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.cfg, ms.cache
}

// uniform draws from the provider's seeded generator in [0, 1).
func (p *Provider) uniform() float64 {
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	return p.rng.Float64()
}

// normal draws a standard normal variate from the provider's seeded generator.
func (p *Provider) normal() float64 {
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	return p.rng.NormFloat64()
}

// firstTokenDelay is the time to first token of one call: the model's curve,
// its jitter and lognormal spread drawn from the seeded generator, times the
// time scale.
func (p *Provider) firstTokenDelay(m ModelConfig, prompt, cached int64) time.Duration {
	delay := m.FirstTokenDelay(prompt, cached)
	if m.TTFT.Jitter > 0 {
		delay = m.TTFT.jittered(delay, p.uniform())
	}
	if m.TTFT.Spread > 0 {
		delay = time.Duration(float64(delay) * math.Exp(m.TTFT.Spread*p.normal()))
	}
	return p.scaled(delay)
}

// scaled is d times the simulator's time scale.
func (p *Provider) scaled(d time.Duration) time.Duration {
	if p.scale == 1 {
		return d
	}
	return time.Duration(float64(d) * p.scale)
}
