package sim

import (
	"math"
	"math/rand/v2"
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
func (p *provider) call(now time.Time, rng *rand.Rand, prompt int64, sessionID int, sys sharedPrefix) answer {
	if ra, full := p.admit(now, prompt); full {
		return answer{outcome: outcomeRateLimited, ttft: 100 * time.Millisecond, retryAfter: ra}
	}
	if rng.Float64() < p.cfg.Errors.HangRate {
		return answer{outcome: outcomeHang}
	}
	if rng.Float64() < p.cfg.Errors.ServerErrorRate {
		// A 5xx comes back quickly, before the prompt is read.
		return answer{outcome: outcomeServerError, ttft: 200*time.Millisecond + time.Duration(rng.Float64()*float64(1800*time.Millisecond))}
	}
	var cached int64
	if e, ok := p.cache[sessionID]; ok && sessionID >= 0 && now.Before(e.expires) && e.tokens <= prompt && rng.Float64() < p.cfg.Cache.HitRate {
		cached = e.tokens
	}
	if cached == 0 && sys.id > 0 {
		// No earlier turn of its own read from cache: the shared system
		// prompt may be, read for another conversation.
		if e, ok := p.shared[sys.id]; ok && now.Before(e.expires) && e.tokens <= prompt && rng.Float64() < p.cfg.Cache.HitRate {
			cached = e.tokens
		}
	}
	return answer{outcome: outcomeOK, ttft: p.ttft(now, rng, prompt, cached), cached: cached}
}

// admit counts a call against the provider's capacity over the last
// minute; full says it is refused, with the Retry-After to send.
func (p *provider) admit(now time.Time, prompt int64) (time.Duration, bool) {
	i := 0
	for i < len(p.load) && now.Sub(p.load[i].at) >= time.Minute {
		p.loadTokens -= p.load[i].tokens
		i++
	}
	p.load = p.load[i:]
	c := p.cfg.Capacity
	if (c.RequestsPerMinute > 0 && len(p.load)+1 > c.RequestsPerMinute) ||
		(c.TokensPerMinute > 0 && p.loadTokens+prompt > int64(c.TokensPerMinute)) {
		return c.RetryAfter.D(), true
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

// slowdown is the TTFT factor of the slow episodes running at now.
func (p *provider) slowdown(now time.Time) float64 {
	f := 1.0
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
