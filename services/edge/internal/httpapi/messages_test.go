package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/anthropic"
	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
)

// recordingDecider refuses every Decide for lack of capacity and records
// the requests.
type recordingDecider struct {
	switchboardv1.RouterServiceClient
	mu   sync.Mutex
	reqs []*switchboardv1.DecideRequest
}

func (d *recordingDecider) Decide(_ context.Context, in *switchboardv1.DecideRequest, _ ...grpc.CallOption) (*switchboardv1.DecideResponse, error) {
	d.mu.Lock()
	d.reqs = append(d.reqs, in)
	d.mu.Unlock()
	return &switchboardv1.DecideResponse{Model: in.GetModel(), Identity: &switchboardv1.Identity{TenantId: "acme"},
		Refusal: &switchboardv1.Refusal{Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Code: "rate_limited",
			Scope: switchboardv1.LimitScope_LIMIT_SCOPE_API_KEY, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS,
			RetryAfter: durationpb.New(2 * time.Second)}}, nil
}

func (d *recordingDecider) requests() []*switchboardv1.DecideRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*switchboardv1.DecideRequest(nil), d.reqs...)
}

const messagesBody = `{"model":"claude-x","max_tokens":20,"system":"sys","messages":[{"role":"user","content":"hello there"}]}`

func TestMessagesHandler(t *testing.T) {
	d := &recordingDecider{}
	s := New(Options{Decider: d, DeciderTimeout: time.Second})
	do := func(method, path, body string, h map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		for k, v := range h {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		return w
	}
	errorOf := func(t *testing.T, w *httptest.ResponseRecorder) string {
		t.Helper()
		var b struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &b), w.Body.String())
		require.Equal(t, "error", b.Type)
		require.NotEmpty(t, b.Error.Message)
		return b.Error.Type
	}

	t.Run("no key", func(t *testing.T) {
		w := do(http.MethodPost, "/v1/messages", messagesBody, nil)
		require.Equal(t, http.StatusUnauthorized, w.Code)
		require.Equal(t, "authentication_error", errorOf(t, w))
	})
	t.Run("a path not served", func(t *testing.T) {
		w := do(http.MethodPost, "/v1/messages/batches", "{}", map[string]string{"x-api-key": "k"})
		require.Equal(t, http.StatusNotFound, w.Code)
		require.Equal(t, "not_found_error", errorOf(t, w))
	})
	t.Run("wrong method", func(t *testing.T) {
		w := do(http.MethodGet, "/v1/messages", "", map[string]string{"x-api-key": "k"})
		require.Equal(t, http.StatusMethodNotAllowed, w.Code)
		require.Equal(t, "invalid_request_error", errorOf(t, w))
	})
	t.Run("invalid request", func(t *testing.T) {
		w := do(http.MethodPost, "/v1/messages?beta=true", `{"model":"m","messages":[]}`, map[string]string{"x-api-key": "k"})
		require.Equal(t, http.StatusBadRequest, w.Code)
		require.Equal(t, "invalid_request_error", errorOf(t, w))
		require.Empty(t, d.requests(), "refused before the decider is asked")
	})
	t.Run("refused by the decider: a rate_limit_error with retry-after, the session from Claude Code's header", func(t *testing.T) {
		w := do(http.MethodPost, "/v1/messages?beta=true", messagesBody, map[string]string{
			"x-api-key": "k", "anthropic-version": "2023-06-01", "anthropic-beta": "no-such-beta",
			HeaderClaudeCodeSession: "3f1e6c2a-9a7e-4a53-a0a5-5f3c4a1c2b10"})
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		require.Equal(t, "rate_limit_error", errorOf(t, w))
		require.Equal(t, "2", w.Header().Get("Retry-After"))
		require.NotEmpty(t, w.Header().Get(HeaderAnthropicRequestID))
		reqs := d.requests()
		require.Len(t, reqs, 1)
		require.Equal(t, "claude-x", reqs[0].GetModel())
		require.Equal(t, "3f1e6c2a-9a7e-4a53-a0a5-5f3c4a1c2b10", reqs[0].GetSessionId())
		require.Equal(t, int64(20), reqs[0].GetTokens().GetMaxOutputTokens())
		require.NotEmpty(t, reqs[0].GetIdentity().GetApiKeySha256(), "x-api-key authenticates as a Bearer key would")
	})
	t.Run("count_tokens answers the edge's estimate without the decider", func(t *testing.T) {
		before := len(d.requests())
		w := do(http.MethodPost, "/v1/messages/count_tokens", `{"model":"claude-x","system":"sys","messages":[{"role":"user","content":"hello there"}]}`,
			map[string]string{"Authorization": "Bearer k"})
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		chat, _, err := anthropic.ToChat([]byte(messagesBody), anthropic.Options{})
		require.NoError(t, err)
		want, err := chatreq.Parse(chat)
		require.NoError(t, err)
		require.JSONEq(t, `{"input_tokens":`+jsonInt(want.InputTokens)+`}`, w.Body.String())
		require.Len(t, d.requests(), before)
	})
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
