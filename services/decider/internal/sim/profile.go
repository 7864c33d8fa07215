package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// Profile is how the simulated providers behave: per model, the providers
// that sell it, with their prices and speeds. The format is documented in
// sim/README.md of the repository.
type Profile struct {
	// Models are the simulated models. (Required, at least one)
	Models []ProfileModel `yaml:"models"`
}

// ProfileModel is one model and the providers selling it.
type ProfileModel struct {
	// ID is the model id requests name. (Required)
	ID string `yaml:"id"`
	// ListPrice is the model maker's official price. (Optional)
	ListPrice *Price `yaml:"list_price"`
	// Providers sell the model. (Required, at least one)
	Providers []Provider `yaml:"providers"`
}

// Price is USD per million tokens.
type Price struct {
	// Input is the price of an uncached input token. (Required)
	Input *float64 `yaml:"input"`
	// CachedInput is the price of an input token read from cache. (Optional) Defaults to Input.
	CachedInput *float64 `yaml:"cached_input"`
	// Output is the price of an output token. (Required)
	Output *float64 `yaml:"output"`
}

// Provider is one provider's offer of a model and how it behaves.
type Provider struct {
	// Name is the provider name. (Required)
	Name string `yaml:"name"`
	// Price is what it charges. (Required)
	Price Price `yaml:"price"`
	// ContextLength is the largest prompt plus output. (Optional) 0 means unbounded.
	ContextLength Tokens `yaml:"context_length"`
	// TTFT is its time to first token. (Required)
	TTFT TTFTModel `yaml:"ttft"`
	// OutputTokensPerSecond is its generation speed. (Required)
	OutputTokensPerSecond float64 `yaml:"output_tokens_per_second"`
	// Cache is its prompt cache. (Optional) Defaults to no cache.
	Cache CacheModel `yaml:"cache"`
	// Capacity is the load above which it answers 429. (Optional) Defaults to unlimited.
	Capacity Capacity `yaml:"capacity"`
	// Errors are its failures other than 429. (Optional)
	Errors Errors `yaml:"errors"`
	// Slow are its slow episodes. (Optional)
	Slow []Episode `yaml:"slow"`
	// RandomSlow are slow episodes drawn from the seed. (Optional)
	RandomSlow []RandomEpisodes `yaml:"random_slow"`
	// Queue makes its TTFT grow with the calls it has in flight. (Optional) Defaults to none.
	Queue Queue `yaml:"queue"`
}

// Queue is a provider's load-dependent first-token time: with n calls in
// flight when a call starts, its TTFT is multiplied by
// 1 + Slope × max(0, n + 1 − Concurrency) / Concurrency. With Slope 1 the
// calls beyond Concurrency share its slots: n + 1 calls on c slots each take
// (n + 1) / c times as long. A call is in flight from its start until its
// answer ends, it fails, or the edge cancels it; a call answered 429 never is.
type Queue struct {
	// Concurrency is how many calls it serves at full speed. (Optional) 0 means load never slows it.
	Concurrency int `yaml:"concurrency"`
	// Slope is the TTFT added per call over Concurrency, in units of
	// 1/Concurrency of the unloaded TTFT. (Optional) Defaults to 1.
	Slope float64 `yaml:"slope"`
}

// RandomEpisodes are slow episodes that start at random, a Poisson process
// of PerHour starts an hour drawn from the seed alone: every policy meets the
// same episodes. During one, every call the provider starts is Factor times
// slower (a factor drawn uniformly in [Factor, FactorMax] per episode when
// FactorMax is set): the slowdown is correlated in time, unlike the per-call
// tail. Providers that name the same Group, with the same settings, meet the
// same episodes, as resellers of one upstream would.
type RandomEpisodes struct {
	// PerHour is the mean number of episodes starting per hour. (Required, in (0, 60])
	PerHour float64 `yaml:"per_hour"`
	// Duration is how long an episode lasts. (Required)
	Duration EpisodeLength `yaml:"duration"`
	// Factor multiplies TTFT. (Required, > 0)
	Factor float64 `yaml:"factor"`
	// FactorMax, when set, draws each episode's factor uniformly in [Factor, FactorMax]. (Optional)
	FactorMax float64 `yaml:"factor_max"`
	// Group shares the draws between the providers naming it. (Optional) Defaults to the provider's own.
	Group string `yaml:"group"`
}

// EpisodeLength is a clamped lognormal duration.
type EpisodeLength struct {
	// Median duration. (Required)
	Median Duration `yaml:"median"`
	// Spread is the lognormal sigma. (Optional) Defaults to 0.
	Spread float64 `yaml:"spread"`
	// Max caps a duration. (Optional) Defaults to 4h.
	Max Duration `yaml:"max"`
}

// TTFTModel gives a provider's time to first token. The median is read off
// Curve at the prompt's effective size, uncached tokens plus cached tokens
// times CachedTokenWeight, by linear interpolation (extrapolated past the last
// point along its last segment); a call's TTFT is that median times a
// lognormal factor of median 1 and sigma Spread, times a Pareto factor on a
// share Tail.Probability of calls, times the factor of any slow episode.
type TTFTModel struct {
	// Curve is the median TTFT at prompt sizes, ascending. (Required, at least one point)
	Curve []CurvePoint `yaml:"curve"`
	// CachedTokenWeight is what a cached token costs in read time relative to
	// an uncached one, in [0, 1]. (Optional) Defaults to 0: cache reads are free.
	CachedTokenWeight float64 `yaml:"cached_token_weight"`
	// Spread is the sigma of the lognormal factor. (Optional) Defaults to 0.
	Spread float64 `yaml:"spread"`
	// Tail is the heavy tail. (Optional) Defaults to none.
	Tail Tail `yaml:"tail"`
}

// CurvePoint is the median TTFT at one prompt size.
type CurvePoint struct {
	// Tokens is the effective prompt size. (Required)
	Tokens Tokens `yaml:"tokens"`
	// TTFT is the median time to first token there. (Required)
	TTFT Duration `yaml:"ttft"`
}

// Tail is a Pareto slowdown on a share of calls: the factor is MinFactor ×
// U^(−1/Alpha), capped at MaxFactor.
type Tail struct {
	// Probability is the share of calls slowed. (Optional) Defaults to 0.
	Probability float64 `yaml:"probability"`
	// Alpha is the Pareto shape; smaller is heavier. (Required with Probability)
	Alpha float64 `yaml:"alpha"`
	// MinFactor is the smallest slowdown. (Optional) Defaults to 1.
	MinFactor float64 `yaml:"min_factor"`
	// MaxFactor caps the slowdown. (Optional) Defaults to 50.
	MaxFactor float64 `yaml:"max_factor"`
}

// CacheModel is a provider's prompt cache.
type CacheModel struct {
	// HitRate is the share of follow-up turns, sent within Lifetime of the
	// previous one, that read the previous turn's prompt from cache. (Optional) Defaults to 0.
	HitRate float64 `yaml:"hit_rate"`
	// Lifetime is how long a cached prompt lives after its last use. (Optional) Defaults to 5m.
	Lifetime Duration `yaml:"lifetime"`
	// CancelledLegWarms says the provider finishes reading a prompt whose
	// call the edge cancelled (the losing leg of a hedge) and keeps it in
	// its cache, as if it had answered. (Optional) Defaults to false: only
	// an answered call warms the cache.
	CancelledLegWarms bool `yaml:"cancelled_leg_warms"`
}

// Capacity is the load a provider takes: over a sliding minute, more
// requests or prompt tokens than this are answered 429 with RetryAfter.
type Capacity struct {
	// RequestsPerMinute (Optional) 0 means unlimited.
	RequestsPerMinute int `yaml:"requests_per_minute"`
	// TokensPerMinute counts prompt tokens. (Optional) 0 means unlimited.
	TokensPerMinute Tokens `yaml:"tokens_per_minute"`
	// RetryAfter is sent with each 429. (Optional) Defaults to 30s.
	RetryAfter Duration `yaml:"retry_after"`
}

// Errors are failures other than 429.
type Errors struct {
	// ServerErrorRate is the share of calls answered 5xx before any token. (Optional)
	ServerErrorRate float64 `yaml:"server_error_rate"`
	// HangRate is the share of calls that never produce a first token. (Optional)
	HangRate float64 `yaml:"hang_rate"`
	// Outages are scripted spans (every simulated day) in which every call
	// is answered 5xx at once, to watch a cool-down start and end. (Optional)
	Outages []Outage `yaml:"outages"`
}

// Outage makes a provider answer every call 5xx from From (UTC time of day,
// every simulated day) for Duration.
type Outage struct {
	// From is the start, hh:mm or hh:mm:ss UTC. (Required)
	From ClockTime `yaml:"from"`
	// Duration is how long it lasts. (Required, > 0)
	Duration Duration `yaml:"duration"`
}

// Episode makes a provider Factor times slower from From (UTC time of day,
// every simulated day) for Duration.
type Episode struct {
	// From is the start, hh:mm or hh:mm:ss UTC. (Required)
	From ClockTime `yaml:"from"`
	// Duration is how long it lasts. (Required)
	Duration Duration `yaml:"duration"`
	// Factor multiplies TTFT. (Required, > 0)
	Factor float64 `yaml:"factor"`
}

// ParseProfile parses and validates a provider profile, reporting every
// problem at once with its line.
func ParseProfile(data []byte) (*Profile, error) {
	var p Profile
	c, err := decodeYAML("profile", data, &p)
	if err != nil {
		return nil, err
	}
	if len(p.Models) == 0 {
		c.bad("models", "at least one model is required")
	}
	ids := map[string]bool{}
	for i, m := range p.Models {
		path := fmt.Sprintf("models[%d]", i)
		if m.ID == "" {
			c.bad(path+".id", "is required")
		} else if ids[m.ID] {
			c.bad(path+".id", "model %q appears twice", m.ID)
		}
		ids[m.ID] = true
		if m.ListPrice != nil {
			checkPrice(c, path+".list_price", *m.ListPrice)
		}
		if len(m.Providers) == 0 {
			c.bad(path+".providers", "at least one provider is required")
		}
		names := map[string]bool{}
		for j, pr := range m.Providers {
			checkProvider(c, fmt.Sprintf("%s.providers[%d]", path, j), pr, names)
		}
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	for i := range p.Models {
		for j := range p.Models[i].Providers {
			applyProviderDefaults(&p.Models[i].Providers[j])
		}
	}
	return &p, nil
}

func checkPrice(c *checker, path string, p Price) {
	for _, f := range []struct {
		name string
		v    *float64
		req  bool
	}{{"input", p.Input, true}, {"cached_input", p.CachedInput, false}, {"output", p.Output, true}} {
		switch {
		case f.v == nil && f.req:
			c.bad(path+"."+f.name, "is required")
		case f.v != nil && !(*f.v >= 0 && !math.IsInf(*f.v, 0)):
			c.bad(path+"."+f.name, "must be a non-negative number")
		}
	}
}

func checkProvider(c *checker, path string, p Provider, names map[string]bool) {
	switch {
	case p.Name == "":
		c.bad(path+".name", "is required")
	case names[p.Name]:
		c.bad(path+".name", "provider %q appears twice", p.Name)
	}
	names[p.Name] = true
	checkPrice(c, path+".price", p.Price)
	if p.ContextLength < 0 {
		c.bad(path+".context_length", "must not be negative")
	}
	t := p.TTFT
	if len(t.Curve) == 0 {
		c.bad(path+".ttft.curve", "at least one point is required")
	}
	for k, pt := range t.Curve {
		pp := fmt.Sprintf("%s.ttft.curve[%d]", path, k)
		if pt.Tokens < 0 {
			c.bad(pp+".tokens", "must not be negative")
		}
		if pt.TTFT <= 0 {
			c.bad(pp+".ttft", "must be positive")
		}
		if k > 0 && pt.Tokens <= t.Curve[k-1].Tokens {
			c.bad(pp+".tokens", "must be larger than the previous point's")
		}
	}
	if !(t.CachedTokenWeight >= 0 && t.CachedTokenWeight <= 1) {
		c.bad(path+".ttft.cached_token_weight", "must be in [0, 1]")
	}
	if !(t.Spread >= 0 && t.Spread <= 3) {
		c.bad(path+".ttft.spread", "must be in [0, 3]")
	}
	checkShare(c, path+".ttft.tail.probability", t.Tail.Probability)
	if t.Tail.Probability > 0 && !(t.Tail.Alpha > 0) {
		c.bad(path+".ttft.tail.alpha", "must be positive when tail.probability is set")
	}
	if t.Tail.MinFactor < 0 || t.Tail.MaxFactor < 0 || (t.Tail.MaxFactor > 0 && t.Tail.MaxFactor < max(t.Tail.MinFactor, 1)) {
		c.bad(path+".ttft.tail", "min_factor and max_factor must be positive, max_factor at least min_factor")
	}
	if !(p.OutputTokensPerSecond > 0) {
		c.bad(path+".output_tokens_per_second", "must be positive")
	}
	checkShare(c, path+".cache.hit_rate", p.Cache.HitRate)
	if p.Cache.Lifetime < 0 {
		c.bad(path+".cache.lifetime", "must not be negative")
	}
	if p.Capacity.RequestsPerMinute < 0 || p.Capacity.TokensPerMinute < 0 || p.Capacity.RetryAfter < 0 {
		c.bad(path+".capacity", "must not be negative")
	}
	checkShare(c, path+".errors.server_error_rate", p.Errors.ServerErrorRate)
	checkShare(c, path+".errors.hang_rate", p.Errors.HangRate)
	if p.Queue.Concurrency < 0 {
		c.bad(path+".queue.concurrency", "must not be negative")
	}
	if !(p.Queue.Slope >= 0 && p.Queue.Slope <= 100) {
		c.bad(path+".queue.slope", "must be in [0, 100]")
	}
	if p.Queue.Slope > 0 && p.Queue.Concurrency == 0 {
		c.bad(path+".queue.concurrency", "must be positive when queue.slope is set")
	}
	for k, e := range p.RandomSlow {
		ep := fmt.Sprintf("%s.random_slow[%d]", path, k)
		if !(e.PerHour > 0 && e.PerHour <= 60) {
			c.bad(ep+".per_hour", "must be in (0, 60]")
		}
		if e.Duration.Median <= 0 {
			c.bad(ep+".duration.median", "must be positive")
		}
		if !(e.Duration.Spread >= 0 && e.Duration.Spread <= 3) {
			c.bad(ep+".duration.spread", "must be in [0, 3]")
		}
		if e.Duration.Max < 0 || e.Duration.Max > Duration(24*time.Hour) {
			c.bad(ep+".duration.max", "must be in [0, 24h]")
		}
		if !(e.Factor > 0 && e.Factor <= 1000) {
			c.bad(ep+".factor", "must be in (0, 1000]")
		}
		if e.FactorMax != 0 && !(e.FactorMax >= e.Factor && e.FactorMax <= 1000) {
			c.bad(ep+".factor_max", "must be at least factor and at most 1000")
		}
	}
	for k, o := range p.Errors.Outages {
		if o.Duration <= 0 {
			c.bad(fmt.Sprintf("%s.errors.outages[%d].duration", path, k), "must be positive")
		}
	}
	for k, e := range p.Slow {
		ep := fmt.Sprintf("%s.slow[%d]", path, k)
		if e.Duration <= 0 {
			c.bad(ep+".duration", "must be positive")
		}
		if !(e.Factor > 0) {
			c.bad(ep+".factor", "must be positive")
		}
	}
}

func checkShare(c *checker, path string, v float64) {
	if !(v >= 0 && v <= 1) {
		c.bad(path, "must be a share in [0, 1]")
	}
}

func applyProviderDefaults(p *Provider) {
	if p.Price.CachedInput == nil {
		v := *p.Price.Input
		p.Price.CachedInput = &v
	}
	if p.TTFT.Tail.MinFactor == 0 {
		p.TTFT.Tail.MinFactor = 1
	}
	if p.TTFT.Tail.MaxFactor == 0 {
		p.TTFT.Tail.MaxFactor = 50
	}
	if p.Cache.Lifetime == 0 {
		p.Cache.Lifetime = Duration(5 * time.Minute)
	}
	if p.Queue.Concurrency > 0 && p.Queue.Slope == 0 {
		p.Queue.Slope = 1
	}
	for k := range p.RandomSlow {
		if p.RandomSlow[k].Duration.Max == 0 {
			p.RandomSlow[k].Duration.Max = Duration(4 * time.Hour)
		}
	}
	if p.Capacity.RetryAfter == 0 {
		p.Capacity.RetryAfter = Duration(30 * time.Second)
	}
}

// rates returns the price as the pricing package takes it.
func (p Price) rates() catalog.Rates {
	r := catalog.Rates{Input: *p.Input, Output: *p.Output}
	r.CachedInput = r.Input
	if p.CachedInput != nil {
		r.CachedInput = *p.CachedInput
	}
	return r
}

// catalogPrice returns the price as the catalog takes it.
func (p Price) catalogPrice() catalog.Price {
	r := p.rates()
	return catalog.Price{Input: &r.Input, CachedInput: &r.CachedInput, Output: &r.Output}
}

// Catalog is the routing catalog the decider serves for this profile: every
// model with its providers as endpoints, no tenant limits. Base URLs are
// placeholders: nothing is sent anywhere.
func (p *Profile) Catalog() *catalog.Catalog {
	c := &catalog.Catalog{}
	for _, m := range p.Models {
		cm := catalog.Model{ID: m.ID}
		if m.ListPrice != nil {
			lp := m.ListPrice.catalogPrice()
			cm.ListPrice = &lp
		}
		for _, pr := range m.Providers {
			cm.Endpoints = append(cm.Endpoints, catalog.Endpoint{
				Provider:      pr.Name,
				BaseURL:       "http://" + pr.Name + ".sim.invalid/v1",
				UpstreamModel: m.ID,
				Price:         pr.Price.catalogPrice(),
				ContextLength: int64(pr.ContextLength),
			})
		}
		c.Models = append(c.Models, cm)
	}
	slices.SortFunc(c.Models, func(a, b catalog.Model) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return c
}
