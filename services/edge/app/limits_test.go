package app

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakedecider"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// refuse makes every Decide answer a refusal, as the decider does when the
// caller's own limit or every endpoint is full: no endpoint, no reservation.
func (h *harness) refuse(ref *switchboardv1.Refusal) {
	h.fd.SetDecide(func(req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
		return &switchboardv1.DecideResponse{
			RequestId: req.GetRequestId(), Model: model, Refusal: ref,
			Identity: &switchboardv1.Identity{TenantId: "acme", ApiKeyId: "key-1"},
			Hedge:    &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_NONE},
		}, nil
	})
}

// limitHeaders returns the rate-limit headers of an answer.
func limitHeaders(r reply) map[string]string {
	out := map[string]string{}
	for k := range r.header {
		switch {
		case k == "Retry-After", strings.HasPrefix(k, "X-Ratelimit-"),
			k == "X-Switchboard-Ratelimit-Scope", k == "X-Switchboard-Ratelimit-Reason":
			out[k] = r.header.Get(k)
		}
	}
	return out
}

func TestChatAdmissionRefused(t *testing.T) {
	tests := []struct {
		name       string
		ref        *switchboardv1.Refusal
		wantHeader map[string]string
		wantCode   string
		wantMsg    string
	}{
		{
			name: "tenant limit",
			ref: &switchboardv1.Refusal{
				Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_TENANT,
				Unit: switchboardv1.LimitUnit_LIMIT_UNIT_INPUT_TOKENS, Limit: 100000, Remaining: 40,
				ResetTime:  timestamppb.New(time.Now().Add(1500 * time.Millisecond)),
				RetryAfter: durationpb.New(1500 * time.Millisecond),
				Message:    "tenant input_tokens limit reached (40 remaining of 100,000); retry after 1.5s",
			},
			wantHeader: map[string]string{
				"Retry-After":                        "2",
				"X-Ratelimit-Limit-Input-Tokens":     "100000",
				"X-Ratelimit-Remaining-Input-Tokens": "40",
				"X-Ratelimit-Reset-Input-Tokens":     "1.5s",
				"X-Switchboard-Ratelimit-Scope":      "tenant",
				"X-Switchboard-Ratelimit-Reason":     "retryable_capacity",
			},
			wantCode: "retryable_capacity",
			wantMsg:  "tenant input_tokens limit reached (40 remaining of 100,000); retry after 1.5s",
		},
		{
			name: "every endpoint full",
			ref: &switchboardv1.Refusal{
				Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_PROVIDER_PROJECT,
				Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS, ResetTime: timestamppb.New(time.Now().Add(6 * time.Second)),
				RetryAfter: durationpb.New(6 * time.Second), Message: "provider capacity for requests is exhausted; retry after 6s",
			},
			wantHeader: map[string]string{
				"Retry-After":                    "6",
				"X-Switchboard-Ratelimit-Scope":  "provider",
				"X-Switchboard-Ratelimit-Reason": "retryable_capacity",
			},
			wantCode: "retryable_capacity",
			wantMsg:  "provider capacity for requests is exhausted; retry after 6s",
		},
		{
			name: "larger than the key's limit",
			ref: &switchboardv1.Refusal{
				Reason: switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_API_KEY,
				Unit: switchboardv1.LimitUnit_LIMIT_UNIT_TOTAL_TOKENS, Limit: 2000, Remaining: 2000,
				Message: "the request needs 4,106 total_tokens, more than the api_key total_tokens limit of 2,000 can ever admit",
			},
			wantHeader: map[string]string{
				"X-Ratelimit-Limit-Tokens":       "2000",
				"X-Ratelimit-Remaining-Tokens":   "2000",
				"X-Switchboard-Ratelimit-Scope":  "api_key",
				"X-Switchboard-Ratelimit-Reason": "non_retryable_request",
			},
			wantCode: "non_retryable_request",
			wantMsg: "the request needs 4,106 total_tokens, more than the api_key total_tokens limit of 2,000 can ever admit; " +
				"it can never fit, so retrying will not help: reduce the prompt or max_tokens",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 1, nil)
			h.refuse(tt.ref)
			r := h.chat(plainReq, authed())
			require.Equal(t, http.StatusTooManyRequests, r.status, r.body)
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
			require.NotEmpty(t, r.header.Get("X-Switchboard-Request-Id"))
			require.Equal(t, tt.wantHeader, limitHeaders(r))
			e := r.errorJSON(t)
			wantType := "requests"
			switch tt.ref.GetUnit() {
			case switchboardv1.LimitUnit_LIMIT_UNIT_INPUT_TOKENS, switchboardv1.LimitUnit_LIMIT_UNIT_OUTPUT_TOKENS,
				switchboardv1.LimitUnit_LIMIT_UNIT_TOTAL_TOKENS:
				wantType = "tokens"
			}
			require.Equal(t, wantType, e["type"])
			require.Equal(t, "rate_limit_exceeded", e["code"])
			require.Equal(t, tt.wantCode, r.header.Get("X-Switchboard-Ratelimit-Reason"))
			require.Equal(t, tt.wantMsg, e["message"])
			require.Empty(t, h.ups[0].Requests(), "nothing is sent without a reservation")
			require.Empty(t, h.fd.ReserveRequests())
		})
	}
}

func TestChatAdmissionDecide(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.ReservationTTL = 7 * time.Minute })
	r := h.chat(plainReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	id := r.header.Get("X-Switchboard-Request-Id")
	d := h.fd.DecideRequests()[0]
	require.True(t, d.GetReserve())
	require.Equal(t, id, d.GetIdempotencyKey())
	require.Equal(t, 7*time.Minute, d.GetReservationTtl().AsDuration())

	// The first attempt runs under Decide's reservation, named in its report.
	rep := h.waitReports(1)[0]
	require.Equal(t, h.decideReservation(id), rep.GetReservationId())
	require.Empty(t, h.fd.ReserveRequests(), "Decide already reserved it")
	require.Empty(t, h.fd.ReconcileRequests(), "reconciled from the report")
}

func TestChatAdmissionFallback(t *testing.T) {
	h := newHarness(t, 3, func(c *Config) { c.ReservationTTL = 5 * time.Minute })
	h.ups[0].SetMode(fakeupstream.Unavailable)
	r := h.chat(streamReq, authed("X-Switchboard-App", "checkout", "X-Switchboard-Workload", "background"))
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "beta", r.header.Get("X-Switchboard-Provider"))
	id := r.header.Get("X-Switchboard-Request-Id")

	res := h.fd.ReserveRequests()
	require.Len(t, res, 1)
	require.NotEmpty(t, h.fd.DecideRequests()[0].GetIdentity().GetApiKeySha256())
	want := &switchboardv1.ReserveRequest{
		RequestId: id, IdempotencyKey: id + "|" + h.eps[1].GetId(),
		// The identity Decide resolved, as the decider answered it, with
		// the client's key hash: the decider lets an edge act only for a
		// client it authenticated by key.
		Identity: &switchboardv1.Identity{TenantId: "acme", ApiKeyId: "key-1", ApiKeySha256: h.fd.DecideRequests()[0].GetIdentity().GetApiKeySha256()},
		Model:    model, EndpointId: h.eps[1].GetId(),
		Demand: &switchboardv1.Demand{
			InputTokens: h.fd.DecideRequests()[0].GetTokens().GetInputTokens(), OutputTokens: 4096,
			Usd: h.eps[1].GetEstimatedCostUsd(), Requests: 1,
		},
		Ttl: durationpb.New(5 * time.Minute),
		// The first retry, after alpha's overload; a fallback endpoint is
		// skipped when full, never waited for.
		Attempt: 2, PreviousFailure: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD,
		MaxWait: durationpb.New(-time.Nanosecond),
	}
	require.True(t, proto.Equal(want, res[0]), "got %v", res[0])

	reps := h.waitReports(2)
	require.Len(t, reps, 2)
	require.Equal(t, h.eps[0].GetId(), reps[0].GetEndpointId())
	require.Empty(t, reps[0].GetReservationId(), "the failed attempt was released at once, not by its report")
	require.Equal(t, switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, reps[0].GetOutcome())
	require.Zero(t, reps[0].GetUsage().GetInputTokens())
	require.Equal(t, h.eps[1].GetId(), reps[1].GetEndpointId())
	require.Equal(t, fakedecider.ReservationID(id+"|"+h.eps[1].GetId()), reps[1].GetReservationId())
	require.Empty(t, h.ups[2].Requests())
}

func TestChatAdmissionFallbackRefused(t *testing.T) {
	h := newHarness(t, 3, nil)
	h.ups[0].SetMode(fakeupstream.Unavailable)
	h.fd.RefuseReserve(h.eps[1].GetId(), &switchboardv1.Refusal{
		Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_PROVIDER_PROJECT,
		Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS, RetryAfter: durationpb.New(time.Second),
	})
	r := h.chat(streamReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "gamma", r.header.Get("X-Switchboard-Provider"))
	id := r.header.Get("X-Switchboard-Request-Id")
	require.Empty(t, h.ups[1].Requests(), "a refused fallback is not called")

	var asked []string
	for _, rr := range h.fd.ReserveRequests() {
		asked = append(asked, rr.GetEndpointId())
	}
	require.Equal(t, []string{h.eps[1].GetId(), h.eps[2].GetId()}, asked)

	rec := h.waitRecord(id)
	require.Len(t, rec.GetAttempts(), 3)
	skipped := rec.GetAttempts()[1]
	require.Equal(t, h.eps[1].GetId(), skipped.GetEndpointId())
	require.Equal(t, "skipped: provider capacity", skipped.GetError())
	require.Zero(t, skipped.GetHttpStatus())
	require.Zero(t, skipped.GetCostUsd())

	var reported []string
	for _, rep := range h.waitReports(2) {
		reported = append(reported, rep.GetEndpointId()+" "+rep.GetReservationId())
	}
	require.Equal(t, []string{
		h.eps[0].GetId() + " ", // failed: released at once, before the fallback was reserved
		h.eps[2].GetId() + " " + fakedecider.ReservationID(id+"|"+h.eps[2].GetId()),
	}, reported, "no report for the skipped endpoint")
}

func TestChatAdmissionHedgeRefused(t *testing.T) {
	h := newHarness(t, 2, func(c *Config) { c.FirstTokenTimeout, c.IdleTimeout = longWait, longWait })
	h.fd.SetDecide(func(req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
		resp := h.decision(req)
		resp.Hedge = &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, Endpoint: h.eps[1]}
		return resp, nil
	})
	h.fd.SetHedgeGrant(true)
	h.fd.RefuseReserve(h.eps[1].GetId(), &switchboardv1.Refusal{
		Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_MODEL_ROUTE,
		Unit: switchboardv1.LimitUnit_LIMIT_UNIT_INPUT_TOKENS,
	})
	r := h.chat(streamReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "alpha", r.header.Get("X-Switchboard-Provider"))
	require.Empty(t, h.ups[1].Requests(), "a hedge the broker refused is not started")
	require.Len(t, h.fd.HedgeRequests(), 1)
	res := h.fd.ReserveRequests()
	require.Len(t, res, 1)
	require.Equal(t, h.eps[1].GetId(), res[0].GetEndpointId())
	rec := h.waitRecord(r.header.Get("X-Switchboard-Request-Id"))
	require.False(t, rec.GetHedge().GetUsed())
	require.Len(t, rec.GetAttempts(), 2)
	require.True(t, rec.GetAttempts()[1].GetHedge())
	require.Equal(t, "skipped: provider capacity", rec.GetAttempts()[1].GetError())
}

func TestChatIdentityHeaders(t *testing.T) {
	h := newHarness(t, 1, nil)
	r := h.chat(plainReq, authed("X-Switchboard-App", "checkout", "X-Switchboard-Environment", "staging", "X-Switchboard-Workload", "batch"))
	require.Equal(t, http.StatusOK, r.status, r.body)
	got := h.fd.DecideRequests()[0].GetIdentity()
	require.True(t, proto.Equal(&switchboardv1.Identity{
		ApiKeySha256: clientKeyHash(), App: "checkout", Environment: "staging",
		WorkloadClass: switchboardv1.WorkloadClass_WORKLOAD_CLASS_BATCH,
	}, got), "got %v", got)

	tests := []struct {
		name   string
		header string
		value  string
	}{
		{name: "app too long", header: "X-Switchboard-App", value: "a234567890123456789012345678901234567890123456789012345678901234567890"},
		{name: "environment with a control character", header: "X-Switchboard-Environment", value: "prod\tx"},
		{name: "unknown workload", header: "X-Switchboard-Workload", value: "realtime"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(h.fd.DecideRequests())
			r := h.chat(plainReq, authed(tt.header, tt.value))
			require.Equal(t, http.StatusBadRequest, r.status, r.body)
			e := r.errorJSON(t)
			require.Equal(t, tt.header, e["param"])
			require.Equal(t, "invalid_value", e["code"])
			require.Len(t, h.fd.DecideRequests(), before, "decider must not be called")
		})
	}
}
