// Package validate checks every field a caller sends the decider against
// stated bounds, in one place for the gRPC handlers (package server) and the
// Report stream (package report). A caller with a valid credential is still
// a caller: what it sends ends up in the broker's snapshot, the hedge
// budget, the activity log and the statistics, so an id of a megabyte, a
// NaN cost or an outcome no version of the API defines must be refused
// before any of them sees it. Each check returns an *Error naming the field
// (its proto path, e.g. "demand.usd"), which the server answers as
// INVALID_ARGUMENT and the report hub counts.
package validate

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// The limits. Each is far above what an honest caller sends (the edge's
// ids are under 40 bytes, a catalog's model ids under 100) and small
// enough that the state they end up in stays small: the broker keeps a
// reservation's request id and idempotency key in its snapshot, which must
// fit in one etcd request.
const (
	// MaxIDLen bounds request ids, reservation ids, probe ids, activity
	// record ids, session ids and edge ids, in bytes.
	MaxIDLen = 128
	// MaxKeyLen bounds idempotency keys, in bytes: an edge's key for a
	// Reserve is its request id, an endpoint id and an attempt number.
	MaxKeyLen = MaxIDLen + 1 + MaxModelLen + 1 + 14
	// MaxNameLen bounds tenant ids, API key ids, app, environment and
	// partner names, providers, regions, parameter names, header names and
	// provider error codes, in bytes.
	MaxNameLen = 128
	// MaxModelLen bounds model ids and endpoint ids, in bytes.
	MaxModelLen = 256
	// MaxValueLen bounds a header's value and an error description, in bytes.
	MaxValueLen = 1024
	// MaxList bounds every repeated field of names (parameters, provider
	// preferences, quality failures, rate-limit headers, prefixes,
	// attempts of one activity record).
	MaxList = 64
	// MaxTokens bounds every token count: the largest max_tokens a client
	// may ask for (an int32, as OpenAI's API takes it), far above any
	// model's context, so that a count cannot overflow what it is added to.
	MaxTokens = math.MaxInt32
	// MaxUSD bounds every amount of money of one call or reservation.
	MaxUSD = 100_000
	// MaxGrantLen bounds an activity record's copy of its decision's
	// grant, in bytes.
	MaxGrantLen = 4096
	// MaxAttempt bounds a reservation's attempt number.
	MaxAttempt = 64
)

// Error is a field that failed its check.
type Error struct {
	// Field is the field's proto path.
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

func fail(field, format string, args ...any) *Error {
	return &Error{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// join prefixes a nested field's path.
func join(prefix string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return &Error{Field: prefix + "." + e.Field, Reason: e.Reason}
	}
	return err
}

// ID checks an id's length.
func ID(field, v string) error { return str(field, v, MaxIDLen) }

// Name checks a name's length.
func Name(field, v string) error { return str(field, v, MaxNameLen) }

// Model checks a model or endpoint id's length.
func Model(field, v string) error { return str(field, v, MaxModelLen) }

func str(field, v string, limit int) error {
	if len(v) > limit {
		return fail(field, "%d bytes, at most %d allowed", len(v), limit)
	}
	return nil
}

// USD checks an amount of money: finite, not negative, at most MaxUSD.
func USD(field string, v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fail(field, "must be a finite amount, got %v", v)
	case v < 0:
		return fail(field, "must not be negative, got %v", v)
	case v > MaxUSD:
		return fail(field, "at most %d allowed, got %v", MaxUSD, v)
	}
	return nil
}

// Finite checks a non-money figure: finite and not negative.
func Finite(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fail(field, "must be finite and not negative, got %v", v)
	}
	return nil
}

// Tokens checks a token count.
func Tokens(field string, v int64) error {
	if v < 0 || v > MaxTokens {
		return fail(field, "must be between 0 and %d, got %d", MaxTokens, v)
	}
	return nil
}

// HTTPStatus checks an HTTP status: none (0), or a three-digit code.
func HTTPStatus(field string, v int32) error {
	if v != 0 && (v < 100 || v > 999) {
		return fail(field, "%d is not an HTTP status", v)
	}
	return nil
}

// Enum checks that e is a value its enum defines.
func Enum(field string, e protoreflect.Enum) error {
	if e.Descriptor().Values().ByNumber(e.Number()) == nil {
		return fail(field, "unknown value %d", e.Number())
	}
	return nil
}

// Duration checks an optional duration: valid and not negative unless
// negative is allowed.
func Duration(field string, d *durationpb.Duration, negative bool) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil {
		return fail(field, "%v", err)
	}
	if !negative && d.AsDuration() < 0 {
		return fail(field, "must not be negative")
	}
	return nil
}

// Time checks an optional timestamp.
func Time(field string, t *timestamppb.Timestamp) error {
	if t == nil {
		return nil
	}
	if err := t.CheckValid(); err != nil {
		return fail(field, "%v", err)
	}
	return nil
}

// List checks a repeated field's length and each of its items.
func List(field string, vs []string, each func(string, string) error) error {
	if len(vs) > MaxList {
		return fail(field, "%d items, at most %d allowed", len(vs), MaxList)
	}
	for i, v := range vs {
		if err := each(fmt.Sprintf("%s[%d]", field, i), v); err != nil {
			return err
		}
	}
	return nil
}

func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Identity checks an identity's fields (nil is valid: the credential says
// who calls).
func Identity(id *switchboardv1.Identity) error {
	if id == nil {
		return nil
	}
	return join("identity", first(
		Name("tenant_id", id.GetTenantId()),
		Name("api_key_id", id.GetApiKeyId()),
		str("api_key_sha256", id.GetApiKeySha256(), 64),
		Name("app", id.GetApp()),
		Name("environment", id.GetEnvironment()),
		Name("partner", id.GetPartner()),
		Enum("workload_class", id.GetWorkloadClass()),
	))
}

// prefixes checks a prompt's prefixes.
func prefixes(field string, ps []*switchboardv1.PromptPrefix) error {
	if len(ps) > MaxList {
		return fail(field, "%d items, at most %d allowed", len(ps), MaxList)
	}
	for i, p := range ps {
		if err := Tokens(fmt.Sprintf("%s[%d].tokens", field, i), p.GetTokens()); err != nil {
			return err
		}
	}
	return nil
}

// Decide checks a DecideRequest.
func Decide(r *switchboardv1.DecideRequest) error {
	t, p := r.GetTokens(), r.GetProvider()
	err := first(
		ID("request_id", r.GetRequestId()),
		str("idempotency_key", r.GetIdempotencyKey(), MaxKeyLen),
		ID("session_id", r.GetSessionId()),
		Model("model", r.GetModel()),
		Name("region", r.GetRegion()),
		List("parameters", r.GetParameters(), Name),
		Identity(r.GetIdentity()),
		Tokens("tokens.input_tokens", t.GetInputTokens()),
		Tokens("tokens.cached_input_tokens", t.GetCachedInputTokens()),
		Tokens("tokens.max_output_tokens", t.GetMaxOutputTokens()),
		prefixes("tokens.prefixes", t.GetPrefixes()),
		Duration("reservation_ttl", r.GetReservationTtl(), false),
		List("provider.only", p.GetOnly(), Name),
		List("provider.ignore", p.GetIgnore(), Name),
		List("provider.order", p.GetOrder(), Name),
		List("provider.quantizations", p.GetQuantizations(), Name),
		Enum("provider.sort", p.GetSort()),
		Enum("provider.data_collection", p.GetDataCollection()),
		Finite("provider.max_price.prompt", p.GetMaxPrice().GetPrompt()),
		Finite("provider.max_price.completion", p.GetMaxPrice().GetCompletion()),
		Finite("provider.preferred_min_throughput", p.GetPreferredMinThroughput()),
		Duration("provider.preferred_max_latency", p.GetPreferredMaxLatency(), false),
	)
	if err != nil {
		return err
	}
	if t.GetCachedInputTokens() > t.GetInputTokens() {
		return fail("tokens.cached_input_tokens", "%d exceeds input_tokens %d", t.GetCachedInputTokens(), t.GetInputTokens())
	}
	return nil
}

// Reserve checks a ReserveRequest's fields (not whether its endpoint
// exists: the catalog is the caller's to ask).
func Reserve(r *switchboardv1.ReserveRequest) error {
	d := r.GetDemand()
	err := first(
		ID("request_id", r.GetRequestId()),
		str("idempotency_key", r.GetIdempotencyKey(), MaxKeyLen),
		Identity(r.GetIdentity()),
		Model("model", r.GetModel()),
		Model("endpoint_id", r.GetEndpointId()),
		Tokens("demand.input_tokens", d.GetInputTokens()),
		Tokens("demand.output_tokens", d.GetOutputTokens()),
		USD("demand.usd", d.GetUsd()),
		Duration("ttl", r.GetTtl(), false),
		Duration("max_wait", r.GetMaxWait(), true),
		Enum("previous_failure", r.GetPreviousFailure()),
	)
	if err != nil {
		return err
	}
	if d.GetRequests() < 0 || d.GetRequests() > MaxAttempt {
		return fail("demand.requests", "must be between 0 and %d, got %d", MaxAttempt, d.GetRequests())
	}
	if r.GetAttempt() < 0 || r.GetAttempt() > MaxAttempt {
		return fail("attempt", "must be between 0 and %d, got %d", MaxAttempt, r.GetAttempt())
	}
	return nil
}

// Usage checks a usage: token counts in bounds, cached within input, cost
// an amount of money.
func Usage(field string, u *switchboardv1.Usage) error {
	if u == nil {
		return nil
	}
	err := join(field, first(
		Tokens("input_tokens", u.GetInputTokens()),
		Tokens("cached_input_tokens", u.GetCachedInputTokens()),
		Tokens("output_tokens", u.GetOutputTokens()),
		USD("cost_usd", u.GetCostUsd()),
	))
	if err != nil {
		return err
	}
	if u.GetCachedInputTokens() > u.GetInputTokens() {
		return fail(field+".cached_input_tokens", "%d exceeds input_tokens %d", u.GetCachedInputTokens(), u.GetInputTokens())
	}
	return nil
}

// headers checks rate-limit headers.
func headers(field string, hs []*switchboardv1.Header) error {
	if len(hs) > MaxList {
		return fail(field, "%d items, at most %d allowed", len(hs), MaxList)
	}
	for i, h := range hs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := first(Name(f+".name", h.GetName()), str(f+".value", h.GetValue(), MaxValueLen)); err != nil {
			return err
		}
	}
	return nil
}

// Reconcile checks a ReconcileRequest.
func Reconcile(r *switchboardv1.ReconcileRequest) error {
	return first(
		ID("reservation_id", r.GetReservationId()),
		Usage("usage", r.GetUsage()),
		Enum("outcome", r.GetOutcome()),
		Enum("failure", r.GetFailure()),
		headers("rate_limit_headers", r.GetRateLimitHeaders()),
		Name("provider_error_code", r.GetProviderErrorCode()),
	)
}

// ReservationIDs checks the ids of a KeepReservations call or a heartbeat
// (their count is bounded by the caller).
func ReservationIDs(ids []string) error {
	for i, id := range ids {
		if err := ID(fmt.Sprintf("reservation_ids[%d]", i), id); err != nil {
			return err
		}
	}
	return nil
}

// AcquireHedge checks an AcquireHedgeRequest.
func AcquireHedge(r *switchboardv1.AcquireHedgeRequest) error {
	if r.GetRequestId() == "" {
		return fail("request_id", "is required")
	}
	return first(
		ID("request_id", r.GetRequestId()),
		Model("endpoint_id", r.GetEndpointId()),
		USD("estimated_cost_usd", r.GetEstimatedCostUsd()),
	)
}

// SettleHedge checks a SettleHedgeRequest.
func SettleHedge(r *switchboardv1.SettleHedgeRequest) error {
	ss := r.GetSettlements()
	if len(ss) > MaxSettlements {
		return fail("settlements", "%d items, at most %d allowed", len(ss), MaxSettlements)
	}
	for i, s := range ss {
		f := fmt.Sprintf("settlements[%d]", i)
		if err := first(ID(f+".request_id", s.GetRequestId()), USD(f+".loser_cost_usd", s.GetLoserCostUsd())); err != nil {
			return err
		}
	}
	return nil
}

// MaxSettlements bounds the settlements of one SettleHedge call.
const MaxSettlements = 4096

// EdgeHello checks the hello an edge opens its Report stream with, and
// that another replica passes on with the edge's reports: an edge_id, and
// bounded names.
func EdgeHello(h *switchboardv1.EdgeHello) error {
	if h.GetEdgeId() == "" {
		return errors.New("hello.edge_id is required")
	}
	return errors.Join(ID("hello.edge_id", h.GetEdgeId()), Name("hello.region", h.GetRegion()), Name("hello.version", h.GetVersion()))
}

// SessionTurn checks a conversation's turn another replica shares.
func SessionTurn(t *switchboardv1.SessionTurn) error {
	if t.GetTenantId() == "" || t.GetSessionId() == "" || t.GetDecideTime() == nil {
		return errors.New("session turn: tenant_id, session_id and decide_time are required")
	}
	return first(ID("tenant_id", t.GetTenantId()), Model("model", t.GetModel()), ID("session_id", t.GetSessionId()),
		ID("request_id", t.GetRequestId()), Model("endpoint_id", t.GetEndpointId()), Time("decide_time", t.GetDecideTime()))
}

// CallReport checks a call report.
func CallReport(r *switchboardv1.CallReport) error {
	return first(
		ID("request_id", r.GetRequestId()),
		Model("model", r.GetModel()),
		Model("endpoint_id", r.GetEndpointId()),
		Tokens("prompt_tokens", r.GetPromptTokens()),
		Time("start_time", r.GetStartTime()),
		Duration("ttft", r.GetTtft(), false),
		Duration("duration", r.GetDuration(), false),
		Usage("usage", r.GetUsage()),
		Enum("outcome", r.GetOutcome()),
		HTTPStatus("http_status", r.GetHttpStatus()),
		Duration("retry_after", r.GetRetryAfter(), false),
		headers("rate_limit_headers", r.GetRateLimitHeaders()),
		ID("probe_id", r.GetProbeId()),
		Name("tenant_id", r.GetTenantId()),
		str("error", r.GetError(), MaxValueLen),
		ID("reservation_id", r.GetReservationId()),
		List("quality_failures", r.GetQualityFailures(), Name),
		prefixes("prefixes", r.GetPrefixes()),
		Traceparent("traceparent", r.GetTraceparent()),
		Time("report_time", r.GetReportTime()),
	)
}

// maxTraceparent is the length of a W3C traceparent of version 00.
const maxTraceparent = 55

// Traceparent checks a W3C trace context: empty, or a valid traceparent.
func Traceparent(field, v string) error {
	if v == "" {
		return nil
	}
	if len(v) > maxTraceparent {
		return fail(field, "%d bytes, at most %d allowed", len(v), maxTraceparent)
	}
	if _, ok := telemetry.ParseTraceparent(v); !ok {
		return fail(field, "not a W3C traceparent")
	}
	return nil
}

// ActivityRecord checks an activity record.
func ActivityRecord(r *switchboardv1.ActivityRecord) error {
	err := first(
		ID("id", r.GetId()),
		ID("grant_request_id", r.GetGrantRequestId()),
		Time("create_time", r.GetCreateTime()),
		Name("tenant_id", r.GetTenantId()),
		Name("api_key_id", r.GetApiKeyId()),
		Model("model", r.GetModel()),
		Model("requested_model", r.GetRequestedModel()),
		Model("endpoint_id", r.GetEndpointId()),
		Name("provider", r.GetProvider()),
		Usage("usage", r.GetUsage()),
		USD("cost_usd", r.GetCostUsd()),
		Enum("status", r.GetStatus()),
		Enum("client_api", r.GetClientApi()),
		HTTPStatus("http_status", r.GetHttpStatus()),
		str("error", r.GetError(), MaxValueLen),
		Duration("duration", r.GetDuration(), false),
		Duration("ttft", r.GetTtft(), false),
		Enum("hedge.mode", r.GetHedge().GetMode()),
		str("grant", string(r.GetGrant()), MaxGrantLen),
		Model("hedge.winner_endpoint_id", r.GetHedge().GetWinnerEndpointId()),
		Model("hedge.loser_endpoint_id", r.GetHedge().GetLoserEndpointId()),
		USD("hedge.loser_cost_usd", r.GetHedge().GetLoserCostUsd()),
		Tokens("caps.max_input_tokens", r.GetCaps().GetMaxInputTokens()),
		Tokens("caps.max_output_tokens", r.GetCaps().GetMaxOutputTokens()),
		USD("caps.max_cost_usd", r.GetCaps().GetMaxCostUsd()),
		USD("caps.max_attempts_cost_usd", r.GetCaps().GetMaxAttemptsCostUsd()),
	)
	if err != nil {
		return err
	}
	as := r.GetAttempts()
	if len(as) > MaxList {
		return fail("attempts", "%d items, at most %d allowed", len(as), MaxList)
	}
	for i, a := range as {
		err := join(fmt.Sprintf("attempts[%d]", i), first(
			Model("endpoint_id", a.GetEndpointId()),
			Name("provider", a.GetProvider()),
			Enum("outcome", a.GetOutcome()),
			HTTPStatus("http_status", a.GetHttpStatus()),
			Duration("ttft", a.GetTtft(), false),
			USD("cost_usd", a.GetCostUsd()),
			str("error", a.GetError(), MaxValueLen),
			Time("start_time", a.GetStartTime()),
		))
		if err != nil {
			return err
		}
	}
	return nil
}
