package dispatch

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/switchboard-ai/switchboard/pkg/failclass"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// A failure is charged to what caused it. Most failures are the endpoint's
// and bench or pause it at once. Some may be the request's instead
// (failclass.RequestSuspect: a 500, 502 or 504, a bare 401, 403 or 404):
// when the same request fails with the same class and status on two
// endpoints, it is the request's failure — its input crashes or offends
// every provider — and benching the endpoints for it would refuse every
// other request of every tenant. So such a failure is held: its
// reservation is given back at once but reconciled as deferred (the broker
// pauses nothing), and its call report waits. The request's outcome then
// decides, on the request's goroutine, before anything was charged:
//
//   - a second endpoint fails the same way: both failures are the
//     request's. Their reports say so (request_failure: the decider benches
//     nothing and counts nothing against them), their pauses are never
//     applied, and the client hears the error at once, with no further
//     attempt on the rest of the fleet and no Retry-After;
//   - otherwise (another endpoint answered, failed differently, or none was
//     left): each held failure is the endpoint's. Its report goes out as it
//     would have, and a second reconcile of its reservation applies the
//     pause the first one deferred.
//
// Deciding before charging, rather than charging and undoing, is what makes
// this safe against races: an undo would come after the decider had
// broadcast the cool-down and the broker had refused other requests for the
// pause, and would have to tell a pause of its own from one another request
// caused meanwhile. The price is that a failing endpoint is benched one
// attempt later (once the next endpoint answered or failed), not at its
// first failure.

// codeRepeated is the error code of a request that failed the same way on
// several providers.
const codeRepeated = "request_failed_on_providers"

// suspect reports whether a failed leg's failure may be the request's: one
// failclass.RequestSuspect names, or an account refusal (a spend limit,
// billing, a disabled key). One account refusing is that account's; two
// accounts refusing the same request the same way at once are far likelier
// refusing the request (its size, its content) than both out of money, so
// an account refusal is held too, and charged to the request only when
// another account repeats it (see hold).
func suspect(l *leg) bool {
	r := &l.Result
	return failclass.RequestSuspect(r.Class(), r.Status, r.ProviderErrorCode) || failclass.IsAccount(r.Class(), r.ProviderErrorCode)
}

// mayRepeat reports whether another source of l's failure (see blame) is
// left in the request's plan, untried: only then can the failure turn out
// to be the request's, and holding it be worth delaying its pause. An
// account refusal with no other account left to try is that account's at
// once (paused before the next request), as a request that may not fall
// back shows.
func (s *serving) mayRepeat(l *leg) bool {
	if !failclass.IsAccount(l.Result.Class(), l.Result.ProviderErrorCode) {
		return true
	}
	mine := blame(l)
	for _, ep := range s.plan {
		if !s.tried(ep.GetId()) && accountBlame(ep) != mine {
			return true
		}
	}
	return false
}

// blame is what a repeated failure must come from twice to be the
// request's: another endpoint, or, for an account refusal, another provider
// account (the provider and the credential the endpoint is called with), as
// two endpoints of one account refusing is that account refusing.
func blame(l *leg) string {
	if failclass.IsAccount(l.Result.Class(), l.Result.ProviderErrorCode) {
		return accountBlame(l.Endpoint)
	}
	return "endpoint:" + l.Endpoint.GetId()
}

// accountBlame names the provider account ep is called with, as blame does.
func accountBlame(ep *switchboardv1.Endpoint) string {
	return "account:" + ep.GetProvider() + "|" + ep.GetApiKeyEnv()
}

// sameFailure reports whether two failed legs failed the same way: the same
// class and HTTP status.
func sameFailure(a, b *leg) bool {
	return a.Result.Class() == b.Result.Class() && a.Result.Status == b.Result.Status
}

// hold keeps a failed leg whose failure may be the request's until the
// request's outcome says whose it is; its reservation is given back at once,
// with its failure deferred. When another endpoint failed the same way, the
// failures are the request's and s.repeated is the client's error.
func (s *serving) hold(l *leg) {
	l.held = true
	s.held = append(s.held, l)
	s.releaseFailed(l, true)
	if s.repeated != nil {
		return
	}
	var same []*leg
	sources := map[string]bool{}
	for _, h := range s.held {
		if sameFailure(h, l) {
			same = append(same, h)
			sources[blame(h)] = true
		}
	}
	if len(sources) < 2 {
		return
	}
	for _, h := range same {
		h.requestFailure = true
	}
	s.repeated = s.repeatedFailure(l, len(sources))
}

// repeatedFailure is the client's error for a request that failed like l on
// n providers: the providers' status for a 5xx, else 502 (a 401, 403 or 404
// describes this gateway's credential at the provider, not anything the
// client sent), in OpenAI's error format, with no Retry-After: waiting
// cannot help a request that every provider fails.
func (s *serving) repeatedFailure(l *leg, n int) *Failure {
	status := http.StatusBadGateway
	if l.Result.Class() == failclass.RetryableOverload && l.Result.Status >= 500 && l.Result.Status <= 599 {
		status = l.Result.Status
	}
	var tried []string
	for _, a := range s.attempts {
		switch {
		case a.leg != nil && a.leg.Result.Outcome != switchboardv1.Outcome_OUTCOME_UNSPECIFIED:
			tried = append(tried, a.leg.Endpoint.GetProvider()+": "+a.leg.Result.Summary)
		case a.skip != nil:
			tried = append(tried, a.skip.ep.GetProvider()+": "+a.skip.summary)
		}
	}
	return &Failure{
		Status: status, Type: "upstream_error", Code: codeRepeated, Final: true,
		Message: fmt.Sprintf("the request failed on %d providers with the same error (%s), so it is not tried on others: %s",
			n, l.Result.Summary, strings.Join(tried, "; ")),
	}
}

// charge settles the held failures once the request's outcome is known:
// each is reported, and one that was not the request's has the pause its
// reconcile deferred applied now.
func (s *serving) charge() {
	for _, l := range s.held {
		if l.reported {
			continue
		}
		l.reported = true
		s.d.report(s.call, l)
		s.d.logAttempt(s.call, l)
		if l.deferred && !l.requestFailure {
			s.d.chargeDeferred(l)
		}
	}
}

// chargeDeferred applies the failure a leg's reconcile deferred, through
// the Ledger, delivered at least once. The broker applies it once.
func (d *Dispatcher) chargeDeferred(l *leg) {
	req := &switchboardv1.ReconcileRequest{
		ReservationId:     l.deferredID,
		Usage:             &switchboardv1.Usage{},
		Outcome:           l.Result.Outcome,
		RateLimitHeaders:  l.Result.Headers,
		Failure:           switchboardv1.RefusalReason(l.Result.Class()),
		ProviderErrorCode: l.Result.ProviderErrorCode,
	}
	d.opts.Ledger.Reconcile(req)
}

// withoutRetryAfter is a provider's rate-limit headers without its
// Retry-After, for the reconcile of a failure that was the request's: the
// limits it reports are still the provider's, but its pause is not owed.
func withoutRetryAfter(hs []*switchboardv1.Header) []*switchboardv1.Header {
	out := hs[:0:0]
	for _, h := range hs {
		if n := strings.ToLower(h.GetName()); n != "retry-after" && n != "retry-after-ms" {
			out = append(out, h)
		}
	}
	return out
}
