// Package routing answers Decide for an identity the auth package resolved:
// it filters a model's endpoints by the caller's routing options, prices this exact request on each
// endpoint, and orders them by the default smart policy (the cheapest endpoint
// that is fast enough for this prompt size), by the routing-cost policy (the
// expected cost of one good answer, traffic spread over the endpoints near
// the best) where a model or the deployment chooses it, or by the user's
// own choice.
//
// Everything it reads is either an immutable index built from the catalog and
// swapped atomically, or a statistic published atomically by the stats
// package, so Decide never waits on a writer.
//
// Decide's steps, one file each: index.go is the catalog index (models,
// endpoints, providers); filter.go applies the user's provider options
// (validation, exclusions, fallbacks, preferred throughput and latency);
// candidates.go prices and measures this request on every endpoint left;
// policy.go ranks them (the user's sort or order, else the smart policy and
// exploration); policyname.go says which policy applies and routingcost.go
// is the routing-cost policy; sticky.go keeps a conversation on the
// endpoint holding its prompt cache; tenant.go applies a tenant's default
// settings; hedge.go plans a second endpoint for a long stream; and
// explain.go says why. router.go holds Decide itself and the options.
package routing

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/contextlength"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/affinity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/session"
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
	// Field is the DecideRequest field at fault, as a proto path
	// ("tokens.input_tokens"), when one is; Reason then says what is wrong
	// with it, in upper snake case ("CONTEXT_LENGTH_EXCEEDED"). The server
	// sends both as a google.rpc.BadRequest field violation, so a caller can
	// name the field of its own request at fault without parsing Msg.
	Field, Reason string
	// Context is set when the prompt (with the output asked for) is longer
	// than every endpoint's context: the figures, for a caller that says
	// it in its own API's words.
	Context *contextlength.Exceeded
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
	// Exploration is the share of fresh requests sent to an endpoint with
	// too little data. (Optional) Defaults to none (0 or negative): probes
	// measure every endpoint in every size bucket, and in the simulator no
	// share of exploration bought a faster or cheaper day (docs/simulation.md).
	Exploration float64
	// ExploreFollowUps lets exploration pick a conversation's follow-up
	// turns too (a prompt extending one an endpoint served recently). By
	// default only fresh prompts explore: a follow-up sent elsewhere pays
	// its whole prompt uncached there, and again on its way back. (Optional)
	ExploreFollowUps bool
	// MinSamples is how many samples in a bucket are enough data. (Optional) Defaults to 10.
	MinSamples int
	// PriceGuard: an endpoint priced above the usual price wins for speed
	// only when it costs at most this share of the list price. (Optional) Defaults to 0.5.
	PriceGuard float64
	// FollowUpTurns is how many more turns a conversation is expected to
	// send after this one, each reading this prompt from the cache of the
	// endpoint that serves it. For a request whose prompt extends one an
	// endpoint served recently (a conversation already under way), the
	// smart policy ranks endpoints by this turn's cost plus FollowUpTurns
	// times the cost of the same prompt read from that endpoint's cache:
	// staying where cache reads are dear, or moving to where they are cheap,
	// is priced over the turns to come, not this one alone. (Optional)
	// Defaults to 4; negative prices this turn only.
	FollowUpTurns float64
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
	// NoSticky turns cache-aware stickiness off: every turn of a
	// conversation is ranked afresh. (Optional) Stickiness is on by default.
	NoSticky bool
	// StickyTTL is how long a conversation stays with the endpoint of its
	// last turn: each turn within it goes back there and starts it again.
	// (Optional) Defaults to 10 minutes.
	StickyTTL time.Duration
	// Sessions remembers the conversations callers name by session id.
	// (Optional) Defaults to a new table.
	Sessions *session.Table
	// Policy is the deployment's default routing policy. (Optional) Defaults to PolicySmart.
	Policy Policy
	// Outcomes tracks each endpoint's price charged, rates and load for
	// the routing-cost policy; Decide records there the load it routes.
	// (Optional) Defaults to a new tracker on Now.
	Outcomes *outcomes.Tracker
	// Cost tunes the routing-cost policy. (Optional) Zero values take
	// their defaults.
	Cost CostOptions
	// Arm, when set and ok, is the policy a running experiment assigns to
	// a request for model decided at now, in place of the model's and the
	// deployment's default. It is called on every decision without a
	// policy of the request's own, so it must be cheap and safe for
	// concurrent use. (Optional)
	Arm func(model string, now time.Time) (p Policy, ok bool)
	// Catalog returns the current catalog's index, read on every call:
	// the decider's one catalog snapshot, swapped whole (gate.Current),
	// built with NewIndex on the same Stats and Outcomes. (Optional)
	// Defaults to New's catalog, fixed.
	Catalog func() *Index
}

// Router answers Decide and ListModels from the current catalog, which
// Options.Catalog returns. Decide reads it once and works on that index
// throughout, so one decision never mixes two catalogs.
type Router struct {
	o    Options
	seq  atomic.Uint64
	pool sync.Pool // *scratch
}

// New returns a router serving o.Catalog, or c when o.Catalog is nil.
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
	if o.MinSamples <= 0 {
		o.MinSamples = 10
	}
	if o.PriceGuard <= 0 {
		o.PriceGuard = 0.5
	}
	if o.FollowUpTurns == 0 {
		o.FollowUpTurns = 4
	}
	if o.FollowUpTurns < 0 {
		o.FollowUpTurns = 0
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
	if o.StickyTTL <= 0 {
		o.StickyTTL = 10 * time.Minute
	}
	if o.Sessions == nil {
		o.Sessions = session.New(session.Options{})
	}
	if o.Policy == "" {
		o.Policy = PolicySmart
	}
	if o.Outcomes == nil {
		o.Outcomes = outcomes.New(outcomes.Config{Now: o.Now})
	}
	o.Cost.defaults()
	if o.HedgeFrom == 0 {
		o.HedgeFrom = 32 * tokens.K
	}
	if o.HedgeImmediateFrom <= 0 {
		o.HedgeImmediateFrom = 128 * tokens.K
	}
	if o.HedgeDelay <= 0 {
		o.HedgeDelay = time.Second
	}
	if o.Catalog == nil {
		idx := NewIndex(c, Sources{Stats: o.Stats, Outcomes: o.Outcomes, Stamps: NewStamps(o.Now)})
		o.Catalog = func() *Index { return idx }
	}
	r := &Router{o: o}
	r.pool.New = func() any { return &scratch{} }
	return r
}

// Decide picks the endpoint for req from the current catalog. The
// identity must already be resolved.
func (r *Router) Decide(req *switchboardv1.DecideRequest, id *switchboardv1.Identity) (*switchboardv1.DecideResponse, error) {
	return r.DecideIn(r.o.Catalog(), req, id)
}

// DecideIn picks the endpoint for req from idx, an index built on the
// router's Stats and Outcomes: a call that resolved id from one catalog
// snapshot routes with that snapshot's index, so a catalog applied
// meanwhile cannot give it its identity from one catalog and its route
// from the next.
func (r *Router) DecideIn(idx *Index, req *switchboardv1.DecideRequest, id *switchboardv1.Identity) (*switchboardv1.DecideResponse, error) {
	m, name, suffix, err := r.resolve(idx, req)
	if err != nil {
		return nil, err
	}
	prefs := r.withTenantSort(idx, req.GetProvider(), suffix, id)
	now := r.o.Now()
	tok := req.GetTokens()
	in := max(tok.GetInputTokens(), 0)
	est := pricing.Request{InputTokens: in, MaxOutputTokens: tok.GetMaxOutputTokens(),
		CacheBreakpointTokens: tok.GetCacheWriteTokens(), CacheBreakpoint1hTokens: tok.GetCacheWrite_1HTokens()}
	if est.MaxOutputTokens <= 0 {
		if typical, _, ok := m.st.TypicalOutput(); ok {
			est.TypicalOutputTokens = typical
		}
	}
	bucket := tokens.BucketOf(in)

	// The routing-cost policy ranks only requests that chose no order or
	// sort of their own; it does its own back-off, so cool-downs do not
	// bench endpoints under it.
	chose := userChose(suffix, prefs)
	costPolicy := r.policyOf(idx, m, id, now) == PolicyRoutingCost && !chose

	sc := r.pool.Get().(*scratch)
	defer r.pool.Put(sc)
	fitsNone := r.candidates(sc, m, req, est, bucket, now, costPolicy)
	if len(sc.order) == 0 {
		return nil, unavailable(sc, name, fitsNone)
	}

	var reason switchboardv1.RouteReason
	var fastest time.Duration
	if costPolicy {
		slices.SortStableFunc(sc.order, byCost)
		fastest = r.fastest(sc.order)
		// A follow-up turn is not drawn: it takes the largest share, the
		// lowest routing cost with its cache priced in, rather than moving
		// off its cache by chance.
		noDraw := req.GetDryRun() || (sc.followUp && !r.o.ExploreFollowUps)
		reason = r.costRank(sc, m, est, fastest, now, noDraw)
	} else {
		// A follow-up turn does not explore: away from its cache it would pay
		// its whole prompt uncached there, and again on the way back.
		noExplore := req.GetDryRun() || (sc.followUp && !r.o.ExploreFollowUps)
		reason, fastest = r.rank(sc.order, suffix, prefs, noExplore)
	}
	deprioritise(sc.order, prefs)
	r.stick(sc, m, req, id, chose, costPolicy, fastest, now)
	usable := r.usable(sc, m, prefs, req.GetRegion())

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
	if !req.GetDryRun() {
		routed(usable[0], now)
		// An immediate hedge is a second call for sure: it counts in its
		// endpoint's load as much as the first.
		if resp.Hedge.GetMode() == switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE {
			for _, c := range usable[1:] {
				if c.ep.id == resp.Hedge.GetEndpoint().GetId() {
					routed(c, now)
				}
			}
		}
	}
	if costPolicy || usable[0].note == noteNone || usable[0].note == noteQualified {
		usable[0].note = noteWinner
	}
	resp.Decision = r.explain(sc, usable[0], reason, bucket, fastest, req.GetExplain(), costPolicy)
	r.keepSession(req, id, m, usable[0], now)
	return resp, nil
}

// resolve checks the request's model, suffix, routing options and token
// counts, and returns its model from the current index and that model's
// id, which an alias resolves to.
func (r *Router) resolve(idx *Index, req *switchboardv1.DecideRequest) (m *model, name, suffix string, err error) {
	name, suffix, _ = strings.Cut(req.GetModel(), ":")
	if name == "" {
		return nil, "", "", errorf(KindInvalid, "model is required")
	}
	if suffix != "" && suffix != "floor" && suffix != "nitro" {
		e := errorf(KindInvalid, "unknown model suffix %q: use :floor or :nitro", ":"+suffix)
		e.Field, e.Reason = "model", "INVALID_VALUE"
		return nil, "", "", e
	}
	id, ok := idx.names.Resolve(name)
	if !ok {
		return nil, "", "", errorf(KindNotFound, "model %q does not exist", name)
	}
	m, name = idx.models[id], id
	if err := validatePrefs(req.GetProvider(), idx); err != nil {
		return nil, "", "", err
	}
	tok := req.GetTokens()
	if tok.GetInputTokens() > MaxTokens || tok.GetMaxOutputTokens() > MaxTokens {
		return nil, "", "", errorf(KindInvalid, "tokens: input_tokens %d and max_output_tokens %d must each be at most %d",
			tok.GetInputTokens(), tok.GetMaxOutputTokens(), MaxTokens)
	}
	return m, name, suffix, nil
}

// unavailable is the error of a request no endpoint of the model can take:
// invalid when it fits no endpoint's context or output, unavailable when
// the caller's options or cool-downs rule them all out.
func unavailable(sc *scratch, name string, fitsNone bool) error {
	var why []string
	for _, c := range sc.cands {
		why = append(why, c.ep.provider+": "+c.excluded.String())
	}
	if !fitsNone {
		return errorf(KindUnavailable, "no endpoint of %s can take this request (%s)", name, strings.Join(why, "; "))
	}
	// The request fits no endpoint's context or output: the prompt is at
	// fault when one endpoint's context is too small for it, else the
	// output asked for.
	e := errorf(KindInvalid, "no endpoint of %s can take this request (%s)", name, strings.Join(why, "; "))
	e.Field, e.Reason = "tokens.max_output_tokens", "INVALID_VALUE"
	for _, c := range sc.cands {
		if c.excluded.why != exclContext {
			continue
		}
		// n holds the endpoint's context length, the prompt and the
		// output asked for.
		n := c.excluded.n
		if e.Context == nil {
			e.Context = &contextlength.Exceeded{PromptTokens: n[1], OutputTokens: n[2]}
		}
		e.Context.Limit = max(e.Context.Limit, n[0])
	}
	if e.Context != nil {
		e.Field, e.Reason, e.Msg = "tokens.input_tokens", contextlength.Reason, e.Context.OpenAIMessage()
	}
	return e
}

// usable is the ranked candidates followed by the cooling ones, cut to
// the options' fallbacks, the model's fallback policy for a request from
// region and MaxFallbacks; sc.residency is the region the policy held the
// request to.
func (r *Router) usable(sc *scratch, m *model, prefs *switchboardv1.ProviderPreferences, region string) []*candidate {
	usable := sc.order
	if len(sc.cooled) > 0 {
		// Cooling endpoints are not chosen, but they stay behind the others,
		// cheapest first, so a request whose healthy endpoints fail still
		// has somewhere to go: a pause deprioritises an endpoint, it does
		// not take away a request's fallbacks.
		slices.SortStableFunc(sc.cooled, byCost)
		usable = append(usable, sc.cooled...)
	}
	// The model's policy first: residency may pick the first endpoint.
	usable, sc.residency = m.fallback.filter(usable, region)
	if prefs != nil && prefs.AllowFallbacks != nil && !prefs.GetAllowFallbacks() {
		usable = noFallbacks(usable, prefs.GetOrder())
	}
	return usable[:min(len(usable), r.o.MaxFallbacks+1)]
}
