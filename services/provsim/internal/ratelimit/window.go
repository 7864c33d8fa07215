// Package ratelimit simulates a provider's per-minute quotas on requests and
// tokens with a rolling one-minute window, and reports them the way OpenAI's
// x-ratelimit-* headers do, so a gateway can learn from them.
package ratelimit

import (
	"sync"
	"time"
)

// Span is the length of the rolling window unless a Window sets its own.
const Span = time.Minute

// Limits are the quotas of one window; zero means unlimited.
type Limits struct {
	RequestsPerMinute int64
	TokensPerMinute   int64
}

// Status is one quota's state after a decision, as sent in headers.
type Status struct {
	// Limit is the quota.
	Limit int64
	// Remaining is what is left in the window after this request.
	Remaining int64
	// Reset is how long until the oldest counted request leaves the window,
	// i.e. when remaining next grows; 0 when nothing is counted.
	Reset time.Duration
}

// Decision is the outcome of Admit.
type Decision struct {
	// Allowed reports whether the request fits both quotas.
	Allowed bool
	// RetryAfter is, for a refused request, the shortest wait after which the
	// same request would fit (Span when it can never fit).
	RetryAfter time.Duration
	// Requests and Tokens are the state of each quota; they are meaningful
	// only when the matching limit is set.
	Requests, Tokens Status
}

type event struct {
	at     time.Time
	tokens int64
}

// Window counts admitted requests and their tokens over the last Span. It is
// safe for concurrent use. Only admitted requests are counted, so a client
// hammering a full window does not extend its own ban.
type Window struct {
	// Length is the window's span. (Optional) Defaults to Span. The limits
	// passed to Admit count over it, whatever their names say.
	Length time.Duration

	mu     sync.Mutex
	events []event // oldest first
}

func (w *Window) span() time.Duration {
	if w.Length > 0 {
		return w.Length
	}
	return Span
}

// Admit decides whether a request costing tokens fits lim at time now, and
// counts it when it does.
func (w *Window) Admit(lim Limits, tokens int64, now time.Time) Decision {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.prune(now)

	var used int64
	for _, e := range w.events {
		used += e.tokens
	}
	count := int64(len(w.events))
	fitsReq := lim.RequestsPerMinute == 0 || count+1 <= lim.RequestsPerMinute
	fitsTok := lim.TokensPerMinute == 0 || used+tokens <= lim.TokensPerMinute

	d := Decision{Allowed: fitsReq && fitsTok}
	if d.Allowed {
		w.events = append(w.events, event{at: now, tokens: tokens})
		count++
		used += tokens
	} else {
		if !fitsReq {
			// The request fits once count+1-limit of the oldest ones expired.
			d.RetryAfter = max(d.RetryAfter, w.expiry(int(count+1-lim.RequestsPerMinute)-1, now))
		}
		if !fitsTok {
			d.RetryAfter = max(d.RetryAfter, w.tokenWait(lim.TokensPerMinute, used, tokens, now))
		}
	}
	reset := time.Duration(0)
	if len(w.events) > 0 {
		reset = w.expiry(0, now)
	}
	d.Requests = Status{Limit: lim.RequestsPerMinute, Remaining: max(0, lim.RequestsPerMinute-count), Reset: reset}
	d.Tokens = Status{Limit: lim.TokensPerMinute, Remaining: max(0, lim.TokensPerMinute-used), Reset: reset}
	return d
}

// prune drops events that left the window.
func (w *Window) prune(now time.Time) {
	i := 0
	for i < len(w.events) && now.Sub(w.events[i].at) >= w.span() {
		i++
	}
	if i > 0 {
		w.events = append(w.events[:0], w.events[i:]...)
	}
}

// expiry returns how long until event i leaves the window.
func (w *Window) expiry(i int, now time.Time) time.Duration {
	if i < 0 || i >= len(w.events) {
		return w.span()
	}
	return w.events[i].at.Add(w.span()).Sub(now)
}

// tokenWait returns how long until enough old tokens expired for tokens more.
func (w *Window) tokenWait(limit, used, tokens int64, now time.Time) time.Duration {
	if tokens > limit {
		return w.span()
	}
	for i, e := range w.events {
		used -= e.tokens
		if used+tokens <= limit {
			return w.expiry(i, now)
		}
	}
	return w.span()
}
