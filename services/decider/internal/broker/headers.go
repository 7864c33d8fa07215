package broker

import (
	"math"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/failclass"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker/provheaders"
)

// Header is one HTTP response header of a provider.
type Header struct {
	// Name is the header name, any case.
	Name string
	// Value is the header value.
	Value string
}

// LimitInfo is what a provider said about one of its limits.
type LimitInfo = provheaders.LimitInfo

// ProviderHeaders is a provider's rate-limit headers, parsed.
type ProviderHeaders = provheaders.Headers

// Bounds on what a header may say; beyond them it is malformed.
const (
	maxHeaderValue   = provheaders.MaxValue
	maxHeaderHorizon = provheaders.MaxHorizon
)

// ParseHeaders parses a provider's rate-limit headers as of now: see
// [provheaders.Parse]. A malformed header is skipped and reported in the
// error; everything else is returned.
func ParseHeaders(hs []Header, now time.Time) (ProviderHeaders, error) {
	return provheaders.Parse(func(yield func(name, value string) bool) {
		for _, h := range hs {
			if !yield(h.Name, h.Value) {
				return
			}
		}
	}, now)
}

// applyHeaders folds a provider's answer (req's headers, outcome and
// failure class) for res into the route's buckets and pause, and returns
// the parsed headers, the pause now in force for res's tenant and the
// headers' problems. A deferred failure pauses nothing; an account refusal
// pauses every route of the account. A scoped request (scope.go) pauses
// the route for res's tenant only and corrects no bucket.
func (b *Broker) applyHeaders(res *Reservation, req *ReconcileRequest, now int64) (ProviderHeaders, time.Time, error) {
	endpoint, tenant := res.EndpointID, res.Identity.TenantID
	if req.Scoped {
		b.scoped.Add(1)
	}
	hs, outcome, failure := req.Headers, req.Outcome, req.Failure
	if req.FailureDeferred {
		outcome, failure = OutcomeUnspecified, ReasonUnspecified
	}
	if endpoint == "" {
		return ProviderHeaders{}, time.Time{}, nil
	}
	var p ProviderHeaders
	var perr error
	if len(hs) > 0 {
		p, perr = ParseHeaders(hs, time.Unix(0, now))
	}
	rt := b.tab.Load().routes[endpoint]
	if rt == nil {
		if len(hs) == 0 && outcome != OutcomeRateLimited && !pauses(failure) {
			return p, time.Time{}, perr
		}
		rt = b.ensureRoute(endpoint)
	}
	// pauseOf is the pause this request moves of a route: the route's own,
	// or, scoped, the tenant's.
	pauseOf := func(r *route) *pause {
		if req.Scoped {
			return b.tenantPause(r.EndpointID, tenant, true)
		}
		return r.pause
	}
	for _, f := range [...]struct {
		info *LimitInfo
		unit Unit
	}{{&p.Requests, UnitRequests}, {&p.Tokens, UnitTotalTokens}, {&p.InputTokens, UnitInputTokens}, {&p.OutputTokens, UnitOutputTokens}} {
		if !f.info.Empty() && !req.Scoped {
			rt = b.correct(rt, f.unit, *f.info, now)
		}
	}

	// The pause: Retry-After first, then a limit the provider says is empty
	// until its reset, then back-off on a bare 429 or overload, and a
	// policy refusal (a spend limit) for as long as MaxPause allows.
	var wait int64
	switch {
	case !p.RetryAfter.IsZero():
		wait = p.RetryAfter.UnixNano() - now
	default:
		for _, li := range [...]*LimitInfo{&p.Requests, &p.Tokens, &p.InputTokens, &p.OutputTokens} {
			if li.HasRemaining && li.Remaining < 1 && !li.Reset.IsZero() {
				wait = max(wait, li.Reset.UnixNano()-now)
			}
		}
	}
	switch {
	case req.FailureDeferred:
		// Whether this failure is the endpoint's is not known yet: the
		// limits above are corrected, nothing is paused.
		wait = 0
	case outcome == OutcomeOK:
		switch pz := b.tenantPause(endpoint, tenant, false); {
		case !req.Scoped:
			rt.pause.streak.Store(0)
		case pz != nil:
			pz.streak.Store(0)
		}
	case failure == ReasonNonRetryablePolicy && wait <= 0:
		// Retrying cannot succeed before the account changes or its
		// period resets, which the provider did not say: as long as a
		// pause may last.
		wait = int64(b.opts.MaxPause)
	case (outcome == OutcomeRateLimited || backsOff(failure)) && wait <= 0:
		n := min(pauseOf(rt).streak.Add(1), 31)
		d := int64(b.opts.BackoffBase) << (n - 1)
		if d <= 0 || d > int64(b.opts.BackoffMax) {
			d = int64(b.opts.BackoffMax)
		}
		wait = d
	}
	if wait > 0 {
		// Whoever reports it, no pause outlasts the longest a provider's
		// own Retry-After may set.
		wait = min(wait, int64(b.opts.MaxPause), int64(provheaders.MaxRetryAfter))
		jmax := min(float64(b.opts.MaxJitter), b.opts.JitterFraction*float64(wait))
		until := now + wait + int64(b.opts.Rand()*jmax)
		reason := ReasonRetryableCapacity
		switch {
		case pauses(failure):
			reason = failure
		case outcome == OutcomeUpstreamError:
			reason = ReasonRetryableOverload
		}
		pauseOf(rt).extend(until, reason)
		if rt.Account != "" && failure == ReasonNonRetryablePolicy && failclass.IsAccount(failclass.NonRetryablePolicy, req.ProviderErrorCode) {
			// The provider account refused, not this route: every endpoint
			// called with that account would refuse too, whatever the model.
			for _, o := range b.tab.Load().accounts[rt.Account] {
				pauseOf(o).extend(until, reason)
			}
		}
	}
	var pausedUntil time.Time
	u := rt.pause.until.Load()
	if tp := b.tenantPause(endpoint, tenant, false); tp != nil {
		u = max(u, tp.until.Load())
	}
	if u > now {
		pausedUntil = time.Unix(0, u).UTC()
	}
	return p, pausedUntil, perr
}

// extend makes the pause last until until at least, with reason.
func (p *pause) extend(until int64, reason RefusalReason) {
	for {
		cur := p.until.Load()
		if until <= cur {
			return
		}
		if p.until.CompareAndSwap(cur, until) {
			p.reason.Store(int32(reason))
			return
		}
	}
}

// correct folds one limit's headers into the route: each of the route's
// per-minute token buckets of that unit is lowered to the provider's
// remaining when the provider says less is left (never raised: our level
// also counts reservations the provider has not seen yet); a learned bucket
// follows the provider's limit; and a limit no bucket covers becomes a
// learned per-minute model_route bucket. It returns the route, which is new
// when a bucket was learned.
func (b *Broker) correct(rt *route, unit Unit, li LimitInfo, now int64) *route {
	covered := false
	for _, bk := range rt.buckets {
		if bk.unit != unit || bk.rule != RuleTokenBucket || bk.window != WindowMinute {
			continue
		}
		covered = true
		bk.mu.Lock()
		bk.advance(now)
		if bk.source == SourceLearned && li.HasLimit && li.Limit > 0 && li.Limit != bk.p.capacity {
			d := bk.p
			d.capacity = li.Limit
			bk.setParams(d, now)
		}
		if li.HasRemaining && li.Remaining < bk.level {
			bk.level = li.Remaining
		}
		bk.mu.Unlock()
	}
	if covered || !li.HasLimit || !(li.Limit > 0) {
		return rt
	}
	return b.learn(rt.EndpointID, unit, li, now)
}

// learn adds a learned per-minute bucket on the route. OpenAI's and
// Anthropic's headers describe per-minute limits, hence the window.
func (b *Broker) learn(endpoint string, unit Unit, li LimitInfo, now int64) *route {
	b.cfgMu.Lock()
	defer b.cfgMu.Unlock()
	old := b.tab.Load()
	d := def{scope: ScopeModelRoute, key: endpoint, unit: unit, window: WindowMinute, rule: RuleTokenBucket,
		source: SourceLearned, capacity: li.Limit, period: int64(time.Minute)}
	d.id = bucketID(d.scope, d.key, d.unit, d.window, d.rule, d.source)
	if old.byID[d.id] == nil {
		bk := newBucket(d, b.idx.Add(1), now)
		if li.HasRemaining {
			bk.level = math.Min(bk.level, li.Remaining)
		}
		bs := append(old.buckets[:len(old.buckets):len(old.buckets)], bk)
		routes := make([]Route, 0, len(old.routeDefs))
		for _, r := range old.routeDefs {
			routes = append(routes, r.Route)
		}
		b.tab.Store(buildTable(bs, routes, old))
	}
	return b.tab.Load().routes[endpoint]
}

// pauses reports whether a classified failure pauses its route even
// without headers: a rate limit or overload (back-off) and a provider's
// policy refusal. A failure of the request itself says nothing of the
// route.
func pauses(failure RefusalReason) bool {
	return backsOff(failure) || failure == ReasonNonRetryablePolicy
}

// backsOff reports whether a classified failure without Retry-After
// pauses its route with the capped exponential back-off.
func backsOff(failure RefusalReason) bool {
	return failure == ReasonRetryableCapacity || failure == ReasonRetryableOverload
}
