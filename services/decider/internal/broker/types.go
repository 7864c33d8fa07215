package broker

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Errors returned by the broker, matched with errors.Is.
var (
	// ErrNotFound is returned by [Broker.Reconcile] for a reservation id that
	// is unknown, already reconciled or expired. It is the gRPC NOT_FOUND of
	// Reconcile: a second reconcile of the same id gets it and changes nothing.
	ErrNotFound = errors.New("reservation not found")
	// ErrExpired wraps ErrNotFound for a reservation whose TTL had passed when
	// it was reconciled: its capacity was released by expiry instead.
	ErrExpired = fmt.Errorf("reservation expired: %w", ErrNotFound)
	// ErrInvalid is returned for a malformed demand, usage or configuration
	// (negative or non-finite amounts, unknown units...). It is the gRPC
	// INVALID_ARGUMENT of Reserve and Reconcile.
	ErrInvalid = errors.New("invalid argument")
	// ErrForbidden is returned by [Broker.Reconcile] and [Broker.Extend] for
	// a reservation of a tenant the caller's Allow refuses; the reservation
	// is left as it was. It is the gRPC PERMISSION_DENIED of those calls.
	ErrForbidden = errors.New("reservation of another tenant")
)

// Allow says whether the caller may act on a reservation of tenant: the
// tenants of the caller's credentials. A nil Allow allows every tenant (a
// caller trusted for all of them, or a test). It is called with the
// reservation's shard locked, so it must be quick and must not call the
// broker.
type Allow func(tenant string) bool

func (a Allow) allows(tenant string) bool { return a == nil || a(tenant) }

// Scope is the level of the quota hierarchy a bucket belongs to, narrowest
// first. The values equal those of switchboardv1.LimitScope so conversion is
// a cast, and their order is the order in which Reserve checks buckets.
type Scope uint8

// The scopes, narrowest first.
const (
	ScopeUnspecified       Scope = iota
	ScopeAPIKey                  // one API key or service identity
	ScopeApp                     // an application, optionally one environment of it
	ScopeTenant                  // a team or customer
	ScopePartner                 // a partner or reseller account
	ScopeProviderWorkspace       // a provider workspace or sub-account
	ScopeProviderProject         // a provider project or organisation
	ScopeModelRoute              // one endpoint (provider × model)
)

var scopeNames = [...]string{"unspecified", "api_key", "app", "tenant", "partner", "provider_workspace", "provider_project", "model_route"}

// callers reports whether buckets of the scope are the caller's own limits
// rather than a provider's.
func (s Scope) callers() bool { return s >= ScopeAPIKey && s <= ScopePartner }

// String returns the scope's catalog name, e.g. "provider_project".
func (s Scope) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// own reports whether a bucket of this scope belongs to the caller alone
// (its key, its app, its tenant) and so may be shown to it in full. Partner
// and provider buckets are shared with other tenants: showing their level
// would reveal other tenants' consumption.
func (s Scope) own() bool { return s >= ScopeAPIKey && s <= ScopeTenant }

// ParseScope parses a catalog scope name.
func ParseScope(s string) (Scope, error) {
	for i, n := range scopeNames[1:] {
		if n == s {
			return Scope(i + 1), nil
		}
	}
	return 0, fmt.Errorf("%w: scope %q", ErrInvalid, s)
}

// Unit is what a bucket counts. The values equal those of
// switchboardv1.LimitUnit.
type Unit uint8

// The units.
const (
	UnitUnspecified        Unit = iota
	UnitRequests                // requests
	UnitInputTokens             // prompt tokens, cached ones included
	UnitOutputTokens            // completion tokens
	UnitTotalTokens             // input + output tokens
	UnitUSD                     // spend in US dollars
	UnitConcurrentRequests      // requests in flight
)

var unitNames = [...]string{"unspecified", "requests", "input_tokens", "output_tokens", "total_tokens", "usd", "concurrent_requests"}

// String returns the unit's catalog name, e.g. "input_tokens".
func (u Unit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("unit(%d)", uint8(u))
}

// ParseUnit parses a catalog unit name.
func ParseUnit(s string) (Unit, error) {
	for i, n := range unitNames[1:] {
		if n == s {
			return Unit(i + 1), nil
		}
	}
	return 0, fmt.Errorf("%w: unit %q", ErrInvalid, s)
}

// Window is the period of a rate or quota. WindowNone is for concurrency and
// ramp-only buckets.
type Window uint8

// The windows.
const (
	WindowNone Window = iota
	WindowSecond
	WindowMinute
	WindowHour
	WindowDay
)

var windowNames = [...]string{"", "second", "minute", "hour", "day"}

// String returns the window's catalog name ("" for none).
func (w Window) String() string {
	if int(w) < len(windowNames) {
		return windowNames[w]
	}
	return fmt.Sprintf("window(%d)", uint8(w))
}

// Duration returns the window's length, 0 for WindowNone.
func (w Window) Duration() time.Duration {
	switch w {
	case WindowSecond:
		return time.Second
	case WindowMinute:
		return time.Minute
	case WindowHour:
		return time.Hour
	case WindowDay:
		return 24 * time.Hour
	}
	return 0
}

// ParseWindow parses a catalog window name; "" is WindowNone.
func ParseWindow(s string) (Window, error) {
	for i, n := range windowNames {
		if n == s {
			return Window(i), nil
		}
	}
	return 0, fmt.Errorf("%w: window %q", ErrInvalid, s)
}

// Rule is how a bucket refills or resets.
type Rule uint8

// The rules; see the package documentation for their formulas.
const (
	// RuleTokenBucket refills continuously at capacity per window, up to
	// capacity + burst (windows second, minute, hour).
	RuleTokenBucket Rule = iota
	// RuleDailyReset refills to capacity + burst at a fixed UTC time of day.
	RuleDailyReset
	// RuleConcurrency holds one unit per open reservation and never refills.
	RuleConcurrency
	// RuleRamp caps this period's admissions by the previous period's.
	RuleRamp
)

var ruleNames = [...]string{"token_bucket", "daily_reset", "concurrency", "ramp"}

// String returns the rule's name.
func (r Rule) String() string {
	if int(r) < len(ruleNames) {
		return ruleNames[r]
	}
	return fmt.Sprintf("rule(%d)", uint8(r))
}

// Source says where a bucket's limit comes from.
type Source uint8

// The sources.
const (
	// SourceConfigured is a limit from the catalog.
	SourceConfigured Source = iota
	// SourceLearned is a limit a provider reported in its rate-limit headers
	// that the catalog did not configure.
	SourceLearned
)

// String returns "configured" or "learned".
func (s Source) String() string {
	if s == SourceLearned {
		return "learned"
	}
	return "configured"
}

// WorkloadClass is the admission class of a request. The values equal those
// of switchboardv1.WorkloadClass.
type WorkloadClass int32

// The workload classes.
const (
	ClassUnspecified WorkloadClass = iota // treated as interactive
	ClassInteractive
	ClassBackground
	ClassPartner
	ClassBatch
)

// RefusalReason classifies a refusal. The values equal those of
// switchboardv1.RefusalReason.
type RefusalReason int32

// The refusal reasons.
const (
	ReasonUnspecified RefusalReason = iota
	// ReasonRetryableCapacity: a bucket is full now and the demand fits it later.
	ReasonRetryableCapacity
	// ReasonRetryableOverload: the provider said it is overloaded (a 503 with
	// Retry-After) and its route is paused.
	ReasonRetryableOverload
	// ReasonNonRetryablePolicy: a daily quota or daily spend limit is used up;
	// retrying before its reset cannot succeed.
	ReasonNonRetryablePolicy
	// ReasonNonRetryableRequest: the demand is larger than the bucket can ever
	// hold (capacity + burst).
	ReasonNonRetryableRequest
	// ReasonDeadline: no capacity came within the request's queue
	// deadline (code queue_deadline), or the caller's deadline comes
	// before the next safe attempt (code deadline: a retry on a route
	// paused for longer than it can wait).
	ReasonDeadline
)

var reasonNames = [...]string{"unspecified", "retryable_capacity", "retryable_overload", "non_retryable_policy", "non_retryable_request", "deadline"}

// String returns the reason's name.
func (r RefusalReason) String() string {
	if r >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", int32(r))
}

// Outcome is how a call ended. The values equal those of switchboardv1.Outcome.
type Outcome int32

// The outcomes.
const (
	OutcomeUnspecified Outcome = iota
	OutcomeOK
	OutcomeRateLimited
	OutcomeUpstreamError
	OutcomeConnectError
	OutcomeTimeout
	OutcomeMalformed
	OutcomeDropped
	OutcomeCancelled
	OutcomeClientError
)

// Identity says who a reservation is for. Empty fields match no bucket of
// their scope.
type Identity struct {
	// TenantID is the tenant billed.
	TenantID string
	// APIKeyID is the stable, non-secret id of the API key (catalog.KeyID).
	APIKeyID string
	// App is the calling application.
	App string
	// Environment is the app's environment (production, staging...).
	Environment string
	// Partner is the partner or reseller account, if any.
	Partner string
	// Class is the workload class.
	Class WorkloadClass
}

// Demand is what one dispatch is expected to consume.
type Demand struct {
	// InputTokens is the estimated prompt, cached part included.
	InputTokens int64
	// OutputTokens is the output reserved (max_tokens for a stream).
	OutputTokens int64
	// USD is the estimated spend.
	USD float64
	// Requests is the number of requests; 0 means 1.
	Requests int64
}

// amount is the demand in unit u. Every reservation holds exactly one
// concurrency slot.
func (d *Demand) amount(u Unit) float64 {
	switch u {
	case UnitRequests:
		return float64(d.Requests)
	case UnitInputTokens:
		return float64(d.InputTokens)
	case UnitOutputTokens:
		return float64(d.OutputTokens)
	case UnitTotalTokens:
		return float64(d.InputTokens) + float64(d.OutputTokens)
	case UnitUSD:
		return d.USD
	case UnitConcurrentRequests:
		return 1
	}
	return 0
}

func (d Demand) validate() error {
	switch {
	case d.InputTokens < 0, d.OutputTokens < 0, d.Requests < 0:
		return fmt.Errorf("%w: demand must not be negative", ErrInvalid)
	case !finiteNonNeg(d.USD):
		return fmt.Errorf("%w: demand usd must be a non-negative number", ErrInvalid)
	}
	return nil
}

func (d Demand) normalized() Demand {
	if d.Requests == 0 {
		d.Requests = 1
	}
	return d
}

// Usage is what a call actually consumed.
type Usage struct {
	// InputTokens is the whole prompt, cached part included.
	InputTokens int64
	// CachedInputTokens is the part of the prompt read from cache.
	CachedInputTokens int64
	// OutputTokens is the completion.
	OutputTokens int64
	// CostUSD is the price applied to this usage.
	CostUSD float64
	// Reported is false when the provider sent no usage and it was estimated;
	// estimated usage settles buckets but does not train estimate correction.
	Reported bool
}

func (u Usage) validate() error {
	switch {
	case u.InputTokens < 0, u.OutputTokens < 0, u.CachedInputTokens < 0:
		return fmt.Errorf("%w: usage must not be negative", ErrInvalid)
	case !finiteNonNeg(u.CostUSD):
		return fmt.Errorf("%w: usage cost must be a non-negative number", ErrInvalid)
	}
	return nil
}

// actual is the usage in unit u for a reservation that reserved reserved.
// Requests are never refunded: the provider counted the call whether or not
// it succeeded. Concurrency is given back whole.
func (u *Usage) actual(unit Unit, reserved float64) float64 {
	switch unit {
	case UnitRequests:
		return reserved
	case UnitInputTokens:
		return float64(u.InputTokens)
	case UnitOutputTokens:
		return float64(u.OutputTokens)
	case UnitTotalTokens:
		return float64(u.InputTokens) + float64(u.OutputTokens)
	case UnitUSD:
		return u.CostUSD
	}
	return 0
}

func finiteNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }
