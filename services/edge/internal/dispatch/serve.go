package dispatch

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/failclass"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/invoice"
)

// serving is one client request in progress: every leg started for it, in
// start order, what became of the hedge, and its reservations.
type serving struct {
	d    *Dispatcher
	call Call
	w    http.ResponseWriter

	legs []*leg
	// attempts are the legs and the skipped endpoints, in order, for the
	// activity record.
	attempts []attempt
	winner   *leg
	// lastFailed is the last leg to fail, whose error ends a request that
	// every attempt failed.
	lastFailed *leg
	hedge      *switchboardv1.HedgeInfo

	// rsv is the request's reservation bookkeeping.
	rsv *reservations
	// pending is a delayed hedge's budget-and-reserve step still running
	// when its race ended; drained before release.
	pending *pendingHedge
	// stopped is the broker's refusal that ended the request's retries
	// (code retry_budget or non_retryable): not an attempt, the reason
	// there was none more.
	stopped *skip
	// held are the failed legs whose failure may be the request's, until
	// its outcome says (charge.go); repeated is set, as the client's error,
	// once two endpoints failed it the same way.
	held     []*leg
	repeated *Failure
	// plan is the endpoints the request may try, in order (serve).
	plan []*switchboardv1.Endpoint

	// legsBuf and attemptsBuf back legs and attempts up to two entries,
	// all most requests have, so that they cost no allocation of their own.
	legsBuf     [2]*leg
	attemptsBuf [2]attempt
}

func newServing(d *Dispatcher, call Call, w http.ResponseWriter) *serving {
	s := &serving{d: d, call: call, w: w, rsv: newReservations(d.opts.Ledger, call.Admission)}
	s.legs, s.attempts = s.legsBuf[:0], s.attemptsBuf[:0]
	return s
}

// serve runs the attempts: the first one hedged when the plan says so, then
// the fallbacks not tried yet, until one is ready, the client leaves, the
// provider rejects the request itself, or MaxAttempts legs were started.
func (s *serving) serve(ctx context.Context, endpoints []*switchboardv1.Endpoint) error {
	d := s.d
	plan := d.plan(endpoints)
	s.plan = plan
	if len(plan) == 0 {
		// No endpoint can be called at all (none has a base URL): the
		// catalog's to fix, not a wait's.
		return &Failure{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "no_available_provider",
			Message: "no provider is available for this request", Final: true}
	}
	for i, ep := range plan {
		if s.tried(ep.GetId()) || s.rsv.isRefused(ep.GetId()) {
			continue
		}
		if len(s.legs) >= d.opts.MaxAttempts {
			break
		}
		// Nothing is sent before the broker reserved it: an endpoint
		// it refuses is skipped, as routing skips a full one.
		id, sk := s.reservation(ctx, ep, false)
		if sk != nil {
			if s.skipped(sk) {
				return s.failure()
			}
			continue
		}
		if i > 0 && ctx.Err() != nil {
			// The client left while the fallback was reserved.
			s.rsv.keep(ep.GetId(), id)
			return ErrClientGone
		}
		var hedgeEp *switchboardv1.Endpoint
		if i == 0 {
			hedgeEp = s.hedgeTarget(ep)
		}
		winner, losers, err := s.try(ctx, ep, id, hedgeEp)
		if err != nil {
			return err
		}
		if winner != nil {
			return s.deliver(ctx, winner, losers)
		}
	}
	return s.retrySame(ctx, plan)
}

// tried reports whether a leg was started on the endpoint: a request has
// MaxAttempts legs at most, fewer than a set would be worth.
func (s *serving) tried(endpointID string) bool {
	for _, l := range s.legs {
		if l.Endpoint.GetId() == endpointID {
			return true
		}
	}
	return false
}

// deliver relays the winner's answer to the client, with the losers of
// its race reaped beside it.
func (s *serving) deliver(ctx context.Context, winner *leg, losers []*leg) error {
	s.winner = winner
	// Another endpoint answered: the failures held so far were their
	// endpoints'.
	s.charge()
	s.markRetries()
	// The losers are reaped beside the delivery: their reservation goes
	// back and their report out as soon as each has stopped, not when the
	// winner's stream ends, however long that takes.
	reaped := s.reapAsync(losers)
	winner.Deliver(ctx, s.w)
	winner.Close()
	s.settle(winner)
	<-reaped
	s.reap(losers)
	if s.hedge != nil && s.hedge.GetUsed() {
		s.hedge.WinnerEndpointId = winner.Endpoint.GetId()
	}
	return nil
}

// try runs one attempt on ep under reservation id, with a hedge leg on
// hedgeEp when it is not nil and both the budget and the broker grant it. It
// returns the first leg to become ready, with the other legs still running
// (cancelled, to be reaped); or, when every leg failed, no leg and the error
// that ends the request (nil to go on with the fallbacks). Every failed leg
// is reported before try returns.
func (s *serving) try(ctx context.Context, ep *switchboardv1.Endpoint, id string, hedgeEp *switchboardv1.Endpoint) (winner *leg, losers []*leg, err error) {
	r := &race{done: make(chan *leg, 2), stopAcquire: func() {}}
	r.running = r.runningBuf[:0]
	stop := s.start(ctx, r, ep, id, hedgeEp)
	defer stop()
	defer func() {
		// The race ended while the delayed hedge's grant was in flight:
		// the budget call is cancelled and the step handed to Serve, which
		// joins it after the answer and releases what it reserved.
		if r.grant != nil {
			r.stopAcquire()
			s.pending = &pendingHedge{grant: r.grant, ep: hedgeEp}
		}
	}()
	for len(r.running) > 0 {
		select {
		case l := <-r.done:
			if over, winner, losers, err := s.legDone(ctx, r, l); over {
				return winner, losers, err
			}
			if s.repeated != nil && r.final == nil {
				// Two endpoints failed the request the same way: it ends
				// with that error once the race's other leg (if any) is done.
				r.final = s.repeated
			}
		case <-r.delay:
			r.delay = nil
			s.askHedge(ctx, r, ep, hedgeEp)
		case g := <-r.grant:
			r.grant = nil
			r.stopAcquire()
			s.hedgeGranted(ctx, r, hedgeEp, g)
		}
	}
	if r.final != nil {
		return nil, nil, r.final
	}
	return nil, nil, nil
}

// race is one attempt in progress: its legs running and, while a delayed
// hedge is being decided, what it waits for.
type race struct {
	// done receives each leg when its open returned: one slot per leg.
	done    chan *leg
	running []*leg
	// delay fires when a delayed hedge is due; nil when none is.
	delay <-chan time.Time
	// grant is set while a delayed hedge's AcquireHedge (and then Reserve)
	// is in flight. It runs beside the race, so a primary whose first token
	// arrives meanwhile is not held back; stopAcquire cancels it.
	grant       chan hedgeGrant
	stopAcquire func()
	// final is the first provider rejection of the request itself.
	final *Failure
	// runningBuf backs running: a race has two legs at most.
	runningBuf [2]*leg
}

// start launches the attempt's primary leg and, for an immediate hedge the
// budget and the broker grant, its hedge leg; for a delayed hedge it sets
// the race's delay. It returns what stops the delay's timer.
func (s *serving) start(ctx context.Context, r *race, ep *switchboardv1.Endpoint, id string, hedgeEp *switchboardv1.Endpoint) (stop func()) {
	if hedgeEp == nil {
		// A race of one leg has nothing to run beside its open: the leg
		// is opened on the request's goroutine, the race's only waiter.
		openLeg(ctx, r, s.addLeg(ctx, r, ep, false, id))
		return func() {}
	}
	if s.hedge.GetMode() == switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE {
		// Budget, then reservation, then both legs at once.
		granted := s.acquire(ctx, ep, hedgeEp)
		var hid string
		var sk *skip
		if granted {
			hid, sk = s.reservation(ctx, hedgeEp, true)
		}
		s.launch(ctx, r, ep, false, id)
		switch {
		case sk != nil:
			s.attempts = append(s.attempts, attempt{skip: sk})
		case granted:
			s.launch(ctx, r, hedgeEp, true, hid)
			s.hedge.Used = true
		}
		return func() {}
	}
	s.launch(ctx, r, ep, false, id)
	d := defaultHedgeDelay
	if hd := s.call.Hedge.GetDelay(); hd != nil && hd.AsDuration() > 0 {
		d = hd.AsDuration()
	}
	t := time.NewTimer(d)
	r.delay = t.C
	return func() { t.Stop() }
}

// launch starts a leg on ep under reservation, opening it on its own
// goroutine, which sends it on the race's done channel when open returns.
func (s *serving) launch(ctx context.Context, r *race, ep *switchboardv1.Endpoint, hedge bool, reservation string) {
	l := s.addLeg(ctx, r, ep, hedge, reservation)
	go openLeg(ctx, r, l)
}

// addLeg prepares a leg on ep under reservation as one of the race's legs,
// to be opened by openLeg.
func (s *serving) addLeg(ctx context.Context, r *race, ep *switchboardv1.Endpoint, hedge bool, reservation string) *leg {
	l := s.d.newLeg(ctx, s.call, ep, hedge)
	l.reservation = reservation
	s.rsv.use(reservation)
	l.opened = make(chan struct{})
	s.legs = append(s.legs, l)
	s.attempts = append(s.attempts, attempt{leg: l})
	r.running = append(r.running, l)
	return l
}

// openLeg opens a leg of the race and sends it on the race's done channel.
func openLeg(ctx context.Context, r *race, l *leg) {
	l.Opened(l.Open(ctx))
	close(l.opened)
	r.done <- l // never blocks: one slot per leg
}

// legDone handles a leg whose open returned. over is set when the race
// ended: with the leg as its winner (the others cancelled, returned as
// losers), or with the client gone.
func (s *serving) legDone(ctx context.Context, r *race, l *leg) (over bool, winner *leg, losers []*leg, err error) {
	r.running = without(r.running, l)
	if l.Ready() {
		for _, o := range r.running {
			o.Lose()
		}
		return true, l, r.running, nil
	}
	l.Close()
	s.settle(l)
	if ctx.Err() != nil || l.Result.Outcome == switchboardv1.Outcome_OUTCOME_CANCELLED {
		s.reap(r.running)
		return true, nil, nil, ErrClientGone
	}
	if rej := l.Result.Rejection; rej != nil && r.final == nil {
		r.final = &Failure{Status: rej.Status, Type: rej.Type, Code: rej.Code, Param: rej.Param, Message: rej.Message,
			Provider: l.Endpoint.GetProvider(), Final: true}
	}
	// A primary that failed before the hedge started is retried on the
	// fallbacks as usual; the hedge has nothing left to race.
	r.delay = nil
	return false, nil, nil, nil
}

func without(legs []*leg, l *leg) []*leg {
	out := legs[:0:0]
	for _, o := range legs {
		if o != l {
			out = append(out, o)
		}
	}
	return out
}

// reapAsync waits, on its own goroutine, for the legs that lost a race to
// stop, and closes and reports each one that ended cancelled as soon as it
// has. It touches only those legs and what reporting reads, so it runs
// beside the winner's delivery; the returned channel is closed when it is
// done, after which reap finishes the rest on the request's goroutine.
func (s *serving) reapAsync(legs []*leg) <-chan struct{} {
	done := make(chan struct{})
	if len(legs) == 0 {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		for _, l := range legs {
			<-l.opened
			if l.Ready() {
				// Both legs produced a first token; this one lost the race.
				l.LostRace()
			}
			l.Close()
			if l.Result.Outcome == switchboardv1.Outcome_OUTCOME_CANCELLED && !l.Result.Committed {
				s.d.report(s.call, l)
				s.d.logAttempt(s.call, l)
				l.reported = true
			}
		}
	}()
	return done
}

// reap waits for legs that were cancelled (a lost hedge, or the client
// leaving), closes and reports them. Each running leg's goroutine sends
// exactly once on its done channel, so none outlives the request.
func (s *serving) reap(legs []*leg) {
	for _, l := range legs {
		<-l.opened
		if l.Ready() && !l.reported {
			// Both legs produced a first token; this one lost the race.
			l.LostRace()
		}
		l.Close()
		s.settle(l)
	}
}

// settle reports a closed leg and logs it, and notes what the hedge budget
// pays: a leg cancelled because the other won, or the hedge leg when the
// client left during the race (an extra call made on the budget either way).
func (s *serving) settle(l *leg) {
	if l.held {
		return // settled when it was held; charge reports it
	}
	cancelled := l.Result.Outcome == switchboardv1.Outcome_OUTCOME_CANCELLED && !l.Result.Committed
	if !l.Result.Committed && !cancelled {
		s.lastFailed = l
		if s.call.ProbeID == "" && suspect(l) && s.mayRepeat(l) {
			// Maybe the request's failure, not the endpoint's: held until
			// the request's outcome says.
			s.hold(l)
			return
		}
		// A failed attempt gives its capacity back at once, before any
		// fallback is reserved: waiting for the batched report would let a
		// tenant at its concurrency cap be refused its own failover.
		s.releaseFailed(l, false)
	}
	if cancelled && s.hedge != nil && (l.Lost() || l.hedge) {
		s.hedge.LoserEndpointId = l.Endpoint.GetId()
		s.hedge.LoserCostUsd = invoice.LoserCost(s.call.PromptTokens, l.Endpoint.GetPrice())
	}
	if l.reported {
		return // reported by reapAsync already
	}
	l.reported = true
	s.d.report(s.call, l)
	s.d.logAttempt(s.call, l)
}

// failure is the error for a request whose every attempt failed before
// anything reached the client: the last meaningful failure, with the list of
// attempts. A 429 (rate limits) or 503 (overload) says in Retry-After the
// soonest time one of the endpoints tried may serve again.
func (s *serving) failure() *Failure {
	s.markRetries()
	var tried []string
	var capacity *skip
	stopped := ""
	if s.stopped != nil {
		stopped = "; " + s.stopped.summary
	}
	for _, a := range s.attempts {
		switch {
		case a.leg != nil:
			tried = append(tried, a.leg.Endpoint.GetProvider()+": "+a.leg.Result.Summary)
		default:
			tried = append(tried, a.skip.ep.GetProvider()+": "+a.skip.summary)
			if a.skip.capacity && (capacity == nil || a.skip.retryAfter < capacity.retryAfter) {
				capacity = a.skip
			}
		}
	}
	last := s.lastFailed
	f := &Failure{
		Status:  http.StatusBadGateway,
		Type:    "upstream_error",
		Code:    "upstream_error",
		Message: fmt.Sprintf("all %d attempts failed: %s%s", len(tried), strings.Join(tried, "; "), stopped),
	}
	if last == nil {
		if capacity != nil {
			// No provider was called: every endpoint was full. Come back
			// when the first of them has room.
			f.Status, f.Type, f.Code, f.RetryAfter = http.StatusTooManyRequests, rateLimitType, rateLimitCode, capacity.retryAfter
		}
		return f
	}
	// Every endpoint the plan allowed was tried, up to MaxAttempts.
	f.Final = true
	switch {
	case last.Result.Class() == failclass.NonRetryablePolicy:
		// The provider's account refused (a spend limit, a disabled key):
		// not the client's doing, and not a rate limit it could wait out.
	case last.Result.Outcome == switchboardv1.Outcome_OUTCOME_RATE_LIMITED:
		f.Status, f.Type, f.Code, f.RetryAfter = http.StatusTooManyRequests, rateLimitType, rateLimitCode, s.soonest()
	case last.Result.Status == http.StatusServiceUnavailable || last.Result.Status == failclass.StatusOverloaded:
		f.Status, f.Type, f.Code, f.RetryAfter = http.StatusServiceUnavailable, "upstream_error", "provider_overloaded", s.soonest()
	case last.Result.Outcome == switchboardv1.Outcome_OUTCOME_TIMEOUT:
		f.Status, f.Type, f.Code = http.StatusGatewayTimeout, "timeout_error", "upstream_timeout"
	}
	return f
}

// A 429 made of providers' refusals speaks OpenAI's vocabulary, as the
// edge's other 429s do: code rate_limit_exceeded, and a type naming the
// kind of limit — "requests", since which of a provider's limits refused is
// not known.
const (
	rateLimitType = "requests"
	rateLimitCode = "rate_limit_exceeded"
)
