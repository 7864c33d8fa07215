package broker

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header is one HTTP response header of a provider.
type Header struct {
	// Name is the header name, any case.
	Name string
	// Value is the header value.
	Value string
}

// LimitInfo is what a provider said about one of its limits.
type LimitInfo struct {
	// Limit is the provider's limit, valid when HasLimit.
	Limit float64
	// HasLimit says Limit was given.
	HasLimit bool
	// Remaining is what the provider says is left, valid when HasRemaining.
	Remaining float64
	// HasRemaining says Remaining was given.
	HasRemaining bool
	// Reset is when the provider says the limit is full again; zero if not given.
	Reset time.Time
}

func (l LimitInfo) empty() bool { return !l.HasLimit && !l.HasRemaining && l.Reset.IsZero() }

// ProviderHeaders is a provider's rate-limit headers, parsed.
type ProviderHeaders struct {
	// Requests is the request limit (x-ratelimit-*-requests, anthropic-ratelimit-requests-*).
	Requests LimitInfo
	// Tokens is the combined token limit (x-ratelimit-*-tokens, anthropic-ratelimit-tokens-*).
	Tokens LimitInfo
	// InputTokens is the input token limit (x-ratelimit-*-input-tokens, anthropic-ratelimit-input-tokens-*).
	InputTokens LimitInfo
	// OutputTokens is the output token limit (x-ratelimit-*-output-tokens, anthropic-ratelimit-output-tokens-*).
	OutputTokens LimitInfo
	// RetryAfter is when the provider allows the next call (retry-after-ms
	// wins over retry-after); zero if not given.
	RetryAfter time.Time
}

// Bounds on what a header may say; beyond them it is malformed. A provider
// limit above 1e15 or a reset more than a year away is a bug, not a quota.
const (
	maxHeaderValue   = 1e15
	maxHeaderHorizon = 366 * 24 * time.Hour
)

// ParseHeaders parses a provider's rate-limit headers as of now. It never
// fails as a whole: a malformed header is skipped and reported in the error
// (errors.Join of each problem), and everything else is returned. Names are
// matched in any case. Accepted values:
//
//   - limit and remaining: a non-negative decimal number;
//   - reset (x-ratelimit-reset-*): a Go duration ("1s", "6m0s", "12ms"), a
//     number of seconds ("30", "0.5"), a Unix epoch in seconds (≥ 1e9) or
//     milliseconds (≥ 1e12), or an RFC 3339 time;
//   - anthropic-ratelimit-*-reset: an RFC 3339 time, or any of the above;
//   - retry-after: seconds or an HTTP date; retry-after-ms: milliseconds.
//
// A time already past is taken as now.
func ParseHeaders(hs []Header, now time.Time) (ProviderHeaders, error) {
	var p ProviderHeaders
	var errs []error
	var retryMS time.Time
	for _, h := range hs {
		name := strings.ToLower(strings.TrimSpace(h.Name))
		v := strings.TrimSpace(h.Value)
		var err error
		switch {
		case name == "retry-after":
			p.RetryAfter, err = parseRetryAfter(v, now)
		case name == "retry-after-ms":
			retryMS, err = parseMillis(v, now)
		case strings.HasPrefix(name, "x-ratelimit-"):
			kind, family, ok := strings.Cut(name[len("x-ratelimit-"):], "-")
			if li := p.family(family); ok && li != nil {
				err = li.set(kind, v, now)
			}
		case strings.HasPrefix(name, "anthropic-ratelimit-"):
			rest := name[len("anthropic-ratelimit-"):]
			i := strings.LastIndexByte(rest, '-')
			if i > 0 {
				if li := p.family(rest[:i]); li != nil {
					err = li.set(rest[i+1:], v, now)
				}
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("header %s: %w", name, err))
		}
	}
	if !retryMS.IsZero() {
		p.RetryAfter = retryMS
	}
	return p, errors.Join(errs...)
}

func (p *ProviderHeaders) family(f string) *LimitInfo {
	switch f {
	case "requests":
		return &p.Requests
	case "tokens":
		return &p.Tokens
	case "input-tokens":
		return &p.InputTokens
	case "output-tokens":
		return &p.OutputTokens
	}
	return nil
}

func (l *LimitInfo) set(kind, v string, now time.Time) error {
	switch kind {
	case "limit":
		f, err := parseAmount(v)
		if err != nil {
			return err
		}
		l.Limit, l.HasLimit = f, true
	case "remaining":
		f, err := parseAmount(v)
		if err != nil {
			return err
		}
		l.Remaining, l.HasRemaining = f, true
	case "reset":
		t, err := parseReset(v, now)
		if err != nil {
			return err
		}
		l.Reset = t
	}
	return nil
}

func parseAmount(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0 && f <= maxHeaderValue) {
		return 0, fmt.Errorf("%q is not a non-negative number", trunc(v))
	}
	return f, nil
}

// parseReset parses a reset value into an absolute time.
func parseReset(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, errors.New("empty reset")
	}
	if c := v[len(v)-1]; c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
		if d, err := time.ParseDuration(v); err == nil {
			return after(now, d)
		}
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		switch {
		case !(f >= 0) || math.IsInf(f, 0):
			return time.Time{}, fmt.Errorf("%q is not a non-negative number", trunc(v))
		case f >= 1e12:
			return epoch(now, f/1e3)
		case f >= 1e9:
			return epoch(now, f)
		}
		return after(now, time.Duration(f*float64(time.Second)))
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return at(now, t)
	}
	return time.Time{}, fmt.Errorf("%q is not a duration, a number of seconds, an epoch or an RFC 3339 time", trunc(v))
}

func parseRetryAfter(v string, now time.Time) (time.Time, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if !(f >= 0) || f > maxHeaderHorizon.Seconds() {
			return time.Time{}, fmt.Errorf("%q is out of range", trunc(v))
		}
		return after(now, time.Duration(f*float64(time.Second)))
	}
	if t, err := http.ParseTime(v); err == nil {
		return at(now, t)
	}
	return time.Time{}, fmt.Errorf("%q is neither seconds nor an HTTP date", trunc(v))
}

func parseMillis(v string, now time.Time) (time.Time, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0) || f > float64(maxHeaderHorizon.Milliseconds()) {
		return time.Time{}, fmt.Errorf("%q is not a number of milliseconds in range", trunc(v))
	}
	return after(now, time.Duration(f*float64(time.Millisecond)))
}

func after(now time.Time, d time.Duration) (time.Time, error) {
	if d < 0 || d > maxHeaderHorizon {
		return time.Time{}, fmt.Errorf("duration %s is out of range", d)
	}
	return now.Add(d).UTC(), nil
}

func epoch(now time.Time, sec float64) (time.Time, error) {
	whole, frac := math.Modf(sec)
	return at(now, time.Unix(int64(whole), int64(frac*1e9)))
}

func at(now, t time.Time) (time.Time, error) {
	if t.Before(now) {
		return now.UTC(), nil
	}
	if t.Sub(now) > maxHeaderHorizon {
		return time.Time{}, fmt.Errorf("time %s is too far ahead", t.UTC().Format(time.RFC3339))
	}
	return t.UTC(), nil
}

// trunc keeps error messages short whatever a provider sends.
func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// applyHeaders folds a provider's answer into the route's buckets and pause,
// and returns the parsed headers, the pause now in force and the headers'
// problems.
func (b *Broker) applyHeaders(endpoint string, hs []Header, outcome Outcome, now int64) (ProviderHeaders, time.Time, error) {
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
		if len(hs) == 0 && outcome != OutcomeRateLimited {
			return p, time.Time{}, perr
		}
		rt = b.ensureRoute(endpoint)
	}
	for _, f := range [...]struct {
		info *LimitInfo
		unit Unit
	}{{&p.Requests, UnitRequests}, {&p.Tokens, UnitTotalTokens}, {&p.InputTokens, UnitInputTokens}, {&p.OutputTokens, UnitOutputTokens}} {
		if !f.info.empty() {
			rt = b.correct(rt, f.unit, *f.info, now)
		}
	}

	// The pause: Retry-After first, then a limit the provider says is empty
	// until its reset, then back-off on a bare 429.
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
	case outcome == OutcomeOK:
		rt.pause.streak.Store(0)
	case outcome == OutcomeRateLimited && wait <= 0:
		n := min(rt.pause.streak.Add(1), 31)
		d := int64(b.opts.BackoffBase) << (n - 1)
		if d <= 0 || d > int64(b.opts.BackoffMax) {
			d = int64(b.opts.BackoffMax)
		}
		wait = d
	}
	if wait > 0 {
		wait = min(wait, int64(b.opts.MaxPause))
		jmax := min(float64(b.opts.MaxJitter), b.opts.JitterFraction*float64(wait))
		until := now + wait + int64(b.opts.Rand()*jmax)
		reason := ReasonRetryableCapacity
		if outcome == OutcomeUpstreamError {
			reason = ReasonRetryableOverload
		}
		for {
			cur := rt.pause.until.Load()
			if until <= cur {
				break
			}
			if rt.pause.until.CompareAndSwap(cur, until) {
				rt.pause.reason.Store(int32(reason))
				break
			}
		}
	}
	var pausedUntil time.Time
	if u := rt.pause.until.Load(); u > now {
		pausedUntil = time.Unix(0, u).UTC()
	}
	return p, pausedUntil, perr
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
