package validate

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func field(t *testing.T, err error) string {
	t.Helper()
	var e *Error
	require.True(t, errors.As(err, &e), "%v", err)
	return e.Field
}

func TestLimitsAreInclusive(t *testing.T) {
	r := &switchboardv1.ReserveRequest{RequestId: strings.Repeat("r", MaxIDLen), IdempotencyKey: strings.Repeat("k", MaxKeyLen),
		EndpointId: strings.Repeat("e", MaxModelLen), Attempt: MaxAttempt,
		Demand: &switchboardv1.Demand{InputTokens: MaxTokens, Usd: MaxUSD, Requests: 1}}
	require.NoError(t, Reserve(r))
	r.RequestId += "r"
	require.Equal(t, "request_id", field(t, Reserve(r)))
	r.RequestId = ""
	r.IdempotencyKey += "k"
	require.Equal(t, "idempotency_key", field(t, Reserve(r)))
	r.IdempotencyKey = ""
	r.Demand.InputTokens++
	require.Equal(t, "demand.input_tokens", field(t, Reserve(r)))
	r.Demand.InputTokens = 0
	r.Demand.Usd = math.Nextafter(MaxUSD, math.Inf(1))
	require.Equal(t, "demand.usd", field(t, Reserve(r)))
}

func TestNestedFieldsAreNamed(t *testing.T) {
	rec := &switchboardv1.ActivityRecord{Id: "a", Attempts: []*switchboardv1.Attempt{{}, {CostUsd: math.NaN()}}}
	require.Equal(t, "attempts[1].cost_usd", field(t, ActivityRecord(rec)))
	rec = &switchboardv1.ActivityRecord{Id: "a", Caps: &switchboardv1.DecisionCaps{MaxAttemptsCostUsd: math.NaN()}}
	require.Equal(t, "caps.max_attempts_cost_usd", field(t, ActivityRecord(rec)))
	rec.Caps = &switchboardv1.DecisionCaps{MaxInputTokens: -1}
	require.Equal(t, "caps.max_input_tokens", field(t, ActivityRecord(rec)))
	rec = &switchboardv1.ActivityRecord{Id: "a", ClientApi: 99}
	require.Equal(t, "client_api", field(t, ActivityRecord(rec)))
	d := &switchboardv1.DecideRequest{Identity: &switchboardv1.Identity{WorkloadClass: 17}}
	require.Equal(t, "identity.workload_class", field(t, Decide(d)))
	d = &switchboardv1.DecideRequest{Provider: &switchboardv1.ProviderPreferences{Order: make([]string, MaxList+1)}}
	require.Equal(t, "provider.order", field(t, Decide(d)))
	c := &switchboardv1.CallReport{RateLimitHeaders: []*switchboardv1.Header{{Name: "x", Value: strings.Repeat("v", MaxValueLen+1)}}}
	require.Equal(t, "rate_limit_headers[0].value", field(t, CallReport(c)))
	u := &switchboardv1.ReconcileRequest{Usage: &switchboardv1.Usage{InputTokens: 1, CachedInputTokens: 2}}
	require.Equal(t, "usage.cached_input_tokens", field(t, Reconcile(u)))
}

// A call report's trace context is empty or a W3C traceparent, bounded.
func TestCallReportTraceparent(t *testing.T) {
	r := &switchboardv1.CallReport{RequestId: "r", Model: "m", EndpointId: "e"}
	require.NoError(t, CallReport(r))
	r.Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	require.NoError(t, CallReport(r))
	for _, bad := range []string{"not a traceparent", r.Traceparent + strings.Repeat("0", 100), "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		r.Traceparent = bad
		require.Equal(t, "traceparent", field(t, CallReport(r)), bad)
	}
}
