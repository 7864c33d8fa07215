package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestRefusalError(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	tests := []struct {
		name       string
		ref        *switchboardv1.Refusal
		wantHeader map[string]string
		wantCode   string
		wantMsg    string
	}{
		{
			name: "tenant tokens per minute",
			ref: &switchboardv1.Refusal{
				Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_TENANT,
				Unit: switchboardv1.LimitUnit_LIMIT_UNIT_INPUT_TOKENS, Limit: 100000, Remaining: 1200,
				ResetTime: at(2500 * time.Millisecond), RetryAfter: durationpb.New(2500 * time.Millisecond),
				Message: "tenant input_tokens limit reached (1,200 remaining of 100,000); retry after 2.5s",
			},
			wantHeader: map[string]string{
				"Retry-After": "3", "Retry-After-Ms": "2500", "X-Should-Retry": "true", "X-Ratelimit-Limit-Input-Tokens": "100000", "X-Ratelimit-Remaining-Input-Tokens": "1200",
				"X-Ratelimit-Reset-Input-Tokens": "2.5s", "X-Switchboard-Ratelimit-Scope": "tenant",
				"X-Switchboard-Ratelimit-Reason": "retryable_capacity",
			},
			wantCode: "retryable_capacity",
			wantMsg:  "tenant input_tokens limit reached (1,200 remaining of 100,000); retry after 2.5s",
		},
		{
			name: "every provider full",
			ref: &switchboardv1.Refusal{
				Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_PROVIDER_PROJECT,
				Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS, ResetTime: at(4 * time.Second), RetryAfter: durationpb.New(4 * time.Second),
				Message: "provider capacity for requests is exhausted; retry after 4s",
			},
			wantHeader: map[string]string{"Retry-After": "4", "Retry-After-Ms": "4000", "X-Should-Retry": "true", "X-Switchboard-Ratelimit-Scope": "provider", "X-Switchboard-Ratelimit-Reason": "retryable_capacity"},
			wantCode:   "retryable_capacity",
			wantMsg:    "provider capacity for requests is exhausted; retry after 4s",
		},
		{
			name: "route paused, no message",
			ref: &switchboardv1.Refusal{
				Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_MODEL_ROUTE,
				Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS, RetryAfter: durationpb.New(30 * time.Second),
			},
			wantHeader: map[string]string{"Retry-After": "30", "Retry-After-Ms": "30000", "X-Should-Retry": "true", "X-Switchboard-Ratelimit-Scope": "provider", "X-Switchboard-Ratelimit-Reason": "retryable_overload"},
			wantCode:   "retryable_overload",
			wantMsg:    "no provider has capacity for this request right now; retry later",
		},
		{
			name: "can never fit",
			ref: &switchboardv1.Refusal{
				Reason: switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_API_KEY,
				Unit: switchboardv1.LimitUnit_LIMIT_UNIT_OUTPUT_TOKENS, Limit: 1000, Remaining: 1000,
				Message: "the request needs 4,096 output_tokens, more than the api_key output_tokens limit of 1,000 can ever admit",
			},
			wantHeader: map[string]string{
				"X-Ratelimit-Limit-Output-Tokens": "1000", "X-Ratelimit-Remaining-Output-Tokens": "1000", "X-Should-Retry": "false",
				"X-Switchboard-Ratelimit-Scope": "api_key", "X-Switchboard-Ratelimit-Reason": "non_retryable_request",
			},
			wantCode: "non_retryable_request",
			wantMsg: "the request needs 4,096 output_tokens, more than the api_key output_tokens limit of 1,000 can ever admit; " +
				"it can never fit, so retrying will not help: reduce the prompt or max_tokens",
		},
		{
			name: "daily quota spent",
			ref: &switchboardv1.Refusal{
				Reason: switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_TENANT,
				Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS, Limit: 10000, Remaining: 0,
				ResetTime: at(3 * time.Hour), RetryAfter: durationpb.New(3 * time.Hour), Message: "tenant requests limit reached (0 remaining of 10,000); retry after 3h0m0s",
			},
			wantHeader: map[string]string{
				"Retry-After": "10800", "Retry-After-Ms": "10800000", "X-Should-Retry": "false", "X-Ratelimit-Limit-Requests": "10000", "X-Ratelimit-Remaining-Requests": "0",
				"X-Ratelimit-Reset-Requests": "3h0m0s", "X-Switchboard-Ratelimit-Scope": "tenant",
				"X-Switchboard-Ratelimit-Reason": "non_retryable_policy",
			},
			wantCode: "non_retryable_policy",
			wantMsg:  "tenant requests limit reached (0 remaining of 10,000); retry after 3h0m0s",
		},
		{
			name: "concurrency: reset unknown",
			ref: &switchboardv1.Refusal{
				Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_APP,
				Unit: switchboardv1.LimitUnit_LIMIT_UNIT_CONCURRENT_REQUESTS, Limit: 8, RetryAfter: durationpb.New(time.Second),
				Message: "app concurrent_requests limit reached (0 remaining of 8); retry after 1s",
			},
			wantHeader: map[string]string{
				"Retry-After": "1", "Retry-After-Ms": "1000", "X-Should-Retry": "true", "X-Ratelimit-Limit-Concurrent": "8", "X-Ratelimit-Remaining-Concurrent": "0",
				"X-Switchboard-Ratelimit-Scope": "app", "X-Switchboard-Ratelimit-Reason": "retryable_capacity",
			},
			wantCode: "retryable_capacity",
			wantMsg:  "app concurrent_requests limit reached (0 remaining of 8); retry after 1s",
		},
		{
			name: "spend, reset time only",
			ref: &switchboardv1.Refusal{
				Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_TENANT,
				Unit: switchboardv1.LimitUnit_LIMIT_UNIT_USD, Limit: 5, Remaining: 0.0125, ResetTime: at(1200 * time.Millisecond),
				Message: "tenant usd limit reached",
			},
			wantHeader: map[string]string{
				"Retry-After": "2", "Retry-After-Ms": "1200", "X-Should-Retry": "true", "X-Ratelimit-Limit-Usd": "5", "X-Ratelimit-Remaining-Usd": "0.0125", "X-Ratelimit-Reset-Usd": "1.2s",
				"X-Switchboard-Ratelimit-Scope": "tenant", "X-Switchboard-Ratelimit-Reason": "retryable_capacity",
			},
			wantCode: "retryable_capacity",
			wantMsg:  "tenant usd limit reached",
		},
		{
			name: "partner: shared, no figures",
			ref: &switchboardv1.Refusal{
				Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_PARTNER,
				Unit: switchboardv1.LimitUnit_LIMIT_UNIT_TOTAL_TOKENS, ResetTime: at(time.Second), RetryAfter: durationpb.New(time.Second),
				Message: "partner capacity for total_tokens is exhausted; retry after 1s",
			},
			wantHeader: map[string]string{"Retry-After": "1", "Retry-After-Ms": "1000", "X-Should-Retry": "true", "X-Switchboard-Ratelimit-Scope": "partner", "X-Switchboard-Ratelimit-Reason": "retryable_capacity"},
			wantCode:   "retryable_capacity",
			wantMsg:    "partner capacity for total_tokens is exhausted; retry after 1s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeError(w, refusalError(tt.ref, now))
			if tt.ref.GetReason() == switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD {
				require.Equal(t, http.StatusServiceUnavailable, w.Code, "a provider's overload is a 503")
			} else {
				require.Equal(t, http.StatusTooManyRequests, w.Code)
			}
			got := map[string]string{}
			for k := range w.Header() {
				if k != "Content-Type" {
					got[k] = w.Header().Get(k)
				}
			}
			require.Equal(t, tt.wantHeader, got)
			var body errorBody
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
			// OpenAI's vocabulary: the kind of limit as the type, one code;
			// the refusal's class in its own header.
			if w.Code == http.StatusTooManyRequests {
				require.Equal(t, rateLimitType(tt.ref.GetUnit()), body.Error.Type)
				require.Contains(t, []string{"tokens", "requests"}, body.Error.Type)
			}
			require.Equal(t, "rate_limit_exceeded", *body.Error.Code)
			require.Equal(t, tt.wantCode, w.Header().Get(HeaderRateLimitReason))
			require.Nil(t, body.Error.Param)
			require.Equal(t, tt.wantMsg, body.Error.Message)
		})
	}
}

func TestIdentityOf(t *testing.T) {
	tests := []struct {
		name      string
		header    map[string][]string
		want      *switchboardv1.Identity
		wantParam string
	}{
		{name: "none", want: &switchboardv1.Identity{ApiKeySha256: "h"}},
		{name: "all", header: map[string][]string{HeaderApp: {"checkout"}, HeaderEnvironment: {"staging eu"}, HeaderWorkload: {"Batch"}},
			want: &switchboardv1.Identity{ApiKeySha256: "h", App: "checkout", Environment: "staging eu", WorkloadClass: switchboardv1.WorkloadClass_WORKLOAD_CLASS_BATCH}},
		{name: "every workload", header: map[string][]string{HeaderWorkload: {"partner"}},
			want: &switchboardv1.Identity{ApiKeySha256: "h", WorkloadClass: switchboardv1.WorkloadClass_WORKLOAD_CLASS_PARTNER}},
		{name: "64 bytes", header: map[string][]string{HeaderApp: {strings.Repeat("a", 64)}},
			want: &switchboardv1.Identity{ApiKeySha256: "h", App: strings.Repeat("a", 64)}},
		{name: "empty is unset", header: map[string][]string{HeaderApp: {""}}, want: &switchboardv1.Identity{ApiKeySha256: "h"}},
		{name: "too long", header: map[string][]string{HeaderApp: {strings.Repeat("a", 65)}}, wantParam: HeaderApp},
		{name: "not printable", header: map[string][]string{HeaderEnvironment: {"prod\x01"}}, wantParam: HeaderEnvironment},
		{name: "not ascii", header: map[string][]string{HeaderEnvironment: {"prodé"}}, wantParam: HeaderEnvironment},
		{name: "twice", header: map[string][]string{HeaderApp: {"a", "b"}}, wantParam: HeaderApp},
		{name: "unknown workload", header: map[string][]string{HeaderWorkload: {"urgent"}}, wantParam: HeaderWorkload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			for k, vs := range tt.header {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			got, aerr := identityOf(r, "h")
			if tt.wantParam != "" {
				require.NotNil(t, aerr)
				require.Equal(t, http.StatusBadRequest, aerr.status)
				require.Equal(t, tt.wantParam, aerr.param)
				return
			}
			require.Nil(t, aerr)
			require.Equal(t, tt.want.String(), got.String())
		})
	}
}

// TestRefusalCodeAndQueueHeaders checks a refusal's code as error.code and
// x-switchboard-reason, and the queue headers of a request that waited.
func TestRefusalCodeAndQueueHeaders(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		ref    *switchboardv1.Refusal
		status int
		// retry is the x-should-retry the refusal gets.
		retry string
	}{
		{"queue full", &switchboardv1.Refusal{Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Code: "queue_full",
			Scope: switchboardv1.LimitScope_LIMIT_SCOPE_TENANT, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_CONCURRENT_REQUESTS,
			RetryAfter: durationpb.New(time.Second)}, http.StatusTooManyRequests, "true"},
		{"queue deadline", &switchboardv1.Refusal{Reason: switchboardv1.RefusalReason_REFUSAL_REASON_DEADLINE, Code: "queue_deadline",
			Scope: switchboardv1.LimitScope_LIMIT_SCOPE_MODEL_ROUTE, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS,
			RetryAfter: durationpb.New(1500 * time.Millisecond)}, http.StatusTooManyRequests, "true"},
		{"daily quota", &switchboardv1.Refusal{Reason: switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY, Code: "daily_quota",
			Scope: switchboardv1.LimitScope_LIMIT_SCOPE_TENANT, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS,
			RetryAfter: durationpb.New(time.Hour)}, http.StatusTooManyRequests, "false"},
		{"provider overloaded", &switchboardv1.Refusal{Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD, Code: "provider_paused",
			Scope: switchboardv1.LimitScope_LIMIT_SCOPE_MODEL_ROUTE, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS,
			RetryAfter: durationpb.New(20 * time.Second)}, http.StatusServiceUnavailable, "true"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			setQueueHeaders(w.Header(), switchboardv1.WorkloadClass_WORKLOAD_CLASS_BACKGROUND,
				&switchboardv1.QueueDecision{QueueId: "q-7", Waited: durationpb.New(1234567 * time.Microsecond)})
			writeError(w, refusalError(tt.ref, now))
			require.Equal(t, tt.status, w.Code)
			var body errorBody
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
			require.Equal(t, tt.ref.GetCode(), *body.Error.Code)
			require.Equal(t, tt.ref.GetCode(), w.Header().Get(HeaderReason))
			require.NotEmpty(t, w.Header().Get("Retry-After"))
			require.Equal(t, tt.retry, w.Header().Get("X-Should-Retry"))
			require.Equal(t, "background", w.Header().Get(HeaderWorkloadClass))
			require.Equal(t, "q-7", w.Header().Get(HeaderQueueID))
			require.Equal(t, "1234", w.Header().Get(HeaderQueueWait))
		})
	}
	h := http.Header{}
	setQueueHeaders(h, switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED, nil)
	require.Equal(t, http.Header{HeaderWorkloadClass: {"interactive"}}, h, "no queue headers for a request that did not wait")
}

// TestWithKeyHashIsACloneWithTheKey: withKeyHash copies every field of an
// identity, those added to it later included (the test sets them all), and
// its unknown fields, as proto.Clone does, and sets the key hash.
func TestWithKeyHashIsACloneWithTheKey(t *testing.T) {
	id := &switchboardv1.Identity{}
	m := id.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch fd.Kind() {
		case protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("v-"+string(fd.Name())))
		case protoreflect.EnumKind:
			vals := fd.Enum().Values()
			m.Set(fd, protoreflect.ValueOfEnum(vals.Get(vals.Len()-1).Number()))
		default:
			t.Fatalf("identity field %s of kind %s: teach withKeyHash and this test about it", fd.Name(), fd.Kind())
		}
	}
	m.SetUnknown(protoreflect.RawFields{0xf8, 0x07, 0x01}) // field 127, varint 1
	want := proto.Clone(id).(*switchboardv1.Identity)
	want.ApiKeySha256 = "h"
	got := withKeyHash(id, "h")
	require.True(t, proto.Equal(want, got), "got %v, want %v", got, want)
	require.Equal(t, []byte(want.ProtoReflect().GetUnknown()), []byte(got.ProtoReflect().GetUnknown()))
	require.Equal(t, "v-api_key_sha256", id.GetApiKeySha256(), "the original is left as it was")
}
