package sim

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/affinity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
	"github.com/switchboard-ai/switchboard/services/decider/internal/observe"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/probe"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
)

// Options are the gateway settings of one run; the zero value is the
// product's defaults.
type Options struct {
	// HedgeBudgetUSD is the daily hedge budget. (Optional) Defaults to 5; negative means none.
	HedgeBudgetUSD float64
	// ProbeInterval is how often each endpoint is probed at each size.
	// (Optional) Defaults to 5m; negative disables probes.
	ProbeInterval time.Duration
	// ProbeSizes are the probe prompt sizes in tokens. (Optional) Defaults to the decider's.
	ProbeSizes []int64
	// MaxAttempts caps the calls per request, hedge included. (Optional) Defaults to 4.
	MaxAttempts int
	// FirstTokenTimeout is how long a call may take to its first token
	// before the next endpoint is tried. (Optional) Defaults to 60s.
	FirstTokenTimeout time.Duration
	// Cooldown configures how refusals bench endpoints. (Optional) Defaults to the product's.
	Cooldown cooldown.Options
	// HedgeBudgetBurst paces the hedge budget over the UTC day, as the
	// decider's --hedge-budget-burst. (Optional) Defaults to the decider's
	// 1h; hedge.Unpaced (24h) spends the day's budget as hedges come.
	HedgeBudgetBurst time.Duration
	// HedgeLoserWarmsCache makes every provider finish reading the prompt of
	// a cancelled hedge leg into its cache, as a profile's
	// cache.cancelled_leg_warms does for one provider. (Optional) Defaults to
	// false: only answered calls warm a cache.
	HedgeLoserWarmsCache bool
}

func (o *Options) defaults() {
	if o.HedgeBudgetUSD == 0 {
		o.HedgeBudgetUSD = 5
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = 5 * time.Minute
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 4
	}
	if o.FirstTokenTimeout <= 0 {
		o.FirstTokenTimeout = 60 * time.Second
	}
	if o.HedgeBudgetBurst <= 0 {
		o.HedgeBudgetBurst = hedge.DefaultBurst
	}
}

// engine runs one policy over one set of sessions in virtual time: every
// component of the decider reads the engine's clock, which jumps from one
// event to the next, so a day runs in a fraction of a second.
type engine struct {
	o      Options
	pol    Policy
	seed   uint64
	now    time.Time
	events eventQueue
	seq    uint64

	stats    *stats.Store
	cool     *cooldown.Tracker
	router   *routing.Router
	observer *observe.Observer
	budget   *hedge.Budget
	prober   *probe.Prober

	providers map[string]*provider // by endpoint id
	endpoints map[string][]*switchboardv1.Endpoint
	active    int // sessions not finished
	end       time.Time
	probeN    uint64

	res *Result
}

// Run replays sessions drawn from traffic (or the trace, when not nil)
// through the decider under policy pol and returns what it measured. The
// same inputs and seed give the same result.
func Run(p *Profile, traffic *Traffic, trace []TraceRecord, pol Policy, seed uint64, o Options) (*Result, error) {
	e, err := newEngine(p, traffic, trace, pol, seed, o)
	if err != nil {
		return nil, err
	}
	return e.run(), nil
}

// newEngine wires the decider and the providers and schedules the sessions.
func newEngine(p *Profile, traffic *Traffic, trace []TraceRecord, pol Policy, seed uint64, o Options) (*engine, error) {
	o.defaults()
	var sessions []*session
	if trace != nil {
		sessions = traceSessions(trace, traffic.Start, traffic.Model)
	} else {
		sessions = traffic.sessions(seed)
	}
	e := &engine{o: o, pol: pol, seed: seed, now: traffic.Start, providers: map[string]*provider{},
		endpoints: map[string][]*switchboardv1.Endpoint{}, end: traffic.Start.Add(traffic.Duration.D()),
		res: newResult(pol.Name, traffic.Start)}
	e.wire(p)
	for _, s := range sessions {
		if _, ok := e.endpoints[s.model]; !ok {
			return nil, fmt.Errorf("traffic names model %q, which the profile does not have", s.model)
		}
		e.active++
		e.at(s.start, func() { e.arrive(s, 0) })
	}
	return e, nil
}

// run runs the events to the end and returns what the run measured.
func (e *engine) run() *Result {
	o := e.o
	e.at(e.now.Add(time.Second), e.tick)
	// The budget is per UTC day: read the day's spend before it rolls over.
	e.at(e.end.Add(-time.Nanosecond), e.readBudget)
	if o.ProbeInterval > 0 {
		e.at(e.now, e.probeRound)
	}
	for len(e.events) > 0 {
		ev := e.events.pop()
		e.now = ev.t
		ev.fn()
	}
	e.res.End = e.now
	e.readBudget()
	e.res.Probes, e.res.ProbeCost = e.observer.ProbeCost()
	e.res.Benched, e.res.Paused = e.cool.Benched(), e.cool.Paused()
	return e.res
}

// wire builds the decider's components on the engine's clock, wired as
// the decider wires them.
func (e *engine) wire(p *Profile) {
	clock := func() time.Time { return e.now }
	e.stats = stats.New(stats.Config{Now: clock})
	co := e.o.Cooldown
	if e.pol.Cooldown != (cooldown.Options{}) {
		co = e.pol.Cooldown
	}
	e.cool = cooldown.New(co)
	aff := affinity.New(affinity.Options{})
	hedgeFrom := int64(0)
	if e.pol.NoHedge || e.o.HedgeBudgetUSD < 0 {
		hedgeFrom = -1 // no budget, no hedges
	}
	oc := outcomes.New(outcomes.Config{Now: clock})
	e.router = routing.New(p.Catalog(), routing.Options{
		Stats: e.stats, Affinity: aff, Cooldown: e.cool, Policy: e.pol.Routing, Outcomes: oc,
		Exploration: e.pol.Exploration, FollowUpTurns: e.pol.FollowUpTurns, ExploreFollowUps: e.pol.ExploreFollowUps, Seed: e.seed*2 + 1, Now: clock, HedgeFrom: hedgeFrom,
		NoSticky: e.pol.NoSticky, StickyTTL: e.pol.StickyTTL,
	})
	e.observer = observe.New(observe.Options{Catalog: func() observe.Catalog { return e.router }, Stats: e.stats, Affinity: aff, Cooldown: e.cool, Outcomes: oc,
		Logger: slog.New(slog.DiscardHandler), Now: clock})
	e.budget = hedge.NewPaced(hedge.Options{DailyUSD: max(e.o.HedgeBudgetUSD, 0), Burst: e.o.HedgeBudgetBurst, Now: clock})
	e.prober = probe.New(probe.Options{Interval: max(e.o.ProbeInterval, time.Second), Sizes: e.o.ProbeSizes, Models: e.router.Models,
		Logger: slog.New(slog.DiscardHandler)})
	for _, me := range e.router.Models() {
		e.endpoints[me.Model] = me.Endpoints
	}
	for _, m := range p.Models {
		for _, pr := range m.Providers {
			id := catalog.Endpoint{Provider: pr.Name}.ID(m.ID)
			pv := newProvider(pr, id)
			// Sessions may run past the day's end: episodes are drawn for
			// a day more, which costs nothing when a profile has none.
			pv.drawEpisodes(e.seed, e.now, e.end.Add(24*time.Hour))
			e.providers[id] = pv
		}
	}
}

// at schedules fn at t (never before now); events at the same time run in
// the order they were scheduled.
func (e *engine) at(t time.Time, fn func()) {
	if t.Before(e.now) {
		t = e.now
	}
	e.seq++
	e.events.push(event{at: t.UnixNano(), t: t, seq: e.seq, fn: fn})
}

// readBudget records the hedge budget's state; the last reading before the
// day ends is the day's spend (calls finishing after midnight are charged
// to the next day).
func (e *engine) readBudget() {
	spent, _, granted, refused := e.budget.Status()
	if e.now.Before(e.end) {
		e.res.HedgeBudgetSpent = spent
	}
	e.res.HedgesGranted, e.res.HedgesRefused = granted, refused
}

// tick does what the decider does every second: age statistics out and
// forget ended cool-downs. It stops once the day is over and every session
// has finished.
func (e *engine) tick() {
	e.stats.Refresh()
	e.cool.Expire(e.now)
	if e.active > 0 || e.now.Before(e.end) {
		e.at(e.now.Add(time.Second), e.tick)
	}
}

// probeRound plans one round of probes and spreads them over the interval,
// as the decider's prober does; edges run them like any call.
func (e *engine) probeRound() {
	if !e.now.Before(e.end) && e.active == 0 {
		return
	}
	plan := e.prober.Plan()
	if len(plan) > 0 {
		gap := e.o.ProbeInterval / time.Duration(len(plan))
		for i, cmd := range plan {
			e.at(e.now.Add(time.Duration(i+1)*gap), func() { e.runProbe(cmd) })
		}
	}
	e.at(e.now.Add(e.o.ProbeInterval), e.probeRound)
}

func (e *engine) runProbe(cmd *switchboardv1.ProbeCommand) {
	ep := cmd.GetEndpoint()
	pr := e.providers[ep.GetId()]
	e.probeN++
	rng := e.rng(0x70726f6265, e.probeN)
	start := e.now
	a := pr.call(start, rng, cmd.GetPromptTokens(), -1, sharedPrefix{})
	rep := &switchboardv1.CallReport{RequestId: cmd.GetProbeId(), ProbeId: cmd.GetProbeId(), Model: cmd.GetModel(),
		EndpointId: ep.GetId(), PromptTokens: cmd.GetPromptTokens(), Stream: true, StartTime: timestamppb.New(start)}
	switch {
	case a.outcome == outcomeOK && a.ttft <= e.o.FirstTokenTimeout:
		out := cmd.GetMaxOutputTokens()
		d := a.ttft + pr.genTime(out)
		e.at(start.Add(d), func() {
			pr.end()
			rep.Outcome = switchboardv1.Outcome_OUTCOME_OK
			rep.Ttft, rep.Duration = durationpb.New(a.ttft), durationpb.New(d)
			rep.Usage = &switchboardv1.Usage{InputTokens: cmd.GetPromptTokens(), OutputTokens: out, Reported: true}
			e.report(rep)
		})
	default:
		d := e.failTime(a)
		e.at(start.Add(d), func() {
			if a.outcome != outcomeRateLimited {
				pr.end()
			}
			e.fillFailure(rep, a)
			rep.Duration = durationpb.New(d)
			e.report(rep)
		})
	}
}

// report hands one call report to the decider, as an edge's batch would.
func (e *engine) report(r *switchboardv1.CallReport) {
	e.observer.Ingest(nil, []*switchboardv1.CallReport{r})
}

// failTime is when a failed call is given up: its error, or the first-token timeout.
func (e *engine) failTime(a answer) time.Duration {
	if a.outcome == outcomeHang || a.outcome == outcomeOK {
		return e.o.FirstTokenTimeout
	}
	return a.ttft
}

func (e *engine) fillFailure(rep *switchboardv1.CallReport, a answer) {
	switch a.outcome {
	case outcomeRateLimited:
		rep.Outcome, rep.HttpStatus, rep.RetryAfter = switchboardv1.Outcome_OUTCOME_RATE_LIMITED, 429, durationpb.New(a.retryAfter)
	case outcomeServerError:
		rep.Outcome, rep.HttpStatus = switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, 503
	default:
		rep.Outcome = switchboardv1.Outcome_OUTCOME_TIMEOUT
	}
}

// rng returns the random stream of one draw, keyed so that every policy
// sees the same provider luck for the same request and attempt.
func (e *engine) rng(kind, n uint64) *rand.Rand {
	return rand.New(rand.NewPCG(e.seed, kind<<40^n))
}

// loserCost is what a cancelled call costs the gateway: its prompt at the
// endpoint's uncached input price, as the edge accounts it.
func loserCost(prompt int64, p *switchboardv1.Price) float64 {
	return pricing.Cost(pricing.Price{Input: p.GetInput(), CachedInput: p.GetCachedInput(), Output: p.GetOutput()}, pricing.Usage{Input: prompt})
}

// systemHash is the prefix hash of shared system prompt id.
func systemHash(id int) uint64 {
	var b [32]byte
	return fnv64a(strconv.AppendInt(append(b[:0], "system/"...), int64(id), 10)) | 1
}

func promptHash(sessionID, turn int) uint64 {
	var b [48]byte
	buf := strconv.AppendInt(b[:0], int64(sessionID), 10)
	buf = append(buf, '/')
	return fnv64a(strconv.AppendInt(buf, int64(turn), 10)) | 1
}

// fnv64a is the 64-bit FNV-1a hash of b (hash/fnv's New64a), without its
// allocation: a request hashes every earlier turn of its conversation.
func fnv64a(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// event is fn due at t (at is t in Unix nanoseconds, so that the queue
// compares integers); seq orders those due at the same time.
type event struct {
	at  int64
	t   time.Time
	seq uint64
	fn  func()
}

// eventQueue is a binary min-heap of events by time, then seq: held by
// value and ordered by integers, so the millions of events of a day cost
// no allocation of their own and no interface calls.
type eventQueue []event

func (q eventQueue) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

func (q *eventQueue) push(ev event) {
	*q = append(*q, ev)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

// pop removes and returns the earliest event; the queue must not be empty.
func (q *eventQueue) pop() event {
	h := *q
	n := len(h) - 1
	top := h[0]
	h[0] = h[n]
	h[n] = event{} // drop the closure
	h = h[:n]
	for i := 0; ; {
		least, l := i, 2*i+1
		if l < n && h.less(l, least) {
			least = l
		}
		if r := l + 1; r < n && h.less(r, least) {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*q = h
	return top
}
