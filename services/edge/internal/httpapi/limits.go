package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Identity headers a client may send; the decider uses them to pick the
// rate-limit buckets that apply (app and environment, workload class).
const (
	HeaderApp         = "X-Switchboard-App"
	HeaderEnvironment = "X-Switchboard-Environment"
	HeaderWorkload    = "X-Switchboard-Workload"
)

// Headers of a 429 the rate-limit broker caused, besides Retry-After and
// OpenAI's x-ratelimit-{limit,remaining,reset}-<unit>.
const (
	// HeaderRateLimitScope is the refusing bucket's scope: api_key, app,
	// tenant, partner, or provider for anything on the provider's side.
	HeaderRateLimitScope = "X-Switchboard-Ratelimit-Scope"
	// HeaderRateLimitReason is the refusal's class (see reasonCode).
	HeaderRateLimitReason = "X-Switchboard-Ratelimit-Reason"
	// HeaderReason is the refusal's stable code, as error.code says it:
	// rate_limit, daily_quota, spend_limit, concurrency, ramp,
	// provider_paused, too_large, queue_full, queue_deadline...
	HeaderReason = "X-Switchboard-Reason"
)

// Headers of the admission queue, on a refusal and on an answer alike.
const (
	// HeaderWorkloadClass is the workload class the request was admitted
	// (or refused) as: the one it asked for, else its key's or tenant's.
	HeaderWorkloadClass = "X-Switchboard-Workload"
	// HeaderQueueID identifies the request's place in its class's queue,
	// when it waited in it.
	HeaderQueueID = "X-Switchboard-Queue-Id"
	// HeaderQueueWait is how long it waited there, in whole milliseconds.
	HeaderQueueWait = "X-Switchboard-Queue-Wait-Ms"
	// HeaderFallbackModel names the model that served (or was tried for)
	// the request instead of the one asked for, when the class's overload
	// action degraded it.
	HeaderFallbackModel = "X-Switchboard-Fallback-Model"
)

// className is a workload class as clients name it (switchboardv1.EnumName),
// interactive for unspecified; "" for a number the API does not define.
func className(cls switchboardv1.WorkloadClass) string {
	if cls == switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED {
		return catalog.ClassInteractive
	}
	return switchboardv1.EnumName(cls)
}

// setQueueHeaders says which class the request went through and, when it
// waited in that class's queue, its place's id and how long it waited.
func setQueueHeaders(h http.Header, cls switchboardv1.WorkloadClass, q *switchboardv1.QueueDecision) {
	if name := className(cls); name != "" {
		h.Set(HeaderWorkloadClass, name)
	}
	if q == nil {
		return
	}
	if id := q.GetQueueId(); id != "" {
		h.Set(HeaderQueueID, headerValue(id))
	}
	h.Set(HeaderQueueWait, strconv.FormatInt(max(q.GetWaited().AsDuration().Milliseconds(), 0), 10))
}

// maxIdentityValue bounds an app or environment name: a label, not data.
const maxIdentityValue = 64

var workloads = map[string]switchboardv1.WorkloadClass{
	"interactive": switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE,
	"background":  switchboardv1.WorkloadClass_WORKLOAD_CLASS_BACKGROUND,
	"partner":     switchboardv1.WorkloadClass_WORKLOAD_CLASS_PARTNER,
	"batch":       switchboardv1.WorkloadClass_WORKLOAD_CLASS_BATCH,
}

// identityOf is who the request is for, as Decide is asked: the key's hash
// and the optional identity headers. A bad header gets a 400 naming it.
func identityOf(r *http.Request, keyHash string) (*switchboardv1.Identity, *apiError) {
	id := &switchboardv1.Identity{ApiKeySha256: keyHash}
	var aerr *apiError
	if id.App, aerr = label(r, HeaderApp); aerr != nil {
		return nil, aerr
	}
	if id.Environment, aerr = label(r, HeaderEnvironment); aerr != nil {
		return nil, aerr
	}
	v, aerr := single(r, HeaderWorkload)
	if aerr != nil || v == "" {
		return id, aerr
	}
	wc, ok := workloads[strings.ToLower(v)]
	if !ok {
		e := invalidRequest(HeaderWorkload, fmt.Sprintf("%s must be one of interactive, background, partner or batch", HeaderWorkload))
		return nil, &e
	}
	id.WorkloadClass = wc
	return id, nil
}

// label reads an app or environment name: optional, at most 64 bytes of
// printable ASCII (spaces inside allowed), since it ends up in bucket keys,
// logs and metrics.
func label(r *http.Request, name string) (string, *apiError) {
	v, aerr := single(r, name)
	if aerr != nil || v == "" {
		return v, aerr
	}
	if len(v) > maxIdentityValue {
		e := invalidRequest(name, fmt.Sprintf("%s must be at most %d bytes", name, maxIdentityValue))
		return "", &e
	}
	for i := 0; i < len(v); i++ {
		if v[i] < ' ' || v[i] > '~' {
			e := invalidRequest(name, fmt.Sprintf("%s must be printable ASCII", name))
			return "", &e
		}
	}
	return v, nil
}

// single reads a header that may be sent at most once; empty when absent.
func single(r *http.Request, name string) (string, *apiError) {
	vs := r.Header.Values(name)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return strings.TrimSpace(vs[0]), nil
	}
	e := invalidRequest(name, fmt.Sprintf("%s must be sent at most once", name))
	return "", &e
}

// refusalError is the 429 for a request the rate-limit broker refused
// (DecideResponse.refusal). Its metadata is safe to show: the message
// is written for the caller; limit, remaining and reset are sent only for
// the caller's own bucket (API key, app, tenant, partner) and only when the
// broker gave figures — a provider bucket's level is other tenants' traffic
// (a partner's too, so the broker sends no figures for it), so a
// provider-scope refusal says "provider" and when to retry, nothing more. now is used only when the refusal has a reset time but no delay.
//
// A provider that said it is overloaded is a 503, every other refusal a
// 429; error.code is the refusal's stable code (RateLimitCode from a
// decider that sends none), also in the x-switchboard-reason header.
func refusalError(ref *switchboardv1.Refusal, now time.Time) apiError {
	reason := reasonCode(ref.GetReason())
	scope := scopeName(ref.GetScope())
	e := apiError{
		status:  http.StatusTooManyRequests,
		typ:     rateLimitType(ref.GetUnit()),
		code:    RateLimitCode,
		message: refusalMessage(ref, scope),
		header:  http.Header{},
	}
	if ref.GetReason() == switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD {
		e.status, e.typ = http.StatusServiceUnavailable, "server_error"
	}
	if c := ref.GetCode(); c != "" && len(c) <= 64 {
		e.code = headerValue(c)
		e.header.Set(HeaderReason, e.code)
	}
	e.header.Set(HeaderRateLimitScope, scope)
	e.header.Set(HeaderRateLimitReason, reason)

	// A request larger than the bucket never fits, and a used-up daily
	// quota or spend limit (a policy) admits nothing before its reset: an
	// SDK's retry within seconds cannot help either.
	switch ref.GetReason() {
	case switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST,
		switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY:
		e.final = true
	}
	// When capacity comes back. A request larger than the bucket never
	// fits: no Retry-After, since retrying cannot help.
	var wait time.Duration
	if ref.GetReason() != switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST {
		switch {
		case ref.GetRetryAfter().AsDuration() > 0:
			wait = ref.GetRetryAfter().AsDuration()
		case ref.GetResetTime() != nil && ref.GetResetTime().AsTime().After(now):
			wait = ref.GetResetTime().AsTime().Sub(now)
		}
	}
	e.retryAfter = wait

	unit := unitName(ref.GetUnit())
	if scope == "provider" || unit == "" || ref.GetLimit() <= 0 {
		// No figures: a provider's or a partner's shared bucket (the broker
		// sends none for those), or nothing to say them about.
		return e
	}
	e.header.Set("X-Ratelimit-Limit-"+unit, figure(ref.GetLimit()))
	e.header.Set("X-Ratelimit-Remaining-"+unit, figure(math.Max(ref.GetRemaining(), 0)))
	if wait > 0 && ref.GetResetTime() != nil {
		// Unknown for concurrency (no reset time), never for a request
		// that cannot fit.
		// OpenAI's format: the time until the bucket has room, as a
		// duration ("1s", "6m0s", "8.64s"), rounded up to the millisecond.
		e.header.Set("X-Ratelimit-Reset-"+unit, (wait + time.Millisecond - 1).Truncate(time.Millisecond).String())
	}
	return e
}

// refusalMessage is the refusal's own message (the broker writes it for the
// caller), or a plain one when it sent none. A request that can never fit
// says so, so nobody retries it unchanged.
func refusalMessage(ref *switchboardv1.Refusal, scope string) string {
	msg := strings.TrimSpace(ref.GetMessage())
	never := ref.GetReason() == switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST
	switch {
	case msg == "" && never:
		return fmt.Sprintf("this request is larger than the %s limit can ever admit; retrying will not help: reduce the prompt or max_tokens", scope)
	case never:
		return msg + "; it can never fit, so retrying will not help: reduce the prompt or max_tokens"
	case msg != "":
		return msg
	case scope == "provider":
		return "no provider has capacity for this request right now; retry later"
	}
	return fmt.Sprintf("%s rate limit reached", strings.ReplaceAll(scope, "_", " "))
}

// reasonCode is the refusal's class as the error's code and the
// x-switchboard-ratelimit-reason header.
func reasonCode(r switchboardv1.RefusalReason) string {
	switch r {
	case switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY:
		return "retryable_capacity"
	case switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD:
		return "retryable_overload"
	case switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY:
		return "non_retryable_policy"
	case switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST:
		return "non_retryable_request"
	case switchboardv1.RefusalReason_REFUSAL_REASON_DEADLINE:
		return "deadline"
	}
	return "rate_limit_exceeded"
}

// scopeName is the refusing bucket's scope as the caller sees it: its own
// levels by name, and everything on the provider's side (workspace,
// project, route, or unknown) as "provider".
func scopeName(s switchboardv1.LimitScope) string {
	switch s {
	case switchboardv1.LimitScope_LIMIT_SCOPE_API_KEY:
		return "api_key"
	case switchboardv1.LimitScope_LIMIT_SCOPE_APP:
		return "app"
	case switchboardv1.LimitScope_LIMIT_SCOPE_TENANT:
		return "tenant"
	case switchboardv1.LimitScope_LIMIT_SCOPE_PARTNER:
		return "partner"
	}
	return "provider"
}

// RateLimitCode is error.code of every 429, as OpenAI sends it; the
// refusal's class is in the x-switchboard-ratelimit-reason header.
const RateLimitCode = "rate_limit_exceeded"

// rateLimitType is error.type of a 429 in OpenAI's vocabulary, which names
// the kind of limit hit: "tokens" for a token limit, "requests" for any
// other (requests, concurrency, spend, or unknown).
func rateLimitType(u switchboardv1.LimitUnit) string {
	switch u {
	case switchboardv1.LimitUnit_LIMIT_UNIT_INPUT_TOKENS, switchboardv1.LimitUnit_LIMIT_UNIT_OUTPUT_TOKENS,
		switchboardv1.LimitUnit_LIMIT_UNIT_TOTAL_TOKENS:
		return "tokens"
	}
	return "requests"
}

// unitName is the <unit> of the x-ratelimit-*-<unit> headers: OpenAI's
// "requests" and "tokens" (total tokens), Anthropic's "input-tokens" and
// "output-tokens" — the families the decider itself reads from providers —
// and Switchboard's "usd" and "concurrent". Distinct token names keep a
// tenant's input and output limits apart.
func unitName(u switchboardv1.LimitUnit) string {
	switch u {
	case switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS:
		return "requests"
	case switchboardv1.LimitUnit_LIMIT_UNIT_INPUT_TOKENS:
		return "input-tokens"
	case switchboardv1.LimitUnit_LIMIT_UNIT_OUTPUT_TOKENS:
		return "output-tokens"
	case switchboardv1.LimitUnit_LIMIT_UNIT_TOTAL_TOKENS:
		return "tokens"
	case switchboardv1.LimitUnit_LIMIT_UNIT_USD:
		return "usd"
	case switchboardv1.LimitUnit_LIMIT_UNIT_CONCURRENT_REQUESTS:
		return "concurrent"
	}
	return ""
}

// figure writes a limit or a level: whole numbers without a fraction,
// dollars as they are.
func figure(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}
