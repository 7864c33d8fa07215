package sim

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// outcome is how a simulated provider answers one call.
type outcome int

const (
	outcomeOK          outcome = iota
	outcomeRateLimited         // 429 with Retry-After
	outcomeServerError         // 5xx before any token
	outcomeHang                // accepted, never a first token
)

// answer is a provider's answer to one call, drawn when the call starts.
type answer struct {
	outcome outcome
	// ttft is the time to the first token (outcomeOK) or to the error.
	ttft       time.Duration
	cached     int64
	retryAfter time.Duration
}

// provider is one simulated provider of one model: its behaviour from the
// profile, its prompt cache and its recent load.
type provider struct {
	cfg        Provider
	endpointID string
	rates      catalog.Rates
	cache      map[int]cacheEntry // session id → the last prompt it read
	shared     map[int]cacheEntry // shared system prompt id → when it read it
	load       []loadEntry        // calls accepted in the last minute, oldest first
	loadTokens int64
	inflight   int        // calls started and not yet ended, failed or cancelled
	episodes   []slowSpan // the random slow episodes, by start
}

// slowSpan is a stretch of time from at, until the next span's at, during
// which the random slow episodes multiply TTFT by factor.
type slowSpan struct {
	at     time.Time
	factor float64
}

type cacheEntry struct {
	tokens  int64
	expires time.Time
}

type loadEntry struct {
	at     time.Time
	tokens int64
}

func newProvider(cfg Provider, endpointID string) *provider {
	return &provider{cfg: cfg, endpointID: endpointID, rates: cfg.Price.rates(), cache: map[int]cacheEntry{}, shared: map[int]cacheEntry{}}
}

// sharedPrefix is the system prompt (with its tool block) a conversation
// shares with others: id 0 for none, else which of the traffic's shared
// prompts, of tokens tokens.
type sharedPrefix struct {
	id     int
	tokens int64
}

// call draws the answer to a call started at now with a prompt of prompt
// tokens; sessionID ≥ 0 names the conversation whose earlier prompt this
// one extends, for the cache, and sys the system prompt it shares with
// other conversations, which the provider may hold from any of them.
// Every answer but a 429 counts the call in flight until the caller ends it.
func (p *provider) call(now time.Time, rng *rand.Rand, prompt int64, sessionID int, sys sharedPrefix) answer {
	if ra, full := p.admit(now, prompt); full {
		return answer{outcome: outcomeRateLimited, ttft: 100 * time.Millisecond, retryAfter: ra}
	}
	queue := p.queueFactor()
	p.inflight++
	if p.down(now) {
		// A provider that is down refuses at once, before the prompt is read.
		return answer{outcome: outcomeServerError, ttft: 100 * time.Millisecond}
	}
	if rng.Float64() < p.cfg.Errors.HangRate {
		return answer{outcome: outcomeHang}
	}
	if rng.Float64() < p.cfg.Errors.ServerErrorRate {
		// A 5xx comes back quickly, before the prompt is read.
		return answer{outcome: outcomeServerError, ttft: 200*time.Millisecond + time.Duration(rng.Float64()*float64(1800*time.Millisecond))}
	}
	var cached int64
	if e, ok := p.cached(now, prompt, sessionID); ok && rng.Float64() < p.cfg.Cache.HitRate {
		cached = e
	}
	if cached == 0 && sys.id > 0 {
		// No earlier turn of its own read from cache: the shared system
		// prompt may be, read for another conversation.
		if e, ok := p.shared[sys.id]; ok && now.Before(e.expires) && e.tokens <= prompt && rng.Float64() < p.cfg.Cache.HitRate {
			cached = e.tokens
		}
	}
	return answer{outcome: outcomeOK, ttft: time.Duration(float64(p.ttft(now, rng, prompt, cached)) * queue), cached: cached}
}

// cached is the prompt of sessionID the provider holds in its cache at now,
// if it holds one this prompt extends.
func (p *provider) cached(now time.Time, prompt int64, sessionID int) (int64, bool) {
	e, ok := p.cache[sessionID]
	if !ok || sessionID < 0 || !now.Before(e.expires) || e.tokens > prompt {
		return 0, false
	}
	return e.tokens, true
}

// held is what the provider holds in cache for a call of sessionID with
// this prompt at now: the conversation's own earlier prompt, else the
// shared system prompt sys read for any conversation; ok is false when it
// holds neither. A call reads it at the cache's hit rate (call).
func (p *provider) held(now time.Time, prompt int64, sessionID int, sys sharedPrefix) (int64, bool) {
	if n, ok := p.cached(now, prompt, sessionID); ok {
		return n, true
	}
	if sys.id > 0 {
		if e, ok := p.shared[sys.id]; ok && now.Before(e.expires) && e.tokens <= prompt {
			return e.tokens, true
		}
	}
	return 0, false
}

// end notes that a call counted in flight ended.
func (p *provider) end() {
	p.inflight = max(p.inflight-1, 0)
}

// queueFactor is the TTFT factor of the calls in flight (see Queue) for a
// call starting now.
func (p *provider) queueFactor() float64 {
	q := p.cfg.Queue
	if q.Concurrency <= 0 {
		return 1
	}
	return 1 + q.Slope*float64(max(0, p.inflight+1-q.Concurrency))/float64(q.Concurrency)
}

// full reports whether a call of prompt tokens at now would be refused for
// capacity, without counting it.
func (p *provider) full(now time.Time, prompt int64) bool {
	i := 0
	for i < len(p.load) && now.Sub(p.load[i].at) >= time.Minute {
		p.loadTokens -= p.load[i].tokens
		i++
	}
	p.load = p.load[i:]
	c := p.cfg.Capacity
	return (c.RequestsPerMinute > 0 && len(p.load)+1 > c.RequestsPerMinute) ||
		(c.TokensPerMinute > 0 && p.loadTokens+prompt > int64(c.TokensPerMinute))
}

// expectedTTFT is the median first-token time of a call of prompt tokens,
// cached of them read from cache, started at now: the curve's median at the
// effective size times the slow episodes and the queue — what the oracle
// policy knows of each endpoint.
func (p *provider) expectedTTFT(now time.Time, prompt int64, cached float64) time.Duration {
	m := p.cfg.TTFT
	eff := float64(prompt) - cached + m.CachedTokenWeight*cached
	return time.Duration(median(m.Curve, eff) * p.slowdown(now) * p.queueFactor())
}

// admit counts a call against the provider's capacity over the last
// minute; full says it is refused, with the Retry-After to send.
func (p *provider) admit(now time.Time, prompt int64) (time.Duration, bool) {
	if p.full(now, prompt) {
		return p.cfg.Capacity.RetryAfter.D(), true
	}
	p.load = append(p.load, loadEntry{at: now, tokens: prompt})
	p.loadTokens += prompt
	return 0, false
}

// ttft draws one time to first token (see TTFTModel).
func (p *provider) ttft(now time.Time, rng *rand.Rand, prompt, cached int64) time.Duration {
	m := p.cfg.TTFT
	eff := float64(prompt-cached) + m.CachedTokenWeight*float64(cached)
	f := math.Exp(m.Spread * rng.NormFloat64())
	if m.Tail.Probability > 0 && rng.Float64() < m.Tail.Probability {
		u := 1 - rng.Float64() // (0, 1]
		f *= min(m.Tail.MinFactor*math.Pow(u, -1/m.Tail.Alpha), m.Tail.MaxFactor)
	}
	return time.Duration(median(m.Curve, eff) * f * p.slowdown(now))
}

// median reads the curve at eff tokens, in nanoseconds.
func median(curve []CurvePoint, eff float64) float64 {
	if len(curve) == 1 {
		return float64(curve[0].TTFT)
	}
	i := 1
	for i < len(curve)-1 && eff > float64(curve[i].Tokens) {
		i++
	}
	a, b := curve[i-1], curve[i]
	x := (eff - float64(a.Tokens)) / float64(b.Tokens-a.Tokens)
	return max(float64(a.TTFT)+x*float64(b.TTFT-a.TTFT), float64(time.Millisecond))
}

// slowdown is the TTFT factor of the slow episodes, scheduled and random,
// running at now.
func (p *provider) slowdown(now time.Time) float64 {
	f := 1.0
	if n := len(p.episodes); n > 0 {
		i := sort.Search(n, func(i int) bool { return p.episodes[i].at.After(now) }) // the first span after now
		if i > 0 {
			f = p.episodes[i-1].factor
		}
	}
	if len(p.cfg.Slow) == 0 {
		return f
	}
	u := now.UTC()
	day := time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
	for _, e := range p.cfg.Slow {
		for _, d := range []time.Time{day.AddDate(0, 0, -1), day} { // an episode may cross midnight
			from := d.Add(time.Duration(e.From))
			if !u.Before(from) && u.Before(from.Add(e.Duration.D())) {
				f *= e.Factor
			}
		}
	}
	return f
}

// down reports whether one of the scripted outages runs at now.
func (p *provider) down(now time.Time) bool {
	u := now.UTC()
	day := time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
	for _, o := range p.cfg.Errors.Outages {
		for _, d := range []time.Time{day.AddDate(0, 0, -1), day} { // an outage may cross midnight
			from := d.Add(time.Duration(o.From))
			if !u.Before(from) && u.Before(from.Add(o.Duration.D())) {
				return true
			}
		}
	}
	return false
}

// warm notes that the provider read sessionID's prompt of tokens at now,
// and with it the shared system prompt sys: the next turn, and any
// conversation starting with sys, may read them from cache until the
// lifetime passes.
func (p *provider) warm(sessionID int, tokens int64, now time.Time, sys sharedPrefix) {
	if sessionID < 0 || p.cfg.Cache.HitRate == 0 {
		return
	}
	p.cache[sessionID] = cacheEntry{tokens: tokens, expires: now.Add(p.cfg.Cache.Lifetime.D())}
	if sys.id > 0 {
		p.shared[sys.id] = cacheEntry{tokens: min(sys.tokens, tokens), expires: now.Add(p.cfg.Cache.Lifetime.D())}
	}
}

// genTime is how long the answer of output tokens takes after the first.
func (p *provider) genTime(output int64) time.Duration {
	return time.Duration(float64(max(output-1, 0)) / p.cfg.OutputTokensPerSecond * float64(time.Second))
}

// drawEpisodes draws the provider's random slow episodes starting in
// [from, to) from seed and each entry's group (or the endpoint id) alone,
// so that every policy run with that seed meets the same ones.
func (p *provider) drawEpisodes(seed uint64, from, to time.Time) {
	type edge struct {
		at     time.Time
		factor float64
		start  bool
	}
	var edges []edge
	for k, e := range p.cfg.RandomSlow {
		key := e.Group
		if key == "" {
			key = p.endpointID
		}
		h := fnv.New64a()
		_, _ = h.Write([]byte(key))
		rng := rand.New(rand.NewPCG(seed^0x736c6f77, h.Sum64()+uint64(k)))
		for t := from; ; {
			t = t.Add(time.Duration(rng.ExpFloat64() / e.PerHour * float64(time.Hour)))
			if !t.Before(to) {
				break
			}
			d := min(time.Duration(float64(e.Duration.Median)*math.Exp(e.Duration.Spread*rng.NormFloat64())), e.Duration.Max.D())
			f := e.Factor
			if e.FactorMax > e.Factor {
				f += rng.Float64() * (e.FactorMax - e.Factor)
			}
			edges = append(edges, edge{t, f, true}, edge{t.Add(d), f, false})
		}
	}
	slices.SortStableFunc(edges, func(a, b edge) int { return a.at.Compare(b.at) })
	p.episodes = p.episodes[:0]
	var active []float64 // the factors of the episodes running
	for i, e := range edges {
		if e.start {
			active = append(active, e.factor)
		} else if j := slices.Index(active, e.factor); j >= 0 {
			active = slices.Delete(active, j, j+1)
		}
		if i+1 < len(edges) && edges[i+1].at.Equal(e.at) {
			continue // one span per instant
		}
		f := 1.0
		for _, a := range active {
			f *= a
		}
		p.episodes = append(p.episodes, slowSpan{at: e.at, factor: f})
	}
}
