package app

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// Every answer carries x-request-id, whatever the path and the outcome,
// so a client can quote it; on a chat completion it is the completion id.
func TestRequestIDOnEveryResponse(t *testing.T) {
	h := newHarness(t, 1, nil)
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		wantStatus               int
	}{
		{name: "chat", method: http.MethodPost, path: "/v1/chat/completions", body: plainReq, header: authed(), wantStatus: 200},
		{name: "chat without key", method: http.MethodPost, path: "/v1/chat/completions", body: plainReq, wantStatus: 401},
		{name: "chat invalid", method: http.MethodPost, path: "/v1/chat/completions", body: `{"model":1}`, header: authed(), wantStatus: 400},
		{name: "wrong method", method: http.MethodGet, path: "/v1/chat/completions", header: authed(), wantStatus: 405},
		{name: "unknown path", method: http.MethodGet, path: "/v2/nothing", wantStatus: 404},
		{name: "models", method: http.MethodGet, path: "/v1/models", header: authed(), wantStatus: 200},
		{name: "liveness", method: http.MethodGet, path: "/healthz", wantStatus: 200},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(t.Context(), tt.method, tt.path, tt.body, tt.header)
			require.Equal(t, tt.wantStatus, r.status, r.body)
			id := r.header.Get("X-Request-Id")
			require.NotEmpty(t, id)
			require.False(t, seen[id], "ids are unique")
			seen[id] = true
			if tt.name == "chat" {
				require.Equal(t, id, r.header.Get("X-Switchboard-Request-Id"))
				var body map[string]any
				require.NoError(t, json.Unmarshal([]byte(r.body), &body))
				require.Equal(t, id, body["id"])
			}
		})
	}
}

// GET /v1/models/{id} answers OpenAI's model object, or a 404 in OpenAI's
// error format for a model the caller cannot use. Model ids contain a slash.
func TestModelByID(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.fd.SetListModels(func(req *switchboardv1.ListModelsRequest) (*switchboardv1.ListModelsResponse, error) {
		if req.GetIdentity().GetApiKeySha256() != clientKeyHash() {
			return nil, status.Error(codes.Unauthenticated, "unknown API key")
		}
		return &switchboardv1.ListModelsResponse{Models: []*switchboardv1.Model{
			{Id: "org/a", ContextLength: 8192, Providers: []string{"alpha", "beta"}, Aliases: []string{"claude-sonnet-4-5*"}},
			{Id: "org/b"},
		}}, nil
	})
	r := h.do(t.Context(), http.MethodGet, "/v1/models/org/a", "", authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.JSONEq(t, `{"id":"org/a","object":"model","created":0,"owned_by":"switchboard","context_length":8192,"providers":["alpha","beta"]}`, r.body)
	// A name an alias pattern covers is the aliased model, under that name.
	r = h.do(t.Context(), http.MethodGet, "/v1/models/claude-sonnet-4-5-20250929", "", authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.JSONEq(t, `{"id":"claude-sonnet-4-5-20250929","object":"model","created":0,"owned_by":"switchboard","context_length":8192,
		"providers":["alpha","beta"],"alias_of":"org/a"}`, r.body)

	r = h.do(t.Context(), http.MethodGet, "/v1/models/org/nope", "", authed())
	require.Equal(t, http.StatusNotFound, r.status, r.body)
	e := r.errorJSON(t)
	require.Equal(t, "model_not_found", e["code"])
	require.Equal(t, "invalid_request_error", e["type"])
	require.Contains(t, e["message"], "org/nope")

	r = h.do(t.Context(), http.MethodGet, "/v1/models/org/a", "", nil)
	require.Equal(t, http.StatusUnauthorized, r.status)
	r = h.do(t.Context(), http.MethodPost, "/v1/models/org/a", "", authed())
	require.Equal(t, http.StatusMethodNotAllowed, r.status)
}

// Every 429 speaks OpenAI's vocabulary, whichever path refused: code
// rate_limit_exceeded, type naming the kind of limit (tokens or requests).
func TestRateLimitErrorsShareOneVocabulary(t *testing.T) {
	t.Run("caller's token limit", func(t *testing.T) {
		h := newHarness(t, 1, nil)
		h.refuse(&switchboardv1.Refusal{
			Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_TENANT,
			Unit: switchboardv1.LimitUnit_LIMIT_UNIT_INPUT_TOKENS, Limit: 100, Remaining: 0, RetryAfter: durationpb.New(time.Second),
		})
		r := h.chat(plainReq, authed())
		require.Equal(t, http.StatusTooManyRequests, r.status)
		e := r.errorJSON(t)
		require.Equal(t, "rate_limit_exceeded", e["code"])
		require.Equal(t, "tokens", e["type"])
		require.Equal(t, "retryable_capacity", r.header.Get("X-Switchboard-Ratelimit-Reason"))
	})
	t.Run("caller's request limit", func(t *testing.T) {
		h := newHarness(t, 1, nil)
		h.refuse(&switchboardv1.Refusal{
			Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_API_KEY,
			Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS, Limit: 1, RetryAfter: durationpb.New(time.Second),
		})
		e := h.chat(plainReq, authed()).errorJSON(t)
		require.Equal(t, "rate_limit_exceeded", e["code"])
		require.Equal(t, "requests", e["type"])
	})
	t.Run("decider's resource exhausted", func(t *testing.T) {
		h := newHarness(t, 1, nil)
		h.fd.SetDecide(func(*switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
			return nil, status.Error(codes.ResourceExhausted, "over quota")
		})
		e := h.chat(plainReq, authed()).errorJSON(t)
		require.Equal(t, "rate_limit_exceeded", e["code"])
		require.Equal(t, "requests", e["type"])
	})
	t.Run("every provider answered 429", func(t *testing.T) {
		h := newHarness(t, 2, nil)
		h.ups[0].SetMode(fakeupstream.RateLimited)
		h.ups[1].SetMode(fakeupstream.RateLimited)
		r := h.chat(plainReq, authed())
		require.Equal(t, http.StatusTooManyRequests, r.status)
		e := r.errorJSON(t)
		require.Equal(t, "rate_limit_exceeded", e["code"])
		require.Equal(t, "requests", e["type"])
	})
}

// n > 1 would be answered with one choice: it is refused, naming n.
func TestChatRefusesSeveralChoices(t *testing.T) {
	h := newHarness(t, 1, nil)
	r := h.chat(`{"model":"org/model","n":3,"messages":[{"role":"user","content":"hi"}]}`, authed())
	require.Equal(t, http.StatusBadRequest, r.status, r.body)
	e := r.errorJSON(t)
	require.Equal(t, "n", e["param"])
	require.Empty(t, h.ups[0].Requests())
}
