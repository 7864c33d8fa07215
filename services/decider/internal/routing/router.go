// Package routing answers Decide for an identity the auth package resolved:
// it filters a model's endpoints by the caller's routing options, prices this exact request on each
// endpoint, and orders them by the default smart policy (the cheapest endpoint
// that is fast enough for this prompt size) or by the user's own choice.
//
// Everything it reads is either an immutable index built from the catalog and
// swapped atomically, or a statistic published atomically by the stats
// package, so Decide never waits on a writer.
package routing

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/affinity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
)

// DefaultOutputTokens is the output priced when a request sets no max_tokens
// and the model's typical output is not known yet.
const DefaultOutputTokens = pricing.DefaultOutputTokens

// MaxTokens bounds a request's input and max output token counts, as
// OpenAI bounds max_tokens (a 32-bit integer). Far above any model's
// context, it keeps every sum and price of token counts finite and exact.
const MaxTokens = math.MaxInt32

// Kind classifies a routing error for the RPC boundary.
type Kind int

// The kinds of routing error.
const (
	KindNotFound    Kind = iota + 1 // unknown model
	KindInvalid                     // malformed routing options or a prompt that fits no endpoint
	KindUnavailable                 // no endpoint meets the request's constraints
)

// Error is a routing error with a message written for the end user.
type Error struct {
	Kind Kind
	Msg  string
}

// Error implements [error.Error].
func (e *Error) Error() string { return e.Msg }

func errorf(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Options tune the policy. The defaults are the rules of the smart policy
// (see the package doc); each is a setting so that it can be tuned.
type Options struct {
	// Stats holds the measured speeds. (Required)
	Stats *stats.Store
	// Affinity remembers where prompts were served. (Optional) Defaults to a new table.
	Affinity *affinity.Table
	// Cooldown benches endpoints that refused calls. (Optional) Defaults to 15 minutes after one refusal.
	Cooldown *cooldown.Tracker
	// SpeedFactor: an endpoint qualifies when its typical TTFT is within this
	// factor of the fastest measured one. (Optional) Defaults to 2.
	SpeedFactor float64
	// FastEnough: an endpoint also qualifies when its typical TTFT is under
	// this. (Optional) Defaults to 1s.
	FastEnough time.Duration
	// Exploration is the share of requests sent to an endpoint with too little
	// data. (Optional) Defaults to 0.05; negative disables.
	Exploration float64
	// MinSamples is how many samples in a bucket are enough data. (Optional) Defaults to 10.
	MinSamples int
	// PriceGuard: an endpoint priced above the usual price wins for speed
	// only when it costs at most this share of the list price. (Optional) Defaults to 0.5.
	PriceGuard float64
	// MaxFallbacks bounds the fallbacks returned. (Optional) Defaults to 5.
	MaxFallbacks int
	// Seed makes exploration reproducible. (Optional) 0 seeds from the clock.
	Seed uint64
	// HedgeFrom is the prompt size, in tokens, from which streaming requests
	// are hedged after HedgeDelay without a first token.
	// (Optional) Defaults to 32k; negative disables hedging.
	HedgeFrom int64
	// HedgeImmediateFrom is the prompt size from which both endpoints start
	// at once. (Optional) Defaults to 128k.
	HedgeImmediateFrom int64
	// HedgeDelay is how long to wait for a first token before hedging. (Optional) Defaults to 1s.
	HedgeDelay time.Duration
	// Now is the clock. (Optional) Defaults to time.Now.
	Now func() time.Time
}

type endpoint struct {
	id             string
	provider       string
	rates          catalog.Rates
	contextLength  int64
	maxOutput      int64 // largest output the endpoint produces; 0 when unknown
	quantization   string
	denyCollection bool
	zdr            bool
	params         map[string]bool
	proto          *switchboardv1.Endpoint // template without per-request fields; never mutated
	st             *stats.Endpoint         // resolved once, so Decide skips the map lookup
}

type model struct {
	id        string
	endpoints []*endpoint
	ids       []string // endpoint ids, for the affinity lookup
	list      *catalog.Rates
	st        *stats.Model
}

type index struct {
	models    map[string]*model
	providers map[string]bool
	list      []*switchboardv1.Model
}

// Router answers Decide and ListModels from the current catalog.
type Router struct {
	o    Options
	idx  atomic.Pointer[index]
	seq  atomic.Uint64
	pool sync.Pool // *scratch
}

// New returns a router serving c.
func New(c *catalog.Catalog, o Options) *Router {
	if o.Stats == nil {
		o.Stats = stats.New(stats.Config{})
	}
	if o.Affinity == nil {
		o.Affinity = affinity.New(affinity.Options{})
	}
	if o.Cooldown == nil {
		o.Cooldown = cooldown.New(cooldown.Options{})
	}
	if o.SpeedFactor <= 0 {
		o.SpeedFactor = 2
	}
	if o.FastEnough <= 0 {
		o.FastEnough = time.Second
	}
	if o.Exploration == 0 {
		o.Exploration = 0.05
	}
	if o.MinSamples <= 0 {
		o.MinSamples = 10
	}
	if o.PriceGuard <= 0 {
		o.PriceGuard = 0.5
	}
	if o.MaxFallbacks <= 0 {
		o.MaxFallbacks = 5
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HedgeFrom == 0 {
		o.HedgeFrom = 32 * tokens.K
	}
	if o.HedgeImmediateFrom <= 0 {
		o.HedgeImmediateFrom = 128 * tokens.K
	}
	if o.HedgeDelay <= 0 {
		o.HedgeDelay = time.Second
	}
	r := &Router{o: o}
	r.pool.New = func() any { return &scratch{} }
	r.SetCatalog(c)
	return r
}

// SetCatalog replaces the catalog; requests in flight finish on the old one.
func (r *Router) SetCatalog(c *catalog.Catalog) {
	idx := &index{
		models:    map[string]*model{},
		providers: map[string]bool{},
	}
	for _, m := range c.Models {
		mm := &model{id: m.ID, st: r.o.Stats.Model(m.ID)}
		lm := &switchboardv1.Model{Id: m.ID}
		if m.ListPrice != nil {
			lr := m.ListPrice.Rates()
			mm.list = &lr
			lm.ListPrice = &switchboardv1.Price{Input: lr.Input, CachedInput: lr.CachedInput, Output: lr.Output}
		}
		for _, e := range m.Endpoints {
			rates := e.Price.Rates()
			ep := &endpoint{
				id:             e.ID(m.ID),
				provider:       e.Provider,
				rates:          rates,
				contextLength:  e.ContextLength,
				maxOutput:      e.MaxOutputTokens,
				quantization:   e.Quantization,
				denyCollection: e.DataCollection == "deny",
				zdr:            e.ZDR,
				params:         map[string]bool{},
				st:             r.o.Stats.Endpoint(e.ID(m.ID)),
			}
			for _, p := range e.SupportedParameters {
				ep.params[p] = true
			}
			ep.proto = &switchboardv1.Endpoint{
				Id:            ep.id,
				Provider:      e.Provider,
				BaseUrl:       e.BaseURL,
				UpstreamModel: e.UpstreamModel,
				ApiKeyEnv:     e.APIKeyEnv,
				Price:         &switchboardv1.Price{Input: rates.Input, CachedInput: rates.CachedInput, Output: rates.Output},
				ContextLength: e.ContextLength,
			}
			mm.endpoints = append(mm.endpoints, ep)
			mm.ids = append(mm.ids, ep.id)
			idx.providers[e.Provider] = true
			lm.Providers = append(lm.Providers, e.Provider)
			lm.ContextLength = max(lm.ContextLength, e.ContextLength)
		}
		idx.models[m.ID] = mm
		idx.list = append(idx.list, lm)
	}
	slices.SortFunc(idx.list, func(a, b *switchboardv1.Model) int { return strings.Compare(a.Id, b.Id) })
	r.idx.Store(idx)
}

// Endpoint returns the catalog's endpoint by id: its model and rates.
func (r *Router) Endpoint(id string) (modelID string, rates catalog.Rates, ok bool) {
	provider, modelID, found := strings.Cut(id, "/")
	if !found {
		return "", catalog.Rates{}, false
	}
	m := r.idx.Load().models[modelID]
	if m == nil {
		return "", catalog.Rates{}, false
	}
	for _, e := range m.endpoints {
		if e.provider == provider {
			return modelID, e.rates, true
		}
	}
	return "", catalog.Rates{}, false
}

// ListModels lists the catalog's models.
func (r *Router) ListModels() []*switchboardv1.Model { return r.idx.Load().list }

// Models returns the catalog's models and their endpoints, for the prober.
func (r *Router) Models() []ModelEndpoints {
	idx := r.idx.Load()
	out := make([]ModelEndpoints, 0, len(idx.models))
	for _, m := range idx.models {
		me := ModelEndpoints{Model: m.id}
		for _, e := range m.endpoints {
			me.Endpoints = append(me.Endpoints, e.proto)
		}
		out = append(out, me)
	}
	slices.SortFunc(out, func(a, b ModelEndpoints) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// ModelEndpoints is a model and its endpoints.
type ModelEndpoints struct {
	Model     string
	Endpoints []*switchboardv1.Endpoint
}

// candidate is one endpoint priced and measured for one request.
type candidate struct {
	ep         *endpoint
	cost       float64 // this request on this endpoint, USD
	listCost   float64 // this request at the model's list price, 0 if none
	cached     int64
	ttft       time.Duration
	samples    int
	tps        float64
	excluded   exclusion
	coolUntil  time.Time
	cooling    bool
	lastResort bool // cooling, but every usable endpoint is
	qualified  bool
	allowed    bool // qualified and within the price guard
	note       note
}

// note says how a candidate fared; rendered to text only for explanations.
type note int

const (
	noteNone note = iota
	noteWinner
	noteExplored
	noteQualified
	noteTooSlow
	noteNoData
	notePriceGuard
	noteExcluded
	noteDeprioritised
)

// scratch holds one Decide's working memory, reused through a pool so the
// hot path does not allocate per candidate.
type scratch struct {
	cands  []candidate
	order  []*candidate
	cooled []*candidate
	cached []int64
}

// Decide picks the endpoint for req. The identity must already be resolved.
func (r *Router) Decide(req *switchboardv1.DecideRequest, id *switchboardv1.Identity) (*switchboardv1.DecideResponse, error) {
	idx := r.idx.Load()
	name, suffix, _ := strings.Cut(req.GetModel(), ":")
	if name == "" {
		return nil, errorf(KindInvalid, "model is required")
	}
	if suffix != "" && suffix != "floor" && suffix != "nitro" {
		return nil, errorf(KindInvalid, "unknown model suffix %q: use :floor or :nitro", ":"+suffix)
	}
	m, ok := idx.models[name]
	if !ok {
		return nil, errorf(KindNotFound, "model %q does not exist", name)
	}
	prefs := req.GetProvider()
	if err := validatePrefs(prefs, idx); err != nil {
		return nil, err
	}
	now := r.o.Now()
	tok := req.GetTokens()
	if tok.GetInputTokens() > MaxTokens || tok.GetMaxOutputTokens() > MaxTokens {
		return nil, errorf(KindInvalid, "tokens: input_tokens %d and max_output_tokens %d must each be at most %d",
			tok.GetInputTokens(), tok.GetMaxOutputTokens(), MaxTokens)
	}
	in := max(tok.GetInputTokens(), 0)
	est := pricing.Request{InputTokens: in, MaxOutputTokens: tok.GetMaxOutputTokens()}
	if est.MaxOutputTokens <= 0 {
		if typical, _, ok := m.st.TypicalOutput(); ok {
			est.TypicalOutputTokens = typical
		}
	}
	bucket := tokens.BucketOf(in)

	sc := r.pool.Get().(*scratch)
	defer r.pool.Put(sc)
	n := len(m.endpoints)
	sc.cands = slices.Grow(sc.cands[:0], n)[:n]
	sc.cached = slices.Grow(sc.cached[:0], n)[:n]
	sc.order, sc.cooled = sc.order[:0], sc.cooled[:0]
	r.o.Affinity.Cached(m.ids, tok.GetPrefixes(), now, sc.cached)

	fitsNone := true
	for i, ep := range m.endpoints {
		c := &sc.cands[i]
		*c = candidate{ep: ep}
		c.cached = r.cachedEstimate(ep, in, tok.GetCachedInputTokens(), sc.cached[i], len(tok.GetPrefixes()) > 0)
		est.CachedTokens = c.cached
		c.cost = pricing.Estimate(ep.rates, est)
		if m.list != nil {
			c.listCost = pricing.Estimate(*m.list, est)
		}
		c.ttft, c.samples, _ = ep.st.TTFT(bucket)
		c.tps, _, _ = ep.st.Throughput()
		c.excluded = exclude(ep, prefs, req.GetParameters(), in, tok.GetMaxOutputTokens())
		if c.excluded.why != exclContext && c.excluded.why != exclMaxOutput {
			fitsNone = false
		}
		if c.excluded.why != exclNone {
			c.note = noteExcluded
			continue
		}
		c.coolUntil, c.cooling = r.o.Cooldown.Until(ep.id, now)
		if c.cooling {
			sc.cooled = append(sc.cooled, c)
		} else {
			sc.order = append(sc.order, c)
		}
	}
	if len(sc.order) == 0 {
		// Every usable endpoint is cooling down: a benched endpoint beats
		// refusing the client, so they are ranked as a last resort.
		for _, c := range sc.cooled {
			c.lastResort = true
		}
		sc.order, sc.cooled = append(sc.order, sc.cooled...), sc.cooled[:0]
	}
	if len(sc.order) == 0 {
		var why []string
		for _, c := range sc.cands {
			why = append(why, c.ep.provider+": "+c.excluded.String())
		}
		kind := KindUnavailable
		if fitsNone {
			kind = KindInvalid
		}
		return nil, errorf(kind, "no endpoint of %s can take this request (%s)", name, strings.Join(why, "; "))
	}

	reason, fastest := r.rank(sc.order, suffix, prefs, req.GetDryRun())
	deprioritise(sc.order, prefs)
	usable := sc.order
	if len(sc.cooled) > 0 {
		// Cooling endpoints are not chosen, but they stay behind the others,
		// cheapest first, so a request whose healthy endpoints fail still
		// has somewhere to go: a pause deprioritises an endpoint, it does
		// not take away a request's fallbacks.
		slices.SortStableFunc(sc.cooled, byCost)
		usable = append(usable, sc.cooled...)
	}
	if prefs != nil && prefs.AllowFallbacks != nil && !prefs.GetAllowFallbacks() {
		usable = noFallbacks(usable, prefs.GetOrder())
	}
	usable = usable[:min(len(usable), r.o.MaxFallbacks+1)]

	resp := &switchboardv1.DecideResponse{
		RequestId: req.GetRequestId(),
		Model:     name,
		Identity:  id,
		MaxPrice:  prefs.GetMaxPrice(),
		Endpoint:  priced(usable[0]),
	}
	if len(usable) > 1 {
		resp.Fallbacks = make([]*switchboardv1.Endpoint, 0, len(usable)-1)
		for _, c := range usable[1:] {
			resp.Fallbacks = append(resp.Fallbacks, priced(c))
		}
	}
	resp.Hedge = r.hedgePlan(req, in, usable)
	if usable[0].note == noteNone || usable[0].note == noteQualified {
		usable[0].note = noteWinner
	}
	resp.Decision = r.explain(sc, usable[0], reason, bucket, fastest, req.GetExplain())
	return resp, nil
}

// rank orders the usable candidates in place and says why the first won.
func (r *Router) rank(cs []*candidate, suffix string, prefs *switchboardv1.ProviderPreferences, dryRun bool) (switchboardv1.RouteReason, time.Duration) {
	slices.SortStableFunc(cs, byCost)
	fastest := time.Duration(0)
	for _, c := range cs {
		if c.samples > 0 && (fastest == 0 || c.ttft < fastest) {
			fastest = c.ttft
		}
	}
	// User choices (provider.sort, the :floor and :nitro suffixes) replace
	// the smart policy.
	switch {
	case suffix == "floor" || prefs.GetSort() == switchboardv1.Sort_SORT_PRICE:
		if suffix == "floor" {
			return switchboardv1.RouteReason_ROUTE_REASON_FLOOR, fastest
		}
		return switchboardv1.RouteReason_ROUTE_REASON_USER_SORT, fastest
	case suffix == "nitro" || prefs.GetSort() == switchboardv1.Sort_SORT_THROUGHPUT:
		slices.SortStableFunc(cs, func(a, b *candidate) int { return cmpFloat(b.tps, a.tps) }) // unknown (0) last
		if suffix == "nitro" {
			return switchboardv1.RouteReason_ROUTE_REASON_NITRO, fastest
		}
		return switchboardv1.RouteReason_ROUTE_REASON_USER_SORT, fastest
	case prefs.GetSort() == switchboardv1.Sort_SORT_LATENCY:
		slices.SortStableFunc(cs, func(a, b *candidate) int {
			switch {
			case a.samples > 0 && b.samples > 0:
				return cmpDur(a.ttft, b.ttft)
			case a.samples > 0:
				return -1
			case b.samples > 0:
				return 1
			}
			return 0
		})
		return switchboardv1.RouteReason_ROUTE_REASON_USER_SORT, fastest
	case len(prefs.GetOrder()) > 0:
		order := prefs.GetOrder()
		slices.SortStableFunc(cs, func(a, b *candidate) int {
			ra, rb := slices.Index(order, a.ep.provider), slices.Index(order, b.ep.provider)
			switch {
			case ra >= 0 && rb >= 0:
				return ra - rb
			case ra >= 0:
				return -1
			case rb >= 0:
				return 1
			}
			return 0
		})
		return switchboardv1.RouteReason_ROUTE_REASON_USER_ORDER, fastest
	case len(prefs.GetOnly()) > 0 || len(prefs.GetIgnore()) > 0:
		return switchboardv1.RouteReason_ROUTE_REASON_USER_ORDER, fastest
	}

	// The smart policy. No speed data at all: the cheapest.
	if fastest == 0 {
		for _, c := range cs {
			c.note = noteNoData
		}
		if e := r.explore(cs, dryRun); e != nil {
			return switchboardv1.RouteReason_ROUTE_REASON_EXPLORATION, fastest
		}
		return switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA, fastest
	}
	// Fast enough: within SpeedFactor of the fastest, or under FastEnough;
	// the cheapest qualifying endpoint wins.
	limit := max(time.Duration(float64(fastest)*r.o.SpeedFactor), r.o.FastEnough)
	usual := usualCost(cs)
	anyAllowed := false
	for _, c := range cs {
		switch {
		case c.samples == 0:
			c.note = noteNoData
		case c.ttft > limit && c.ttft >= r.o.FastEnough:
			c.note = noteTooSlow
		default:
			c.qualified = true
			// Above the usual price, an endpoint wins for speed only when it
			// is still at least (1-PriceGuard) below the list price.
			c.allowed = c.cost <= usual || c.listCost == 0 || c.cost <= r.o.PriceGuard*c.listCost
			if c.allowed {
				c.note = noteQualified
				anyAllowed = true
			} else {
				c.note = notePriceGuard
			}
		}
	}
	if e := r.explore(cs, dryRun); e != nil {
		return switchboardv1.RouteReason_ROUTE_REASON_EXPLORATION, fastest
	}
	if !anyAllowed {
		// Every fast endpoint is too expensive: the cheapest serves (cs is
		// already in price order).
		for _, c := range cs {
			if c.qualified {
				return switchboardv1.RouteReason_ROUTE_REASON_PRICE_GUARD, fastest
			}
		}
		return switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA, fastest
	}
	// The cheapest allowed endpoint first, then the other allowed ones by
	// price, then the rest by price: retries go to fast ones first.
	slices.SortStableFunc(cs, func(a, b *candidate) int {
		switch {
		case a.allowed == b.allowed:
			return 0
		case a.allowed:
			return -1
		}
		return 1
	})
	return switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING, fastest
}

// byCost orders candidates by this request's cost, then by provider name so
// equal costs order the same way every time.
func byCost(a, b *candidate) int {
	if c := cmpFloat(a.cost, b.cost); c != 0 {
		return c
	}
	return strings.Compare(a.ep.provider, b.ep.provider)
}

// hedgePlan says whether a streaming long request gets a second endpoint:
// from HedgeFrom tokens after HedgeDelay without a first token, from
// HedgeImmediateFrom at once. The second endpoint must itself be fast
// enough for this size, and among those it is the cheapest for this request
// as priced — cached input included, so the hedge does not land on an
// endpoint that turns cheap cache reads into expensive ones. Hedging follows
// the smart policy only: a user's explicit order or sort is not second-guessed.
func (r *Router) hedgePlan(req *switchboardv1.DecideRequest, in int64, usable []*candidate) *switchboardv1.HedgePlan {
	none := &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_NONE}
	if !req.GetStream() || r.o.HedgeFrom < 0 || in < r.o.HedgeFrom || len(usable) < 2 || !usable[0].qualified && usable[0].note != noteExplored {
		return none
	}
	var target *candidate
	for _, c := range usable[1:] {
		if c.qualified && c.allowed && !c.cooling && (target == nil || c.cost < target.cost) {
			target = c
		}
	}
	if target == nil {
		return none
	}
	if in >= r.o.HedgeImmediateFrom {
		return &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, Endpoint: priced(target)}
	}
	return &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, Delay: durationpb.New(r.o.HedgeDelay), Endpoint: priced(target)}
}

// explore sends a share of requests to an endpoint with too little data in
// this bucket, so one that became faster is noticed. It moves the
// chosen one to the front and returns it, or returns nil.
func (r *Router) explore(cs []*candidate, dryRun bool) *candidate {
	if dryRun || r.o.Exploration <= 0 || len(cs) < 2 {
		return nil
	}
	x := splitmix64(r.o.Seed + r.seq.Add(1))
	if float64(x>>11)/(1<<53) >= r.o.Exploration {
		return nil
	}
	thin := 0
	for _, c := range cs {
		if c.samples < r.o.MinSamples && !c.cooling {
			thin++
		}
	}
	if thin == 0 {
		return nil
	}
	pick := int((x >> 3) % uint64(thin))
	for i, c := range cs {
		if c.samples < r.o.MinSamples && !c.cooling {
			if pick == 0 {
				copy(cs[1:i+1], cs[:i])
				cs[0] = c
				c.note = noteExplored
				return c
			}
			pick--
		}
	}
	return nil
}

// cachedEstimate is how many of the prompt's tokens endpoint ep is expected
// to read from its cache, from evidence about this prompt: the caller's own
// estimate if it gave one; else, when the request carries prompt-prefix
// hashes, the longest prefix of it ep served recently (affinity) — and none
// when ep never served it, since a provider caches only what it was sent;
// else, for callers that send no prefixes, ep's observed cache-hit rate
// applied to the prompt. The rate is the average over other conversations:
// applied to a prompt with known prefixes it would price a fresh prompt as
// cached on whichever endpoint last served a cached one.
func (r *Router) cachedEstimate(ep *endpoint, in, fromCaller, fromAffinity int64, hasPrefixes bool) int64 {
	switch {
	case fromCaller > 0:
		return min(fromCaller, in)
	case fromAffinity > 0:
		return min(fromAffinity, in)
	case hasPrefixes:
		return 0
	}
	if rate, _, ok := ep.st.CacheHitRate(); ok {
		return min(int64(rate*float64(in)), in)
	}
	return 0
}

// usualCost is the model's usual price for this request: the median of the
// usable endpoints' costs for this exact token mix. "Usual" is what most
// providers charge, so one cheap outlier does not make everyone "expensive".
func usualCost(cs []*candidate) float64 {
	// cs is sorted by cost.
	n := len(cs)
	if n%2 == 1 {
		return cs[n/2].cost
	}
	return (cs[n/2-1].cost + cs[n/2].cost) / 2
}

// deprioritise moves endpoints that miss preferred_min_throughput or
// preferred_max_latency behind those that meet them, keeping order otherwise.
// An endpoint without data is given the benefit of the doubt.
func deprioritise(cs []*candidate, p *switchboardv1.ProviderPreferences) {
	if p == nil || (p.PreferredMinThroughput == nil && p.PreferredMaxLatency == nil) {
		return
	}
	minTPS, maxLat := p.GetPreferredMinThroughput(), p.GetPreferredMaxLatency().AsDuration()
	misses := func(c *candidate) bool {
		return (p.PreferredMinThroughput != nil && c.tps > 0 && c.tps < minTPS) ||
			(p.GetPreferredMaxLatency() != nil && c.samples > 0 && c.ttft > maxLat)
	}
	slices.SortStableFunc(cs, func(a, b *candidate) int {
		ma, mb := misses(a), misses(b)
		switch {
		case ma == mb:
			return 0
		case mb:
			return -1
		}
		return 1
	})
	for _, c := range cs {
		if misses(c) {
			c.note = noteDeprioritised
		}
	}
}

// noFallbacks keeps the first endpoint, or with provider.order the ordered
// providers only: allow_fallbacks=false means no endpoint the user did not name.
func noFallbacks(usable []*candidate, order []string) []*candidate {
	if len(order) == 0 {
		return usable[:1]
	}
	n := 0
	for _, c := range usable {
		if slices.Contains(order, c.ep.provider) {
			n++
		} else {
			break
		}
	}
	return usable[:max(n, 1)]
}

func priced(c *candidate) *switchboardv1.Endpoint {
	e := c.ep.proto
	return &switchboardv1.Endpoint{
		Id:               e.Id,
		Provider:         e.Provider,
		BaseUrl:          e.BaseUrl,
		UpstreamModel:    e.UpstreamModel,
		ApiKeyEnv:        e.ApiKeyEnv,
		Price:            e.Price,
		ContextLength:    e.ContextLength,
		EstimatedCostUsd: c.cost,
	}
}

// exclusion says why an endpoint cannot take a request. It is a code and
// its figures, rendered to text only when someone reads it (an explanation
// or an error), so filtering costs no formatting on the hot path.
type exclusion struct {
	why  exclReason
	a, b float64 // the figures of the reason
	n    [3]int64
	s    string
}

type exclReason uint8

const (
	exclNone exclReason = iota
	exclNotOnly
	exclIgnored
	exclPromptPrice
	exclCompletionPrice
	exclCollects
	exclNotZDR
	exclQuantization
	exclParameter
	exclContext
	exclMaxOutput
)

// String renders the exclusion as shown in explanations and errors.
func (x exclusion) String() string {
	switch x.why {
	case exclNotOnly:
		return "not in provider.only"
	case exclIgnored:
		return "in provider.ignore"
	case exclPromptPrice:
		return fmt.Sprintf("input price %g above max_price.prompt %g", x.a, x.b)
	case exclCompletionPrice:
		return fmt.Sprintf("output price %g above max_price.completion %g", x.a, x.b)
	case exclCollects:
		return "collects data (data_collection=deny)"
	case exclNotZDR:
		return "not zero-data-retention"
	case exclQuantization:
		return fmt.Sprintf("quantization %q not in provider.quantizations", x.s)
	case exclParameter:
		return fmt.Sprintf("does not support parameter %q", x.s)
	case exclContext:
		return fmt.Sprintf("context length %d too small for %d prompt + %d output tokens", x.n[0], x.n[1], x.n[2])
	case exclMaxOutput:
		return fmt.Sprintf("max output %d tokens too small for %d (max_tokens)", x.n[0], x.n[1])
	}
	return ""
}

// exclude says why an endpoint cannot take the request; why is exclNone if it can.
func exclude(ep *endpoint, p *switchboardv1.ProviderPreferences, params []string, in, maxOut int64) exclusion {
	if len(p.GetOnly()) > 0 && !slices.Contains(p.GetOnly(), ep.provider) {
		return exclusion{why: exclNotOnly}
	}
	if slices.Contains(p.GetIgnore(), ep.provider) {
		return exclusion{why: exclIgnored}
	}
	if mp := p.GetMaxPrice(); mp != nil {
		if mp.Prompt != nil && ep.rates.Input > mp.GetPrompt() {
			return exclusion{why: exclPromptPrice, a: ep.rates.Input, b: mp.GetPrompt()}
		}
		if mp.Completion != nil && ep.rates.Output > mp.GetCompletion() {
			return exclusion{why: exclCompletionPrice, a: ep.rates.Output, b: mp.GetCompletion()}
		}
	}
	if p.GetDataCollection() == switchboardv1.DataCollection_DATA_COLLECTION_DENY && !ep.denyCollection && !ep.zdr {
		return exclusion{why: exclCollects}
	}
	if p.GetZdr() && !ep.zdr {
		return exclusion{why: exclNotZDR}
	}
	if q := p.GetQuantizations(); len(q) > 0 && !slices.Contains(q, ep.quantization) {
		return exclusion{why: exclQuantization, s: ep.quantization}
	}
	if p.GetRequireParameters() {
		for _, name := range params {
			if !ep.params[name] {
				return exclusion{why: exclParameter, s: name}
			}
		}
	}
	maxOut = max(maxOut, 0)
	if ep.maxOutput > 0 && maxOut > ep.maxOutput {
		return exclusion{why: exclMaxOutput, n: [3]int64{ep.maxOutput, maxOut}}
	}
	// in + maxOut could wrap for a hostile max_tokens; both are
	// non-negative, so the subtraction cannot.
	if ep.contextLength > 0 && (in > ep.contextLength || maxOut > ep.contextLength-in) {
		return exclusion{why: exclContext, n: [3]int64{ep.contextLength, in, maxOut}}
	}
	return exclusion{}
}

func validatePrefs(p *switchboardv1.ProviderPreferences, idx *index) error {
	if p == nil {
		return nil
	}
	lists := [...]struct {
		field string
		names []string
	}{{"only", p.GetOnly()}, {"ignore", p.GetIgnore()}, {"order", p.GetOrder()}}
	for _, l := range lists {
		for _, n := range l.names {
			if !idx.providers[n] {
				return errorf(KindInvalid, "provider.%s: unknown provider %q", l.field, n)
			}
		}
	}
	if mp := p.GetMaxPrice(); mp != nil {
		for _, v := range [...]*float64{mp.Prompt, mp.Completion} {
			if v != nil && (*v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0)) {
				field := "prompt"
				if v == mp.Completion {
					field = "completion"
				}
				return errorf(KindInvalid, "provider.max_price.%s must be a non-negative number", field)
			}
		}
	}
	if _, ok := switchboardv1.Sort_name[int32(p.GetSort())]; !ok {
		return errorf(KindInvalid, "provider.sort: unknown value %d", p.GetSort())
	}
	if v := p.PreferredMinThroughput; v != nil && (*v < 0 || math.IsNaN(*v)) {
		return errorf(KindInvalid, "provider.preferred_min_throughput must be a non-negative number")
	}
	return nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// splitmix64 turns a counter into a well-mixed pseudo-random number: with a
// fixed seed, a sequence of Decide calls explores the same way every run,
// without a lock around a shared generator.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
