package stats

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

// Defaults of [Config].
const (
	DefaultWindow                = 15 * time.Minute
	DefaultHalfLife              = 5 * time.Minute
	DefaultMaxSamples            = 64
	DefaultMinSamplesForOutliers = 10
	DefaultOutlierWeight         = 0.25
)

// maxMaxSamples caps MaxSamples: an insertion and a recomputation are linear
// in it and run under the series' mutex on the Report path.
const maxMaxSamples = 4096

// Config tunes a [Store]. The zero value gives the defaults of the smart
// routing policy.
type Config struct {
	// Window (Optional) is how long a sample counts; older samples are
	// dropped. Defaults to 15m. Synthetic probes run every 5 minutes
	// by default, so the default keeps about three probes per bucket.
	Window time.Duration
	// HalfLife (Optional) is the age at which a sample weighs half as much as
	// a fresh one. Defaults to 5m.
	HalfLife time.Duration
	// MaxSamples (Optional) is the most samples a series keeps; when full,
	// the oldest is evicted. Defaults to 64, at most 4096.
	MaxSamples int
	// MinSamplesForOutliers (Optional) is the number of samples in the
	// window from which slow TTFT outliers are down-weighted. Defaults to 10.
	MinSamplesForOutliers int
	// OutlierWeight (Optional) multiplies the weight of a slow outlier; it
	// must be in (0, 1], otherwise the default applies. Defaults to 0.25.
	OutlierWeight float64
	// Now (Optional) is the clock, injectable so tests never sleep.
	// Defaults to time.Now.
	Now func() time.Time
}

// Store holds the statistics of every endpoint and model. It is safe for
// concurrent use; the zero value is not usable, call [New]. Its Observe*
// record samples of one unnamed reporter; [Store.From] names the reporter,
// whose share of each series is then bounded (see the package
// documentation, Reporters).
type Store struct {
	p         params
	now       func() time.Time
	endpoints sync.Map // endpoint id → *Endpoint
	models    sync.Map // model id → *Model
	rejected  atomic.Uint64
	srcs      sources
	regs      regions
}

// Endpoint is the live statistics of one endpoint: every series, the buckets
// in an array so that a (endpoint, bucket) read is one index. A caller that
// resolves endpoints once, as the routing index built from the catalog does,
// keeps the *Endpoint from [Store.Endpoint] and reads it on every Decide
// without the map lookup. A nil *Endpoint reads as having no data.
type Endpoint struct {
	id         string
	ttft       [tokens.NumBuckets]medianSeries
	throughput medianSeries
	cache      ratioSeries
	// regions are the TTFT series of each region's reporters
	// (Region-1), created on a region's first sample.
	regions [MaxRegions]atomic.Pointer[regionalTTFT]
}

// Model is the live statistics of one model (see [Endpoint] for why a handle).
// A nil *Model reads as having no data.
type Model struct {
	id     string
	output medianSeries
}

func newEndpoint(id string) *Endpoint {
	e := &Endpoint{id: id}
	for i := range e.ttft {
		e.ttft[i].init()
	}
	e.throughput.init()
	e.cache.init()
	return e
}

func newModel(id string) *Model {
	m := &Model{id: id}
	m.output.init()
	return m
}

// New returns an empty store; fields of cfg left zero (or out of range) take
// their defaults.
func New(cfg Config) *Store {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.HalfLife <= 0 {
		cfg.HalfLife = DefaultHalfLife
	}
	if cfg.MaxSamples <= 0 {
		cfg.MaxSamples = DefaultMaxSamples
	}
	cfg.MaxSamples = min(cfg.MaxSamples, maxMaxSamples)
	if cfg.MinSamplesForOutliers <= 0 {
		cfg.MinSamplesForOutliers = DefaultMinSamplesForOutliers
	}
	if !(cfg.OutlierWeight > 0 && cfg.OutlierWeight <= 1) {
		cfg.OutlierWeight = DefaultOutlierWeight
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Store{
		p: params{
			window:        int64(cfg.Window),
			halfLife:      float64(cfg.HalfLife),
			epoch:         epochOf(float64(cfg.HalfLife)),
			maxSamples:    cfg.MaxSamples,
			minOutliers:   cfg.MinSamplesForOutliers,
			outlierWeight: cfg.OutlierWeight,
		},
		now: cfg.Now,
	}
	s.srcs.init()
	s.regs.init()
	return s
}

// ModelOf returns the model id of an endpoint id "provider/model": everything
// after the first '/'. An id without '/' is its own model id, so that it
// still lands in a snapshot shard.
func ModelOf(endpointID string) string {
	if _, model, ok := strings.Cut(endpointID, "/"); ok {
		return model
	}
	return endpointID
}

// ObserveTTFT records one time-to-first-token sample of endpointID for a
// prompt in bucket b. A negative ttft, an unknown bucket or an empty id is
// rejected (see [Store.Rejected]).
func (s *Store) ObserveTTFT(endpointID string, b tokens.Bucket, ttft time.Duration, at time.Time) {
	s.observeTTFT(0, 0, endpointID, b, ttft, at)
}

// observeTTFT records the sample in the global series and, when the
// reporter says its region, in that region's too.
func (s *Store) observeTTFT(src uint32, region Region, endpointID string, b tokens.Bucket, ttft time.Duration, at time.Time) {
	if endpointID == "" || uint(b) >= tokens.NumBuckets || ttft < 0 {
		s.rejected.Add(1)
		return
	}
	now := s.now().UnixNano()
	t, ok := s.stamp(at, now)
	if !ok {
		return
	}
	e := s.Endpoint(endpointID)
	x := sample{at: t, v: float64(ttft), src: src}
	e.ttft[b].observe(&s.p, x, now, true)
	if rt := e.regional(region, true); rt != nil {
		rt[b].observe(&s.p, x, now, true)
	}
}

// ObserveThroughput records output tokens per second of one completed call.
// A value that is not a positive finite number is rejected: a call with no
// output has no throughput.
func (s *Store) ObserveThroughput(endpointID string, tokensPerSecond float64, at time.Time) {
	s.observeThroughput(0, endpointID, tokensPerSecond, at)
}

func (s *Store) observeThroughput(src uint32, endpointID string, tokensPerSecond float64, at time.Time) {
	if endpointID == "" || !(tokensPerSecond > 0) || math.IsInf(tokensPerSecond, 1) {
		s.rejected.Add(1)
		return
	}
	now := s.now().UnixNano()
	t, ok := s.stamp(at, now)
	if !ok {
		return
	}
	s.Endpoint(endpointID).throughput.observe(&s.p, sample{at: t, v: tokensPerSecond, src: src}, now, false)
}

// ObserveCache records one call's prompt and cached tokens, for the
// endpoint's observed cache-hit rate. A call with no prompt tokens or negative
// cached tokens is rejected; cached tokens above the prompt are counted as the
// whole prompt, so that one bad usage report cannot push the rate above 1.
func (s *Store) ObserveCache(endpointID string, promptTokens, cachedTokens int64, at time.Time) {
	s.observeCache(0, endpointID, promptTokens, cachedTokens, at)
}

func (s *Store) observeCache(src uint32, endpointID string, promptTokens, cachedTokens int64, at time.Time) {
	if endpointID == "" || promptTokens <= 0 || cachedTokens < 0 {
		s.rejected.Add(1)
		return
	}
	now := s.now().UnixNano()
	t, ok := s.stamp(at, now)
	if !ok {
		return
	}
	x := ratioSample{at: t, num: float64(min(cachedTokens, promptTokens)), den: float64(promptTokens), src: src}
	s.Endpoint(endpointID).cache.observe(&s.p, x, now)
}

// ObserveOutput records one call's output tokens for the model's typical
// output. Negative counts and an empty id are rejected.
func (s *Store) ObserveOutput(modelID string, outputTokens int64, at time.Time) {
	s.observeOutput(0, modelID, outputTokens, at)
}

func (s *Store) observeOutput(src uint32, modelID string, outputTokens int64, at time.Time) {
	if modelID == "" || outputTokens < 0 {
		s.rejected.Add(1)
		return
	}
	now := s.now().UnixNano()
	t, ok := s.stamp(at, now)
	if !ok {
		return
	}
	s.Model(modelID).output.observe(&s.p, sample{at: t, v: float64(outputTokens), src: src}, now, false)
}

// stamp turns an observation time into Unix ns: zero means now, the future
// is clamped to now (clock skew must not buy extra weight), and a time
// already outside the window is refused.
func (s *Store) stamp(at time.Time, now int64) (int64, bool) {
	if at.IsZero() {
		return now, true
	}
	t := min(at.UnixNano(), now)
	return t, t > now-s.p.window
}

// Endpoint returns the statistics of endpointID, creating its (empty) series
// if needed, so that observations made later through the store land in the
// returned handle. Resolve handles again after [Store.Forget] or
// [Store.Restore] of a new owner: a forgotten handle reads as empty. Looking
// up an existing endpoint allocates nothing.
func (s *Store) Endpoint(id string) *Endpoint {
	if v, ok := s.endpoints.Load(id); ok {
		return v.(*Endpoint)
	}
	v, _ := s.endpoints.LoadOrStore(id, newEndpoint(id))
	return v.(*Endpoint)
}

// Model returns the statistics of modelID, creating its (empty) series if
// needed; see [Store.Endpoint].
func (s *Store) Model(id string) *Model {
	if v, ok := s.models.Load(id); ok {
		return v.(*Model)
	}
	v, _ := s.models.LoadOrStore(id, newModel(id))
	return v.(*Model)
}

func (s *Store) lookup(id string) *Endpoint {
	v, ok := s.endpoints.Load(id)
	if !ok {
		return nil
	}
	return v.(*Endpoint)
}

// TTFT returns the typical TTFT of endpointID in bucket b and the number of
// samples in the window behind it (0, 0, false if none). It takes no lock and
// allocates nothing.
func (s *Store) TTFT(endpointID string, b tokens.Bucket) (typical time.Duration, samples int, ok bool) {
	return s.lookup(endpointID).TTFT(b)
}

// Throughput returns the typical output tokens per second of endpointID and
// the number of samples behind it (0, 0, false if none).
func (s *Store) Throughput(endpointID string) (tokensPerSecond float64, samples int, ok bool) {
	return s.lookup(endpointID).Throughput()
}

// CacheHitRate returns the decayed Σcached/Σprompt of endpointID's calls in
// the window, in [0, 1], and the number of calls behind it (0, 0, false if
// none).
func (s *Store) CacheHitRate(endpointID string) (rate float64, samples int, ok bool) {
	return s.lookup(endpointID).CacheHitRate()
}

// TypicalOutput returns the weighted median of modelID's output tokens per
// call and the number of calls behind it (0, 0, false if none).
func (s *Store) TypicalOutput(modelID string) (outputTokens int64, samples int, ok bool) {
	v, found := s.models.Load(modelID)
	if !found {
		return 0, 0, false
	}
	return v.(*Model).TypicalOutput()
}

// ID returns the endpoint id.
func (e *Endpoint) ID() string { return e.id }

// TTFT is [Store.TTFT] without the lookup.
func (e *Endpoint) TTFT(b tokens.Bucket) (typical time.Duration, samples int, ok bool) {
	if e == nil || uint(b) >= tokens.NumBuckets {
		return 0, 0, false
	}
	return e.ttft[b].duration()
}

// duration returns a TTFT series' published summary.
func (m *medianSeries) duration() (typical time.Duration, samples int, ok bool) {
	v, n := m.pub.load()
	if n == 0 {
		return 0, 0, false
	}
	return time.Duration(math.Round(v)), n, true
}

// Throughput is [Store.Throughput] without the lookup.
func (e *Endpoint) Throughput() (tokensPerSecond float64, samples int, ok bool) {
	if e == nil {
		return 0, 0, false
	}
	v, n := e.throughput.pub.load()
	if n == 0 {
		return 0, 0, false
	}
	return v, n, true
}

// CacheHitRate is [Store.CacheHitRate] without the lookup.
func (e *Endpoint) CacheHitRate() (rate float64, samples int, ok bool) {
	if e == nil {
		return 0, 0, false
	}
	v, n := e.cache.pub.load()
	if n == 0 || math.IsNaN(v) {
		return 0, 0, false
	}
	return v, n, true
}

// ID returns the model id.
func (m *Model) ID() string { return m.id }

// TypicalOutput is [Store.TypicalOutput] without the lookup.
func (m *Model) TypicalOutput() (outputTokens int64, samples int, ok bool) {
	if m == nil {
		return 0, 0, false
	}
	x, n := m.output.pub.load()
	if n == 0 {
		return 0, 0, false
	}
	return int64(math.Round(x)), n, true
}

// Refresh drops the samples that left the window and republishes the
// summaries they were part of; the decider calls it every second from a
// ticker. Decay alone never changes a summary (see the package
// documentation), so only series whose oldest sample has expired are
// recomputed, and the others cost one atomic load each.
func (s *Store) Refresh() {
	now := s.now().UnixNano()
	s.endpoints.Range(func(_, v any) bool {
		e := v.(*Endpoint)
		for i := range e.ttft {
			e.ttft[i].refresh(&s.p, now, true)
		}
		e.eachRegional(func(_ Region, rt *regionalTTFT) {
			for i := range rt {
				rt[i].refresh(&s.p, now, true)
			}
		})
		e.throughput.refresh(&s.p, now, false)
		e.cache.refresh(&s.p, now)
		return true
	})
	s.models.Range(func(_, v any) bool {
		v.(*Model).output.refresh(&s.p, now, false)
		return true
	})
}

// Forget drops every series of an endpoint (endpoint removed from the
// catalog) and empties them, so that a handle still held by an old routing
// index reads as no data rather than as stale speed. An observation racing
// with Forget may create the endpoint again; forget an endpoint after the
// catalog stops routing to it.
func (s *Store) Forget(endpointID string) {
	v, ok := s.endpoints.LoadAndDelete(endpointID)
	if !ok {
		return
	}
	e := v.(*Endpoint)
	now := s.now().UnixNano()
	for i := range e.ttft {
		e.ttft[i].replace(&s.p, nil, now, true)
	}
	e.eachRegional(func(_ Region, rt *regionalTTFT) {
		for i := range rt {
			rt[i].replace(&s.p, nil, now, true)
		}
	})
	e.throughput.replace(&s.p, nil, now, false)
	e.cache.replace(&s.p, nil, now)
}

// Rejected returns the number of observations refused as invalid (negative
// durations, unknown buckets, empty ids…), for a metric: a rising count means
// an edge reports garbage.
func (s *Store) Rejected() uint64 { return s.rejected.Load() }
