// Package failclass classifies a failed call to a provider before anyone
// decides to retry it. The edge classifies every failed attempt with
// [Classify] and tells the decider's rate-limit broker the class (and the
// provider's error code) when it reconciles the attempt's reservation; the
// broker pauses the route and holds the retry budget on the same classes.
// One function on both sides means the edge never retries what the broker
// would refuse, and the broker never pauses for what the edge would retry.
//
// The classes are those of a broker refusal (their numbers equal
// switchboardv1.RefusalReason's), since a failed call and a refused
// reservation answer the same question: may this request be tried again,
// where, and when.
//
//   - Retryable capacity: a 429 that is a rate limit (the provider's
//     requests or tokens per minute), or a documented transient quota
//     answer. Retried on another endpoint at once; on the same endpoint not
//     before its Retry-After.
//   - Retryable overload: 503, 529 (Anthropic's overloaded_error), 500, 502
//     and 504 (a gateway in front of the provider failing or timing out is
//     the provider's overload as far as a caller can tell), a connection
//     that could not be made or dropped before the answer started, and a
//     first token that did not come in time. Retried on another endpoint at
//     once; on the same one only after its Retry-After or a back-off.
//   - Non-retryable policy: the provider's account, not its capacity,
//     refused: a 429, 402 or 403 whose error code says a spend limit, a
//     billing hard limit, insufficient quota or a disabled or deactivated
//     project, organisation or key; and a 401, 403 or 404 without such a
//     code, which says this gateway's credential or model mapping for that
//     endpoint is wrong. Retrying the same endpoint cannot succeed before an
//     operator (or the provider's reset) acts; another endpoint may serve.
//   - Non-retryable request: the request itself is wrong (400, 413, 422 and
//     every other 4xx): invalid schema, unsupported parameter, malformed
//     input. Every endpoint would refuse it; it goes back to the client.
//   - Deadline: what is left of the request's time is shorter than the next
//     safe attempt ([DeadlineExceeded]).
package failclass

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// Class is how a failed call may be retried. The values equal
// switchboardv1.RefusalReason's, so conversion is a cast.
type Class int32

// The classes.
const (
	// None is not a failure (a call that succeeded, or one cancelled by
	// its own caller).
	None Class = iota
	// RetryableCapacity is a provider's rate limit (429).
	RetryableCapacity
	// RetryableOverload is a provider's overload or outage (5xx, 529,
	// connection errors, timeouts).
	RetryableOverload
	// NonRetryablePolicy is a refusal by the provider's account (spend
	// limit, billing, disabled project or key) or by this gateway's
	// credential or model mapping for the endpoint.
	NonRetryablePolicy
	// NonRetryableRequest is a refusal of the request itself.
	NonRetryableRequest
	// Deadline is a request with less time left than the next safe attempt.
	Deadline
)

var names = [...]string{"none", "retryable_capacity", "retryable_overload", "non_retryable_policy", "non_retryable_request", "deadline"}

// String returns the class's name, e.g. "retryable_overload".
func (c Class) String() string {
	if c >= 0 && int(c) < len(names) {
		return names[c]
	}
	return "unknown"
}

// Retryable reports whether the failure may be retried at all: on another
// endpoint at once, on the same one after its pause.
func (c Class) Retryable() bool { return c == RetryableCapacity || c == RetryableOverload }

// SameEndpoint reports whether the endpoint that failed may be tried again
// for this request, once its Retry-After or back-off has passed.
func (c Class) SameEndpoint() bool { return c.Retryable() }

// OtherEndpoint reports whether another endpoint may be tried after this
// failure (when the model's fallback policy allows moving).
func (c Class) OtherEndpoint() bool { return c != NonRetryableRequest && c != Deadline }

// StatusOverloaded is Anthropic's "overloaded" status, outside HTTP's
// registry.
const StatusOverloaded = 529

// policyCodes are provider error codes and types that mean the provider's
// account refused, whatever the status: retrying the same endpoint cannot
// succeed before the account changes or its period resets.
var policyCodes = map[string]bool{
	// OpenAI: no credit left, or the organisation's monthly hard limit.
	"insufficient_quota":         true,
	"billing_hard_limit_reached": true,
	"billing_not_active":         true,
	"access_terminated":          true,
	"account_deactivated":        true,
	"organization_deactivated":   true,
	"project_deactivated":        true,
	"project_disabled":           true,
	"api_key_disabled":           true,
	"key_disabled":               true,
	// Anthropic: the organisation's spend limit (a 429 rate_limit_error
	// whose details name it), and billing problems (402).
	"enforced_spend_limit_reached": true,
	"spend_limit_reached":          true,
	"billing_error":                true,
	// Others: a daily or monthly quota used up, said as such.
	"daily_limit_exceeded":   true,
	"monthly_limit_exceeded": true,
	"quota_exhausted":        true,
}

// IsPolicyCode reports whether a provider error code (or type) says the
// provider's account refused rather than its capacity.
func IsPolicyCode(code string) bool { return policyCodes[strings.ToLower(strings.TrimSpace(code))] }

// Classify classifies a provider's HTTP answer: its status and the error
// code its body named (see [ErrorCode]; "" for none). A 2xx is None.
func Classify(status int, code string) Class {
	policy := IsPolicyCode(code)
	switch {
	case status >= 200 && status < 300:
		return None
	case status == http.StatusTooManyRequests:
		if policy {
			return NonRetryablePolicy
		}
		return RetryableCapacity
	case status == http.StatusPaymentRequired, status == http.StatusUnauthorized,
		status == http.StatusForbidden, status == http.StatusNotFound:
		return NonRetryablePolicy
	case status == http.StatusRequestTimeout:
		// The provider gave up waiting for our request: its trouble.
		return RetryableOverload
	case status >= 400 && status < 500:
		if policy {
			// A spend limit some providers answer as 400.
			return NonRetryablePolicy
		}
		return NonRetryableRequest
	case status >= 500:
		return RetryableOverload
	}
	// 1xx or 3xx where an answer was due: the provider misbehaves.
	return RetryableOverload
}

// IsAccount reports whether a failure of class c with the provider's error
// code says the provider account refused — a spend limit, a billing
// problem, an exhausted quota, a disabled key, project or organisation —
// rather than this gateway's credential or mapping for one endpoint: it
// concerns every endpoint called with that account, whatever the model.
func IsAccount(c Class, code string) bool { return c == NonRetryablePolicy && IsPolicyCode(code) }

// RequestSuspect reports whether a failure may be the request's rather
// than the endpoint's: repeated on another endpoint for the same request
// (same class, same status), it is charged to the request. That holds for
//
//   - a 5xx answer other than 503 and 529 (a 500, 502 or 504 from two
//     independent providers on the same input is the input crashing them,
//     not two outages at once), and
//   - a policy refusal without an account code (a bare 401, 403 or 404:
//     one endpoint's credential or mapping is wrong, but two providers
//     refusing the same request that way are refusing its content).
//
// It does not hold for a rate limit (each provider's own capacity), a 503
// or 529 (a provider saying it is overloaded), a call with no HTTP answer
// (a connection or first-token timeout says nothing of the input), an
// account refusal (the account's, by its code), nor a refusal of the
// request itself (the first one already ends the request).
func RequestSuspect(c Class, status int, code string) bool {
	switch c {
	case RetryableOverload:
		return status >= 500 && status <= 599 && status != http.StatusServiceUnavailable && status != StatusOverloaded
	case NonRetryablePolicy:
		return !IsPolicyCode(code) && (status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusNotFound)
	}
	return false
}

// Transport is the class of a call that got no HTTP answer: the connection
// failed or dropped, or the first token did not come in time. The endpoint
// is overloaded or down as far as anyone can tell: another endpoint is
// tried at once.
func Transport() Class { return RetryableOverload }

// DeadlineExceeded reports whether a request with remaining time left
// cannot wait for its next safe attempt, due after wait: the attempt would
// start too late to be of use. A remaining time of zero or less always
// fails; a request without a deadline has nothing to pass here.
func DeadlineExceeded(remaining, wait time.Duration) bool {
	return remaining <= 0 || remaining < wait
}

// maxBody bounds how much of an error body ErrorCode reads: error objects
// are small, and a provider's body is untrusted.
const maxBody = 16 << 10

// ErrorCode returns the most specific machine-readable reason a provider's
// error body gives: error.details.error_code (Anthropic's spend limit),
// else error.code, else error.type (OpenAI's and Anthropic's shapes), else
// error.status (Google's), lowercased; "" when the body says none or is not
// JSON. Only the first 16 KiB are looked at.
func ErrorCode(body []byte) string {
	if len(body) > maxBody {
		body = body[:maxBody]
	}
	var b struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &b) != nil || len(b.Error) == 0 {
		return ""
	}
	var e struct {
		Code    json.RawMessage `json:"code"`
		Type    string          `json:"type"`
		Status  string          `json:"status"`
		Details json.RawMessage `json:"details"`
	}
	if json.Unmarshal(b.Error, &e) != nil {
		return ""
	}
	var d struct {
		ErrorCode string `json:"error_code"`
	}
	if len(e.Details) > 0 && json.Unmarshal(e.Details, &d) == nil && d.ErrorCode != "" {
		return clean(d.ErrorCode)
	}
	var code string
	if json.Unmarshal(e.Code, &code) == nil && code != "" {
		// A policy code wins over a generic type; a type names the class
		// of error when the code is just a number or absent.
		if IsPolicyCode(code) || !IsPolicyCode(e.Type) {
			return clean(code)
		}
	}
	if e.Type != "" {
		return clean(e.Type)
	}
	return clean(e.Status)
}

// maxCode bounds a code passed on: it goes into logs, reports and the
// decider's reconcile, never more than a short identifier.
const maxCode = 64

// clean lowercases a code and keeps it short and printable.
func clean(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if len(s) > maxCode {
		s = s[:maxCode]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, s)
}
