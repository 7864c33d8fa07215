package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/contextlength"
	"github.com/switchboard-ai/switchboard/pkg/offline"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/anthropic"
)

func TestAPIKeyHash(t *testing.T) {
	tests := []struct {
		name   string
		header string
		want   string
		ok     bool
	}{
		{name: "bearer", header: "Bearer abc", want: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", ok: true},
		{name: "lowercase scheme", header: "bearer abc", want: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", ok: true},
		{name: "missing", header: ""},
		{name: "basic", header: "Basic abc"},
		{name: "no key", header: "Bearer"},
		{name: "blank key", header: "Bearer   "},
		{name: "two words", header: "Bearer abc def"},
		{name: "control char", header: "Bearer ab\x01c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			got, aerr := apiKeyHash(r)
			if !tt.ok {
				require.NotNil(t, aerr)
				require.Equal(t, http.StatusUnauthorized, aerr.status)
				require.Equal(t, "invalid_api_key", aerr.code)
				return
			}
			require.Nil(t, aerr)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestRetryAfterFromRefusal(t *testing.T) {
	st, err := status.New(codes.ResourceExhausted, "over quota").WithDetails(&switchboardv1.Refusal{
		Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, RetryAfter: durationpb.New(1200 * time.Millisecond),
	})
	require.NoError(t, err)
	e := deciderError(st.Err())
	require.Equal(t, http.StatusTooManyRequests, e.status)
	require.Equal(t, 1200*time.Millisecond, e.retryAfter)
	w := httptest.NewRecorder()
	writeError(w, e)
	require.Equal(t, "2", w.Header().Get("Retry-After"), "rounded up to whole seconds")
	require.JSONEq(t, `{"error":{"message":"over quota","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, w.Body.String())
}

// A decider refusal naming a DecideRequest field is answered naming the
// client's field and OpenAI's code: a prompt no endpoint's context holds is
// context_length_exceeded on messages.
func TestInvalidArgumentNamesTheClientsField(t *testing.T) {
	tests := []struct {
		name, field, reason string
		param, code         *string
	}{
		{name: "context", field: "tokens.input_tokens", reason: "CONTEXT_LENGTH_EXCEEDED", param: ptr("messages"), code: ptr("context_length_exceeded")},
		{name: "output", field: "tokens.max_output_tokens", reason: "INVALID_VALUE", param: ptr("max_tokens"), code: ptr("invalid_value")},
		{name: "provider", field: "provider.order", reason: "INVALID_VALUE", param: ptr("provider.order"), code: ptr("invalid_value")},
		{name: "a field the edge made", field: "request_id", reason: "INVALID_VALUE", code: ptr("invalid_value")},
		{name: "no details", code: ptr("invalid_value")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status.New(codes.InvalidArgument, "no endpoint can take this request")
			if tt.field != "" {
				var err error
				st, err = st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
					{Field: tt.field, Reason: tt.reason},
				}})
				require.NoError(t, err)
			}
			w := httptest.NewRecorder()
			writeError(w, deciderError(st.Err()))
			require.Equal(t, http.StatusBadRequest, w.Code)
			var body errorBody
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
			require.Equal(t, tt.param, body.Error.Param)
			require.Equal(t, tt.code, body.Error.Code)
			require.Equal(t, "invalid_request_error", body.Error.Type)
			require.Equal(t, "false", w.Header().Get("X-Should-Retry"))
		})
	}
}

// A prompt too long for every endpoint's context keeps the decider's
// message (OpenAI's words) and hands its figures to a writer that says it
// in its own API's words.
func TestContextExceededFigures(t *testing.T) {
	c := contextlength.Exceeded{Limit: 4096, PromptTokens: 5000}
	st, err := status.New(codes.InvalidArgument, c.OpenAIMessage()).WithDetails(
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "tokens.input_tokens", Reason: contextlength.Reason}}},
		c.Detail())
	require.NoError(t, err)
	e := deciderError(st.Err())
	require.Equal(t, &c, e.context)

	w := httptest.NewRecorder()
	writeError(w, e)
	require.JSONEq(t, `{"error":{"message":"`+c.OpenAIMessage()+`","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, w.Body.String())

	// The Messages API's writer says it as Anthropic does.
	rec := httptest.NewRecorder()
	aw := anthropic.NewWriter(rec, "gen-x")
	writeError(aw, e)
	aw.Finish()
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 5000 tokens > 4096 maximum"}}`, rec.Body.String())
}

func ptr(s string) *string { return &s }

func TestHeaderValue(t *testing.T) {
	require.Equal(t, "a b c", headerValue("a\nb\rc"))
	// What it always did: every rune mapped, control characters to spaces.
	reference := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r < ' ' || r == 0x7f {
				return ' '
			}
			return r
		}, s)
	}
	for _, s := range []string{"", "alpha: cheapest (0.2 USD/M)", "tab\there", "del\x7f", "caf\u00e9", "bad\xffutf8", "\x00", "~ok~"} {
		require.Equal(t, reference(s), headerValue(s), "%q", s)
	}
}

// Request ids sort in the order they were made (the activity log appends to
// its index by id), to the millisecond, and stay unique and unguessable
// within one.
func TestRequestIDsSortByTime(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	prev := ""
	for i := range 1000 {
		id := offline.RequestID(t0.Add(time.Duration(i) * time.Millisecond))
		require.Regexp(t, `^gen-[0-9a-f]{12}[a-z2-7]{16}$`, id)
		require.Greater(t, id, prev)
		require.False(t, seen[id])
		seen[id], prev = true, id
	}
	a, b := offline.RequestID(t0), offline.RequestID(t0)
	require.NotEqual(t, a, b, "80 random bits within the same millisecond")
	require.Equal(t, a[:16], b[:16])
}
