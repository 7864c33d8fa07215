// Package outcomes tracks what each endpoint delivered on real traffic, as
// the routing-cost policy needs it: what it charged (its real token mix
// and cache-hit rate at its rates), its throughput over the whole call,
// how often it answered 429, failed (5xx, timeouts, dropped streams) or
// gave an answer that failed a quality check, the load this decider
// routes to it, and the load at which it started answering 429 (its
// learned cap).
//
// Every rate is a time-decayed sum (each call weighs 0.5^(age/HalfLife)),
// so an endpoint that changes is seen within minutes, and an idle one's
// figures fade, which lets a reader pull them back towards a prior (see
// [Figures]). Writers (the Report path) take the endpoint's mutex and
// publish an immutable summary; readers (Decide) load it with one atomic
// and decay it to their clock, so they never lock on a report.
//
// The state is not persisted: with a five-minute half-life it is relearned
// in minutes after a restart, and the slower speed statistics it leans on
// (TTFT) are persisted by the stats package.
package outcomes

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
)

// Defaults of [Config].
const (
	DefaultHalfLife     = 5 * time.Minute
	DefaultFastHalfLife = time.Minute
	DefaultLoadWindow   = time.Minute
	DefaultCapBackoff   = 0.1
	DefaultCapRise      = 0.02
	// MinCap is the lowest learned cap, in requests per minute: an
	// endpoint that answered 429 at a trickle still gets a trickle.
	MinCap = 1.0
	// maxChecks bounds the quality-check names kept per endpoint, so an
	// edge sending garbage names cannot grow the decider's memory.
	maxChecks = 16
	// maxCheckName bounds a check name's length.
	maxCheckName = 64
)

// Config tunes a [Tracker]. The zero value gives the defaults.
type Config struct {
	// HalfLife (Optional) is the age at which a call weighs half as much
	// as a fresh one in the rates. Defaults to 5m.
	HalfLife time.Duration
	// FastHalfLife (Optional) is the half-life of the recent failure rate
	// that drives back-off: short, so that back-off starts within a
	// minute of an endpoint starting to fail. Defaults to 1m.
	FastHalfLife time.Duration
	// LoadWindow (Optional) is the time constant of the routed-load
	// estimate. Defaults to 1m.
	LoadWindow time.Duration
	// CapBackoff (Optional) sets a learned cap this fraction below the load
	// at which a 429 came. Defaults to 0.1.
	CapBackoff float64
	// CapRise (Optional) is how much a cap grows per minute without a 429,
	// as a fraction of the cap learned (additive increase). Defaults to 0.02.
	CapRise float64
	// Now (Optional) is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Kind is how one call to an endpoint ended, as far as routing cares.
type Kind uint8

// The kinds of call.
const (
	// KindIgnored says nothing of the endpoint: cancelled by the client or
	// a lost hedge, or a request the provider rightly refused (a 4xx other
	// than 429).
	KindIgnored Kind = iota
	// KindOK completed.
	KindOK
	// KindRateLimited answered 429.
	KindRateLimited
	// KindError failed: 5xx, no connection, timeout, unparseable answer,
	// dropped stream.
	KindError
)

// Call is one call's outcome.
type Call struct {
	Kind Kind
	// Probe marks a synthetic probe: it counts in the rates (it is a real
	// call) but never in the charged price, which probes (built to miss the
	// cache) would skew.
	Probe bool
	// Usage is the call's reported token counts; zero when not reported.
	Usage pricing.Usage
	// Reported is whether the provider reported usage.
	Reported bool
	// Duration is the whole call, from sending to the last byte.
	Duration time.Duration
	// QualityFailures name the answer checks the answer failed.
	QualityFailures []string
	// RetryAfter is a 429's Retry-After, 0 if none.
	RetryAfter time.Duration
}

// Tracker holds every endpoint's figures. It is safe for concurrent use.
type Tracker struct {
	cfg       Config
	halfLife  float64  // ns
	fastHalf  float64  // ns
	tau       float64  // ns
	endpoints sync.Map // id → *Endpoint
}

// New returns an empty tracker.
func New(cfg Config) *Tracker {
	if cfg.HalfLife <= 0 {
		cfg.HalfLife = DefaultHalfLife
	}
	if cfg.FastHalfLife <= 0 {
		cfg.FastHalfLife = DefaultFastHalfLife
	}
	if cfg.LoadWindow <= 0 {
		cfg.LoadWindow = DefaultLoadWindow
	}
	if !(cfg.CapBackoff > 0 && cfg.CapBackoff < 1) {
		cfg.CapBackoff = DefaultCapBackoff
	}
	if !(cfg.CapRise > 0) {
		cfg.CapRise = DefaultCapRise
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Tracker{cfg: cfg, halfLife: float64(cfg.HalfLife), fastHalf: float64(cfg.FastHalfLife), tau: float64(cfg.LoadWindow)}
}

// Endpoint returns the figures of id, creating them if needed; the routing
// index resolves it once per catalog, so Decide skips the lookup.
func (t *Tracker) Endpoint(id string) *Endpoint {
	if v, ok := t.endpoints.Load(id); ok {
		return v.(*Endpoint)
	}
	e := &Endpoint{t: t}
	e.pub.Store(&summary{})
	v, _ := t.endpoints.LoadOrStore(id, e)
	return v.(*Endpoint)
}

// Observe records one call of endpoint id ending at the tracker's clock,
// priced at rates.
func (t *Tracker) Observe(id string, c Call, rates pricing.Price) {
	t.Endpoint(id).observe(c, rates, t.cfg.Now().UnixNano())
}

// Endpoint is one endpoint's figures.
type Endpoint struct {
	t   *Tracker
	mu  sync.Mutex // serialises writers; readers load pub
	s   summary    // the writers' copy
	pub atomic.Pointer[summary]

	loadMu sync.Mutex
	load   float64 // Σ exp(-(loadAt-t_i)/τ) over routed requests
	loadAt int64
}

// summary is the decayed sums of an endpoint as of at (Unix ns).
type summary struct {
	at int64
	// Slow rates (HalfLife): attempts, and those that were refused,
	// failed or failed a quality check.
	calls, limited, failed, poor float64
	// Recent failures (FastHalfLife), for back-off.
	fastCalls, fastFailed float64
	// Completed, non-probe calls with usage: their tokens and charge.
	priced, input, cached, output, charged float64
	// Completed calls with output: output tokens and whole-call seconds.
	outTokens, seconds float64
	// Per quality check: failures (slow half-life).
	checks map[string]float64
	// Learned cap: cap0 requests/min set at capAt; 0 none.
	cap0  float64
	capAt int64
	// pausedUntil is when the last 429's Retry-After ends (Unix ns).
	pausedUntil int64
}

// decay returns the factor by which weights shrink from `from` to `to`
// with half-life h (ns); a `to` before `from` (a late report) is treated as
// no time passed.
func decay(from, to int64, h float64) float64 {
	if to <= from {
		return 1
	}
	return math.Exp2(-float64(to-from) / h)
}

// advance decays s's sums to now.
func (s *summary) advance(now int64, slow, fast float64) {
	if now <= s.at {
		return
	}
	k, f := decay(s.at, now, slow), decay(s.at, now, fast)
	s.calls *= k
	s.limited *= k
	s.failed *= k
	s.poor *= k
	s.priced *= k
	s.input *= k
	s.cached *= k
	s.output *= k
	s.charged *= k
	s.outTokens *= k
	s.seconds *= k
	for name, v := range s.checks {
		s.checks[name] = v * k
	}
	s.fastCalls *= f
	s.fastFailed *= f
	s.at = now
}

func (e *Endpoint) observe(c Call, rates pricing.Price, now int64) {
	if c.Kind == KindIgnored {
		return
	}
	load := 0.0
	if c.Kind == KindRateLimited {
		load = e.Load(time.Unix(0, now))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &e.s
	s.advance(now, e.t.halfLife, e.t.fastHalf)
	s.calls++
	s.fastCalls++
	switch c.Kind {
	case KindRateLimited:
		s.limited++
		s.fastFailed++
		if load > 0 {
			// The load this decider was routing here when the endpoint
			// started refusing, less a margin: the most it is sent until
			// the cap rises again.
			s.cap0 = max(MinCap, load*(1-e.t.cfg.CapBackoff))
			s.capAt = now
		}
		if c.RetryAfter > 0 {
			s.pausedUntil = max(s.pausedUntil, now+int64(c.RetryAfter))
		}
	case KindError:
		s.failed++
		s.fastFailed++
	case KindOK:
		if len(c.QualityFailures) > 0 {
			s.poor++
			e.countChecks(c.QualityFailures)
		}
		if c.Reported && !c.Probe && c.Usage.Input > 0 {
			s.priced++
			s.input += float64(c.Usage.Input)
			s.cached += float64(min(max(c.Usage.CachedInput, 0), c.Usage.Input))
			s.output += float64(max(c.Usage.Output, 0))
			s.charged += pricing.Cost(rates, c.Usage)
		}
		if c.Usage.Output > 0 && c.Duration > 0 {
			s.outTokens += float64(c.Usage.Output)
			s.seconds += c.Duration.Seconds()
		}
	}
	p := *s
	if len(s.checks) > 0 {
		p.checks = make(map[string]float64, len(s.checks))
		for k, v := range s.checks {
			p.checks[k] = v
		}
	}
	e.pub.Store(&p)
}

func (e *Endpoint) countChecks(names []string) {
	if e.s.checks == nil {
		e.s.checks = map[string]float64{}
	}
	for _, n := range names {
		if len(n) > maxCheckName {
			n = n[:maxCheckName]
		}
		if _, ok := e.s.checks[n]; !ok && len(e.s.checks) >= maxChecks {
			n = "other"
		}
		e.s.checks[n]++
	}
}

// Routed records that this decider routed one request to the endpoint at now.
func (e *Endpoint) Routed(now time.Time) {
	t := now.UnixNano()
	e.loadMu.Lock()
	defer e.loadMu.Unlock()
	if t > e.loadAt {
		e.load *= math.Exp(-float64(t-e.loadAt) / e.t.tau)
		e.loadAt = t
	}
	e.load++
}

// Load is the requests per minute this decider routes to the endpoint: an
// exponentially weighted rate with the LoadWindow time constant.
func (e *Endpoint) Load(now time.Time) float64 {
	if e == nil {
		return 0
	}
	t := now.UnixNano()
	e.loadMu.Lock()
	l, at := e.load, e.loadAt
	e.loadMu.Unlock()
	if t > at {
		l *= math.Exp(-float64(t-at) / e.t.tau)
	}
	return l / (e.t.tau / float64(time.Minute))
}

// Figures are an endpoint's decayed figures at one instant. Counts are
// decayed weights (a fresh call weighs 1); a reader that wants a rate
// pulled towards a prior while evidence is thin computes
// (count + k·prior) / (Calls + k), which also lets an idle endpoint's rate
// drift back to the prior as its calls age.
type Figures struct {
	// Calls are attempts that said something of the endpoint.
	Calls float64
	// RateLimited, Failed and Poor count 429s, failures and answers that
	// failed a quality check among Calls.
	RateLimited, Failed, Poor float64
	// RecentCalls and RecentFailed count attempts and failures (429 or
	// error) with the short half-life, for back-off.
	RecentCalls, RecentFailed float64
	// Priced counts completed calls with reported usage; InputTokens,
	// CachedTokens and OutputTokens are their decayed token sums and
	// ChargedUSD what they cost at the endpoint's rates.
	Priced, InputTokens, CachedTokens, OutputTokens, ChargedUSD float64
	// OutputTokensTimed and CallSeconds are the output and whole-call
	// seconds of completed calls with output, for throughput.
	OutputTokensTimed, CallSeconds float64
	// Load is the requests per minute this decider routes here.
	Load float64
	// Cap is the learned cap in requests per minute, 0 when none.
	Cap float64
	// PausedUntil is when the last 429's Retry-After ends: the provider
	// asked for no calls before it. Zero when none was sent.
	PausedUntil time.Time
}

// CacheHitRate is Σcached / Σinput of priced calls; ok false without any.
func (f Figures) CacheHitRate() (rate float64, ok bool) {
	if f.InputTokens <= 0 {
		return 0, false
	}
	return f.CachedTokens / f.InputTokens, true
}

// Throughput is output tokens per second over the whole call, the wait
// for the first token included; ok false without data.
func (f Figures) Throughput() (tokensPerSecond float64, ok bool) {
	if f.CallSeconds <= 0 || f.OutputTokensTimed <= 0 {
		return 0, false
	}
	return f.OutputTokensTimed / f.CallSeconds, true
}

// ChargedPerCall is the average USD an endpoint charged per priced call;
// ok false without any.
func (f Figures) ChargedPerCall() (usd float64, ok bool) {
	if f.Priced <= 0 {
		return 0, false
	}
	return f.ChargedUSD / f.Priced, true
}

// Read returns the endpoint's figures at now. It takes no lock on the
// report path and allocates nothing; a nil endpoint reads as no data.
func (e *Endpoint) Read(now time.Time) Figures {
	if e == nil {
		return Figures{}
	}
	s := e.pub.Load()
	t := now.UnixNano()
	k, fk := decay(s.at, t, e.t.halfLife), decay(s.at, t, e.t.fastHalf)
	f := Figures{
		Calls: s.calls * k, RateLimited: s.limited * k, Failed: s.failed * k, Poor: s.poor * k,
		RecentCalls: s.fastCalls * fk, RecentFailed: s.fastFailed * fk,
		Priced: s.priced * k, InputTokens: s.input * k, CachedTokens: s.cached * k, OutputTokens: s.output * k, ChargedUSD: s.charged * k,
		OutputTokensTimed: s.outTokens * k, CallSeconds: s.seconds * k,
		Load: e.Load(now),
		Cap:  e.t.capAt(s, t),
	}
	if s.pausedUntil > 0 {
		f.PausedUntil = time.Unix(0, s.pausedUntil)
	}
	return f
}

// capAt is the learned cap at now: it grows by CapRise of itself per
// minute since the last 429 (additive increase), so capacity a provider
// adds is found again.
func (t *Tracker) capAt(s *summary, now int64) float64 {
	if s.cap0 <= 0 {
		return 0
	}
	minutes := max(0, float64(now-s.capAt)/float64(time.Minute))
	return s.cap0 * (1 + t.cfg.CapRise*minutes)
}

// QualityChecks returns each quality check's failure rate among the
// endpoint's calls (decayed failures over decayed calls: the ratio of two
// sums decayed alike does not change with time).
func (e *Endpoint) QualityChecks() map[string]float64 {
	if e == nil {
		return nil
	}
	s := e.pub.Load()
	if s.calls <= 0 || len(s.checks) == 0 {
		return nil
	}
	out := make(map[string]float64, len(s.checks))
	for n, v := range s.checks {
		out[n] = v / s.calls
	}
	return out
}
