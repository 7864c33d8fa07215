package sim

import (
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// request is one client request in flight, run as the edge runs it: the
// decider's endpoints in order, the first attempt hedged when the plan says
// so and the budget grants it, a failed attempt retried on the next
// endpoint not tried, up to MaxAttempts calls.
type request struct {
	id      string
	s       *session
	turn    int
	t       turn
	arrival time.Time
	hash    uint64
	output  int64
	// prefixes are the prompt's prefixes as the edge sends them in Decide
	// and reports for the attempt that served it.
	prefixes []*switchboardv1.PromptPrefix

	plan  []*switchboardv1.Endpoint
	hedge *switchboardv1.HedgePlan
	next  int
	tried map[string]bool
	calls int
	legs  []*leg // running

	reason       switchboardv1.RouteReason
	retries      int  // calls started after a failed one
	hedgeWait    bool // a delayed hedge may still start
	hedgeGranted bool
	hedgeStarted bool
	loserCost    float64
	winner       *leg
	moved        bool // a conversation turn answered elsewhere than the previous turn
	met429       bool
	calls429     int // calls answered 429
	failedTime   time.Duration
	done         bool
}

// leg is one call to one endpoint.
type leg struct {
	r       *request
	ep      *switchboardv1.Endpoint
	p       *provider
	start   time.Time
	a       answer
	hedge   bool
	over    bool
	firstAt time.Time
	cost    float64
	ended   bool // no longer in flight at the provider
}

// end takes l out of its provider's calls in flight, once: when its answer
// ended, it failed, or the edge cancelled it. A 429 never was in flight.
func (l *leg) end() {
	if l.ended {
		return
	}
	l.ended = true
	if l.a.outcome != outcomeRateLimited {
		l.p.end()
	}
}

// arrive starts turn i of session s.
func (e *engine) arrive(s *session, i int) {
	t := s.turns[i]
	e.res.nextID++
	r := &request{id: "r" + strconv.FormatUint(e.res.nextID, 10), s: s, turn: i, t: t, arrival: e.now,
		tried: map[string]bool{}, output: t.output}
	if t.maxTokens > 0 {
		r.output = min(r.output, t.maxTokens)
	}
	r.hash = promptHash(s.id, i)
	// As the edge sends them: the prompt's leading parts, each earlier
	// turn's whole prompt among them, up to the whole prompt itself, the
	// longest 32 (one part per turn here), after the system prompt the
	// conversation shares with others, if any.
	if sys := s.system; sys.id > 0 {
		r.prefixes = append(r.prefixes, &switchboardv1.PromptPrefix{Hash: systemHash(sys.id), Tokens: min(sys.tokens, t.prompt)})
	}
	for k := max(0, i-31); k <= i; k++ {
		r.prefixes = append(r.prefixes, &switchboardv1.PromptPrefix{Hash: promptHash(s.id, k), Tokens: s.turns[k].prompt})
	}
	switch {
	case e.pol.Baseline:
		r.plan = baseline(e.endpoints[s.model], t.prompt, t.maxTokens)
	case e.pol.Pin != "":
		r.plan = pinned(e.endpoints[s.model], e.pol.Pin, t.prompt, t.maxTokens)
	case e.pol.Oracle:
		r.plan, r.hedge = e.oraclePlan(r)
		r.reason = switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING
	default:
		req := &switchboardv1.DecideRequest{RequestId: r.id, Model: s.model, Stream: t.stream,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: t.prompt, MaxOutputTokens: t.maxTokens, Prefixes: r.prefixes}}
		sort := t.sort
		if sort == "" {
			sort = e.pol.Sort
		}
		if sort != "" {
			req.Provider = &switchboardv1.ProviderPreferences{Sort: sorts[sort]}
		}
		resp, err := e.router.Decide(req, nil)
		if err == nil {
			r.reason = resp.GetDecision().GetReason()
			r.plan = e.edgePlan(append([]*switchboardv1.Endpoint{resp.GetEndpoint()}, resp.GetFallbacks()...))
			r.hedge = resp.GetHedge()
		}
	}
	e.attempt(r)
}

// edgePlan is the order the edge tries endpoints in: the chosen one, the
// fallbacks not benched, then the benched ones, up to MaxAttempts.
func (e *engine) edgePlan(eps []*switchboardv1.Endpoint) []*switchboardv1.Endpoint {
	var out, benched []*switchboardv1.Endpoint
	seen := map[string]bool{}
	for i, ep := range eps {
		if ep == nil || seen[ep.GetId()] {
			continue
		}
		seen[ep.GetId()] = true
		if _, cooling := e.cool.Until(ep.GetId(), e.now); i > 0 && cooling {
			benched = append(benched, ep)
			continue
		}
		out = append(out, ep)
	}
	out = append(out, benched...)
	return out[:min(len(out), e.o.MaxAttempts)]
}

// attempt starts the next endpoint of the plan, or ends the request as failed.
func (e *engine) attempt(r *request) {
	for r.next < len(r.plan) && r.calls < e.o.MaxAttempts {
		ep := r.plan[r.next]
		r.next++
		if r.tried[ep.GetId()] {
			continue
		}
		var h *switchboardv1.Endpoint
		if r.calls == 0 {
			h = e.hedgeTarget(r, ep)
		} else {
			r.retries++
		}
		if h != nil && r.hedge.GetMode() == switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE {
			granted := e.acquire(r, ep, h)
			e.launch(r, ep, false)
			if granted {
				e.launch(r, h, true)
			}
			return
		}
		e.launch(r, ep, false)
		if h != nil {
			r.hedgeWait = true
			d := time.Second
			if hd := r.hedge.GetDelay(); hd != nil && hd.AsDuration() > 0 {
				d = hd.AsDuration()
			}
			e.at(e.now.Add(d), func() {
				if !r.hedgeWait || r.winner != nil || r.done {
					return
				}
				r.hedgeWait = false
				if e.acquire(r, ep, h) {
					e.launch(r, h, true)
				}
			})
		}
		return
	}
	e.finish(r)
}

// hedgeTarget is the plan's hedge endpoint when this request may be hedged.
func (e *engine) hedgeTarget(r *request, ep *switchboardv1.Endpoint) *switchboardv1.Endpoint {
	m := r.hedge.GetMode()
	if m != switchboardv1.HedgeMode_HEDGE_MODE_DELAYED && m != switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE {
		return nil
	}
	h := r.hedge.GetEndpoint()
	if !r.t.stream || e.o.MaxAttempts < 2 || h == nil || h.GetId() == ep.GetId() {
		return nil
	}
	if _, cooling := e.cool.Until(h.GetId(), e.now); cooling && !e.pol.Oracle {
		return nil
	}
	return h
}

// acquire asks the hedge budget, with the most the hedge can cost: either
// leg may lose, and a loser costs its prompt at its uncached input price.
func (e *engine) acquire(r *request, primary, h *switchboardv1.Endpoint) bool {
	est := max(loserCost(r.t.prompt, h.GetPrice()), loserCost(r.t.prompt, primary.GetPrice()))
	ok, remaining, _ := e.budget.Acquire(r.id, est)
	// The budget ran out when the day's amount, not its pacing, refused.
	if !ok && remaining < est && e.res.budgetOut.IsZero() {
		e.res.budgetOut = e.now
	}
	r.hedgeGranted = r.hedgeGranted || ok
	return ok
}

// launch starts one call of r on ep.
func (e *engine) launch(r *request, ep *switchboardv1.Endpoint, hedged bool) {
	p := e.providers[ep.GetId()]
	r.calls++
	r.tried[ep.GetId()] = true
	if hedged {
		r.hedgeStarted = true
	}
	l := &leg{r: r, ep: ep, p: p, start: e.now, hedge: hedged}
	// Keyed by session, turn and call, so every policy draws the same luck
	// for the same call of the same request.
	l.a = p.call(e.now, e.rng(uint64(r.s.id)<<16|uint64(r.turn), uint64(r.calls)), r.t.prompt, r.sid(), r.s.system)
	r.legs = append(r.legs, l)
	first := l.a.ttft
	if !r.t.stream && l.a.outcome == outcomeOK {
		first += p.genTime(r.output) // a whole answer arrives at once
	}
	if l.a.outcome == outcomeOK && first <= e.o.FirstTokenTimeout {
		e.at(l.start.Add(first), func() { e.firstToken(l, first) })
		return
	}
	e.at(l.start.Add(e.failTime(l.a)), func() { e.failed(l) })
}

// firstToken commits l to the client if no other leg did, and cancels the others.
func (e *engine) firstToken(l *leg, first time.Duration) {
	r := l.r
	if l.over {
		return
	}
	l.over = true
	l.firstAt = e.now
	r.winner = l
	r.hedgeWait = false
	l.p.warm(r.sid(), r.t.prompt, e.now, r.s.system)
	for _, o := range r.legs {
		if o == l || o.over {
			continue
		}
		o.over = true
		o.end()
		if e.o.HedgeLoserWarmsCache || o.p.cfg.Cache.CancelledLegWarms {
			o.p.warm(r.sid(), r.t.prompt, e.now, r.s.system)
		}
		r.loserCost = loserCost(r.t.prompt, o.ep.GetPrice())
		e.report(e.callReport(o, switchboardv1.Outcome_OUTCOME_CANCELLED, e.now.Sub(o.start)))
	}
	r.legs = nil
	end := l.start.Add(first)
	if r.t.stream {
		end = end.Add(l.p.genTime(r.output))
	}
	e.at(end, func() {
		l.end()
		rep := e.callReport(l, switchboardv1.Outcome_OUTCOME_OK, e.now.Sub(l.start))
		rep.Ttft = durationpb.New(first)
		rep.PromptHash, rep.Prefixes = r.hash, r.prefixes
		l.cost = pricing.Cost(l.p.rates, pricing.Usage{Input: r.t.prompt, CachedInput: l.a.cached, Output: r.output})
		rep.Usage = &switchboardv1.Usage{InputTokens: r.t.prompt, CachedInputTokens: l.a.cached, OutputTokens: r.output, Reported: true,
			CostUsd: l.cost}
		e.report(rep)
		e.finish(r)
	})
}

// failed reports a failed leg and goes on with the next endpoint when no
// other leg of the attempt is still running.
func (e *engine) failed(l *leg) {
	r := l.r
	if l.over {
		return
	}
	l.over = true
	l.end()
	rep := e.callReport(l, 0, e.now.Sub(l.start))
	e.fillFailure(rep, l.a)
	e.report(rep)
	r.failedTime += e.now.Sub(l.start)
	if l.a.outcome == outcomeRateLimited {
		r.met429 = true
		r.calls429++
	}
	// A primary that failed before the hedge started is retried on the
	// fallbacks: the hedge has nothing left to race.
	r.hedgeWait = false
	running := r.legs[:0]
	for _, o := range r.legs {
		if !o.over {
			running = append(running, o)
		}
	}
	r.legs = running
	if len(running) == 0 {
		e.attempt(r)
	}
}

func (e *engine) callReport(l *leg, o switchboardv1.Outcome, d time.Duration) *switchboardv1.CallReport {
	return &switchboardv1.CallReport{RequestId: l.r.id, Model: l.r.s.model, EndpointId: l.ep.GetId(), PromptTokens: l.r.t.prompt,
		Stream: l.r.t.stream, StartTime: timestamppb.New(l.start), Duration: durationpb.New(d), Outcome: o, Hedge: l.hedge}
}

// finish ends r: records it, settles the hedge budget with what the
// cancelled leg cost, and schedules the session's next turn.
func (e *engine) finish(r *request) {
	if r.done {
		return
	}
	r.done = true
	if r.hedgeGranted {
		e.budget.Settle(r.id, r.loserCost)
	}
	s := r.s
	if w := r.winner; w != nil {
		if s.lastProvider != "" && s.lastProvider != w.ep.GetProvider() {
			r.moved = true
		}
		s.lastProvider = w.ep.GetProvider()
	}
	e.res.add(r)
	if r.turn+1 < len(s.turns) {
		next := s.turns[r.turn+1]
		at := e.now.Add(next.think)
		if s.fixedTimes {
			at = next.at
		}
		e.at(at, func() { e.arrive(s, r.turn+1) })
		return
	}
	e.active--
}

func (r *request) sid() int {
	if r.s.conversation {
		return r.s.id
	}
	return -1
}
