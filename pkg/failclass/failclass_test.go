package failclass

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   Class
		code   string
	}{
		{"ok", 200, `{}`, None, ""},
		{"rate limit", 429, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`, RetryableCapacity, "rate_limit_exceeded"},
		{"bare 429", 429, ``, RetryableCapacity, ""},
		{"anthropic rate limit", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, RetryableCapacity, "rate_limit_error"},
		{"openai insufficient quota", 429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, NonRetryablePolicy, "insufficient_quota"},
		{"openai quota as type only", 429, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":null}}`, NonRetryablePolicy, "insufficient_quota"},
		{"openai billing hard limit", 429, `{"error":{"message":"Billing hard limit has been reached","type":"invalid_request_error","code":"billing_hard_limit_reached"}}`, NonRetryablePolicy, "billing_hard_limit_reached"},
		{"anthropic spend limit", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"spend limit","details":{"error_code":"enforced_spend_limit_reached"}}}`, NonRetryablePolicy, "enforced_spend_limit_reached"},
		{"anthropic billing", 402, `{"type":"error","error":{"type":"billing_error","message":"credit balance too low"}}`, NonRetryablePolicy, "billing_error"},
		{"deactivated account", 403, `{"error":{"message":"account deactivated","type":"invalid_request_error","code":"account_deactivated"}}`, NonRetryablePolicy, "account_deactivated"},
		{"spend limit said as 400", 400, `{"error":{"type":"invalid_request_error","code":"spend_limit_reached"}}`, NonRetryablePolicy, "spend_limit_reached"},
		{"our key refused", 401, `{"error":{"type":"authentication_error","message":"invalid x-api-key"}}`, NonRetryablePolicy, "authentication_error"},
		{"forbidden", 403, ``, NonRetryablePolicy, ""},
		{"model not at that provider", 404, `{"error":{"code":"model_not_found"}}`, NonRetryablePolicy, "model_not_found"},
		{"bad request", 400, `{"error":{"type":"invalid_request_error","param":"temperature","code":"unsupported_parameter"}}`, NonRetryableRequest, "unsupported_parameter"},
		{"too large", 413, `{"error":{"type":"request_too_large"}}`, NonRetryableRequest, "request_too_large"},
		{"unprocessable", 422, `{"detail":"schema"}`, NonRetryableRequest, ""},
		{"conflict", 409, ``, NonRetryableRequest, ""},
		{"provider timeout", 408, ``, RetryableOverload, ""},
		{"unavailable", 503, `{"error":{"type":"server_error","code":"service_unavailable"}}`, RetryableOverload, "service_unavailable"},
		{"anthropic overloaded", StatusOverloaded, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, RetryableOverload, "overloaded_error"},
		{"bad gateway", 502, `<html>bad gateway</html>`, RetryableOverload, ""},
		{"gateway timeout", 504, ``, RetryableOverload, ""},
		{"internal", 500, `{"error":{"status":"INTERNAL"}}`, RetryableOverload, "internal"},
		{"google quota", 429, `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED"}}`, RetryableCapacity, "resource_exhausted"},
		{"redirect", 302, ``, RetryableOverload, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := ErrorCode([]byte(tt.body))
			require.Equal(t, tt.code, code)
			require.Equal(t, tt.want, Classify(tt.status, code), tt.want.String())
		})
	}
}

func TestClassRetries(t *testing.T) {
	require.True(t, RetryableCapacity.SameEndpoint())
	require.True(t, RetryableOverload.OtherEndpoint())
	require.False(t, NonRetryablePolicy.SameEndpoint(), "a spend limit is never retried on the endpoint that said it")
	require.True(t, NonRetryablePolicy.OtherEndpoint(), "another provider's account may serve")
	require.False(t, NonRetryableRequest.OtherEndpoint())
	require.False(t, NonRetryableRequest.SameEndpoint())
	require.Equal(t, RetryableOverload, Transport())
	require.Equal(t, "non_retryable_policy", NonRetryablePolicy.String())
	require.Equal(t, "unknown", Class(42).String())
}

func TestDeadlineExceeded(t *testing.T) {
	require.True(t, DeadlineExceeded(999*time.Millisecond, time.Second))
	require.False(t, DeadlineExceeded(time.Second, time.Second))
	require.True(t, DeadlineExceeded(0, 0))
	require.False(t, DeadlineExceeded(time.Minute, 0))
}

func TestErrorCodeIsBounded(t *testing.T) {
	long := make([]byte, 200)
	for i := range long {
		long[i] = 'a'
	}
	require.Len(t, ErrorCode([]byte(`{"error":{"code":"`+string(long)+`"}}`)), maxCode)
	require.Equal(t, "ab", ErrorCode([]byte(`{"error":{"code":"A\u0001B"}}`)), "control characters dropped")
	big := append([]byte(`{"error":{"code":"x","pad":"`), make([]byte, maxBody)...)
	require.Empty(t, ErrorCode(big), "past the bound it is not JSON any more")
	for _, b := range []string{``, `null`, `[]`, `{"error":null}`, `{"error":"text"}`, `{"error":{"code":5}}`, `not json`} {
		require.Empty(t, ErrorCode([]byte(b)), b)
	}
}

func TestRequestSuspectAndAccount(t *testing.T) {
	for _, tc := range []struct {
		status  int
		code    string
		suspect bool
		account bool
	}{
		{status: 500, suspect: true},
		{status: 502, suspect: true},
		{status: 504, suspect: true},
		{status: 503},
		{status: StatusOverloaded},
		{status: 429},
		{status: 429, code: "insufficient_quota", account: true},
		{status: 402, code: "billing_error", account: true},
		{status: 403, code: "project_disabled", account: true},
		{status: 400, code: "billing_hard_limit_reached", account: true},
		{status: 403, suspect: true},
		{status: 401, code: "invalid_api_key", suspect: true},
		{status: 404, code: "model_not_found", suspect: true},
		{status: 402},
		{status: 400},
		{status: 422},
		{status: 408},
	} {
		c := Classify(tc.status, tc.code)
		if got := RequestSuspect(c, tc.status, tc.code); got != tc.suspect {
			t.Errorf("RequestSuspect(%s, %d, %q) = %v, want %v", c, tc.status, tc.code, got, tc.suspect)
		}
		if got := IsAccount(c, tc.code); got != tc.account {
			t.Errorf("IsAccount(%s, %q) = %v, want %v", c, tc.code, got, tc.account)
		}
	}
	if RequestSuspect(Transport(), 0, "") {
		t.Error("a call with no HTTP answer is never the request's")
	}
}
