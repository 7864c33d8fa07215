package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// longWait is a deadline no test reaches: only the order of events decides.
const longWait = time.Minute

// contentOf joins the delta contents of an SSE body and checks every chunk
// carries the request id.
func contentOf(t *testing.T, body, id string) string {
	t.Helper()
	var content strings.Builder
	for _, ev := range sseData(t, body) {
		if ev == "[DONE]" {
			continue
		}
		var c map[string]any
		require.NoError(t, json.Unmarshal([]byte(ev), &c))
		require.Equal(t, id, c["id"], "every chunk carries the request id")
		for _, ch := range c["choices"].([]any) {
			if s, ok := ch.(map[string]any)["delta"].(map[string]any)["content"].(string); ok {
				content.WriteString(s)
			}
		}
	}
	return content.String()
}

func TestChatHedgeDelayed(t *testing.T) {
	h := newHarness(t, 2, func(c *Config) {
		c.FirstTokenTimeout, c.IdleTimeout = longWait, longWait
	})
	h.fd.SetDecide(func(req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
		resp := h.decision(req)
		resp.Hedge = &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, Delay: durationpb.New(time.Millisecond), Endpoint: h.eps[1]}
		return resp, nil
	})
	// The hedge is granted only once the primary reached its provider, which
	// then sees it cancelled; with a 1ms delay the hedge could otherwise win
	// before the primary's connection was even made.
	h.fd.SetAcquireHedge(func(ctx context.Context, _ *switchboardv1.AcquireHedgeRequest) (*switchboardv1.AcquireHedgeResponse, error) {
		select {
		case <-h.ups[0].Arrived():
		case <-ctx.Done():
		}
		return &switchboardv1.AcquireHedgeResponse{Granted: true}, nil
	})
	h.ups[0].SetMode(fakeupstream.HangAfterHeaders)

	r := h.chat(streamReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	id := r.header.Get("X-Switchboard-Request-Id")
	require.Equal(t, "beta", r.header.Get("X-Switchboard-Provider"))
	require.Equal(t, fakeupstream.Content, contentOf(t, r.body, id), "one answer")
	require.Equal(t, 1, strings.Count(r.body, "[DONE]"))
	select {
	case <-h.ups[0].Cancelled():
	case <-time.After(10 * time.Second):
		t.Fatal("the slow primary's request was not cancelled")
	}

	hr := h.fd.HedgeRequests()
	require.Len(t, hr, 1)
	require.Equal(t, id, hr[0].GetRequestId())
	require.Equal(t, h.eps[1].GetId(), hr[0].GetEndpointId())
	require.Positive(t, hr[0].GetEstimatedCostUsd())

	reps := h.waitReports(2)
	byEndpoint := map[string]*switchboardv1.CallReport{}
	for _, rep := range reps {
		byEndpoint[rep.GetEndpointId()] = rep
	}
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, byEndpoint[h.eps[0].GetId()].GetOutcome())
	require.False(t, byEndpoint[h.eps[0].GetId()].GetHedge())
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, byEndpoint[h.eps[1].GetId()].GetOutcome())
	require.True(t, byEndpoint[h.eps[1].GetId()].GetHedge())

	rec := h.waitRecord(id)
	require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_OK, rec.GetStatus())
	require.Equal(t, "acme", rec.GetTenantId())
	require.Equal(t, "key-1", rec.GetApiKeyId())
	require.True(t, rec.GetHedge().GetUsed())
	require.Equal(t, h.eps[1].GetId(), rec.GetHedge().GetWinnerEndpointId())
	require.Equal(t, h.eps[0].GetId(), rec.GetHedge().GetLoserEndpointId())
	wantLoser := float64(h.fd.DecideRequests()[0].GetTokens().GetInputTokens()) * h.eps[0].GetPrice().GetInput() / 1e6
	require.InDelta(t, wantLoser, rec.GetHedge().GetLoserCostUsd(), 1e-12)

	// The client finds the call by the id it got, in the HTTP API's dialect.
	got := h.generation(t, id)
	require.Equal(t, id, got["id"])
	require.Equal(t, h.eps[1].GetId(), got["endpoint_id"])
	require.Equal(t, "beta", got["provider_name"])
	require.Equal(t, "ok", got["status"])
	require.IsType(t, float64(0), got["total_cost"])
	hedge := got["hedge"].(map[string]any)
	require.Equal(t, "delayed", hedge["mode"])
	require.Equal(t, h.eps[0].GetId(), hedge["loser_endpoint_id"])
	require.Equal(t, h.eps[1].GetId(), hedge["winner_endpoint_id"])
	attempts := got["provider_responses"].([]any)
	require.Len(t, attempts, 2)
	require.Equal(t, false, attempts[0].(map[string]any)["is_hedge"])
	require.Equal(t, "cancelled", attempts[0].(map[string]any)["outcome"])
	require.Equal(t, true, attempts[1].(map[string]any)["is_hedge"])
	require.Equal(t, "ok", attempts[1].(map[string]any)["outcome"])
}

// generation is GET /v1/generation?id=id's data, decoded as a client
// would: JSON numbers are float64, strings strings. Every key of it, at
// any depth, is snake_case.
func (h *harness) generation(t *testing.T, id string) map[string]any {
	t.Helper()
	g := h.do(t.Context(), http.MethodGet, "/v1/generation?id="+url.QueryEscape(id), "", authed())
	require.Equal(t, http.StatusOK, g.status, g.body)
	var body struct {
		Data map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(g.body), &body))
	requireSnakeCase(t, body.Data, "data")
	return body.Data
}

// requireSnakeCase fails for a key of v (an object, an array of them, at
// any depth) that is not snake_case: no camelCase leaks from protobuf's JSON.
func requireSnakeCase(t *testing.T, v any, path string) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			require.Regexp(t, `^[a-z][a-z0-9_]*$`, k, "%s.%s", path, k)
			requireSnakeCase(t, e, path+"."+k)
		}
	case []any:
		for i, e := range v {
			requireSnakeCase(t, e, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

// TestGenerationOfHedgedRetriedCall: a call whose hedged first attempt
// failed on both legs (503 on the primary, 429 on the hedge) and whose
// fallback served it lists all three calls in provider_responses, in
// order, with counts, statuses, latencies and costs as JSON numbers and
// enums as lower-case words, not protobuf's JSON ("0.7085s", "1234",
// CLIENT_API_CHAT_COMPLETIONS).
func TestGenerationOfHedgedRetriedCall(t *testing.T) {
	h := newHarness(t, 3, nil)
	h.fd.SetDecide(func(req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
		resp := h.decision(req)
		resp.Hedge = &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, Endpoint: h.eps[1]}
		return resp, nil
	})
	h.fd.SetHedgeGrant(true)
	h.ups[0].SetMode(fakeupstream.Unavailable)
	h.ups[1].SetMode(fakeupstream.RateLimited)

	r := h.chat(streamReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "gamma", r.header.Get("X-Switchboard-Provider"))
	id := r.header.Get("X-Switchboard-Request-Id")
	rec := h.waitRecord(id)
	require.Len(t, rec.GetAttempts(), 3, "%v", rec.GetAttempts())

	got := h.generation(t, id)
	require.Equal(t, id, got["id"])
	require.Equal(t, "chat_completions", got["api_type"])
	require.Equal(t, "ok", got["status"])
	require.Equal(t, 200.0, got["http_status"])
	require.Equal(t, "gamma", got["provider_name"])
	require.Equal(t, h.eps[2].GetId(), got["endpoint_id"])
	require.Equal(t, true, got["streamed"])
	require.Equal(t, float64(rec.GetUsage().GetInputTokens()), got["native_tokens_prompt"])
	require.Positive(t, got["native_tokens_prompt"])
	require.Equal(t, float64(rec.GetUsage().GetOutputTokens()), got["native_tokens_completion"])
	require.Equal(t, float64(rec.GetUsage().GetCachedInputTokens()), got["native_tokens_cached"])
	require.InDelta(t, rec.GetCostUsd(), got["total_cost"], 1e-15)
	require.Positive(t, got["total_cost"])
	require.Equal(t, float64(rec.GetTtft().AsDuration().Milliseconds()), got["latency"], "milliseconds to the first token")
	require.Equal(t, float64(rec.GetDuration().AsDuration().Milliseconds()), got["generation_time"], "milliseconds")
	createdAt, err := time.Parse(time.RFC3339Nano, got["created_at"].(string))
	require.NoError(t, err)
	require.Equal(t, rec.GetCreateTime().AsTime().UTC(), createdAt.UTC())
	hedge := got["hedge"].(map[string]any)
	require.Equal(t, "immediate", hedge["mode"])
	require.Equal(t, h.eps[2].GetId(), hedge["winner_endpoint_id"])

	type want struct {
		endpoint, provider string
		status             any
		outcome            string
		hedge              bool
	}
	wants := []want{
		{h.eps[0].GetId(), "alpha", 503.0, "upstream_error", false},
		{h.eps[1].GetId(), "beta", 429.0, "rate_limited", true},
		{h.eps[2].GetId(), "gamma", 200.0, "ok", false},
	}
	prs := got["provider_responses"].([]any)
	require.Len(t, prs, len(wants))
	for i, w := range wants {
		p := prs[i].(map[string]any)
		require.Equal(t, w.endpoint, p["endpoint_id"], i)
		require.Equal(t, w.provider, p["provider_name"], i)
		require.Equal(t, w.status, p["status"], i)
		require.Equal(t, w.outcome, p["outcome"], i)
		require.Equal(t, w.hedge, p["is_hedge"], i)
		require.IsType(t, float64(0), p["cost"], i)
		require.InDelta(t, rec.GetAttempts()[i].GetCostUsd(), p["cost"], 1e-15, i)
		_, err := time.Parse(time.RFC3339Nano, p["started_at"].(string))
		require.NoError(t, err, i)
	}
	require.Nil(t, prs[0].(map[string]any)["latency"], "no first token: null")
	require.Equal(t, float64(rec.GetAttempts()[2].GetTtft().AsDuration().Milliseconds()), prs[2].(map[string]any)["latency"])
	require.Positive(t, prs[2].(map[string]any)["cost"], "the served call costs")

	// GET /v1/activity lists the call in the same shape.
	a := h.do(t.Context(), http.MethodGet, "/v1/activity?limit=1", "", authed())
	require.Equal(t, http.StatusOK, a.status, a.body)
	var list struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.body), &list))
	require.Len(t, list.Data, 1)
	require.Equal(t, got, list.Data[0])
}

func TestChatHedgeImmediateOver128k(t *testing.T) {
	h := newHarness(t, 2, func(c *Config) { c.FirstTokenTimeout, c.IdleTimeout = longWait, longWait })
	// As the decider does: both at once over 128k tokens, no hedge below.
	h.fd.SetDecide(func(req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
		resp := h.decision(req)
		if req.GetStream() && req.GetTokens().GetInputTokens() >= 128*1024 {
			resp.Hedge = &switchboardv1.HedgePlan{Mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, Endpoint: h.eps[1]}
		}
		return resp, nil
	})
	h.fd.SetHedgeGrant(true)

	// A short prompt is not hedged.
	r := h.chat(streamReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Empty(t, h.fd.HedgeRequests())
	require.Empty(t, h.ups[1].Requests())

	primaryGate, hedgeGate := make(chan struct{}), make(chan struct{})
	defer close(primaryGate)
	h.ups[0].SetGate(primaryGate)
	h.ups[1].SetGate(hedgeGate)
	long := `{"model":"org/model","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 4*130*1024/5) + `"}]}`
	done := make(chan reply, 1)
	go func() { done <- h.chat(long, authed()) }()
	// Both legs of the long request start before either has a token.
	require.Eventually(t, func() bool {
		return len(h.ups[0].Requests()) == 2 && len(h.ups[1].Requests()) == 1
	}, 10*time.Second, 5*time.Millisecond, "both legs did not start")
	// Each leg carries its own provider's credential, never the other's.
	require.Equal(t, "Bearer "+providerKey("alpha"), h.ups[0].Requests()[1].Authorization)
	require.Equal(t, "Bearer "+providerKey("beta"), h.ups[1].Requests()[0].Authorization)
	close(hedgeGate)
	r = <-done
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "beta", r.header.Get("X-Switchboard-Provider"))
	id := r.header.Get("X-Switchboard-Request-Id")
	require.Equal(t, fakeupstream.Content, contentOf(t, r.body, id))
	require.Len(t, h.fd.HedgeRequests(), 1)
	require.GreaterOrEqual(t, h.fd.DecideRequests()[1].GetTokens().GetInputTokens(), int64(128*1024))
	rec := h.waitRecord(id)
	require.Equal(t, switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, rec.GetHedge().GetMode())
	require.Equal(t, decisionGrant(id), rec.GetGrant(), "both legs' record carries the decision's grant")
	require.True(t, proto.Equal(decisionCaps(id), rec.GetCaps()), "and its caps: %v", rec.GetCaps())
	require.Equal(t, h.eps[0].GetId(), rec.GetHedge().GetLoserEndpointId())
}

func TestActivityRecordStatuses(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		modes      []fakeupstream.Mode
		wantStatus switchboardv1.CallStatus
		wantHTTP   int32
		wantServed string
		wantCost   bool
	}{
		{name: "ok", body: plainReq, modes: []fakeupstream.Mode{fakeupstream.OK}, wantStatus: switchboardv1.CallStatus_CALL_STATUS_OK, wantHTTP: 200, wantServed: "alpha", wantCost: true},
		{name: "ok after a retry", body: streamReq, modes: []fakeupstream.Mode{fakeupstream.RateLimited, fakeupstream.OK}, wantStatus: switchboardv1.CallStatus_CALL_STATUS_OK, wantHTTP: 200, wantServed: "beta", wantCost: true},
		{name: "failed", body: streamReq, modes: []fakeupstream.Mode{fakeupstream.Unavailable, fakeupstream.Unavailable}, wantStatus: switchboardv1.CallStatus_CALL_STATUS_FAILED, wantHTTP: 503},
		{name: "interrupted", body: streamReq, modes: []fakeupstream.Mode{fakeupstream.DropMidStream}, wantStatus: switchboardv1.CallStatus_CALL_STATUS_INTERRUPTED, wantHTTP: 200, wantServed: "alpha", wantCost: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, len(tt.modes), nil)
			for i, m := range tt.modes {
				h.ups[i].SetMode(m)
			}
			r := h.chat(tt.body, authed())
			id := r.header.Get("X-Switchboard-Request-Id")
			rec := h.waitRecord(id)
			require.Equal(t, tt.wantStatus, rec.GetStatus())
			require.Equal(t, tt.wantHTTP, rec.GetHttpStatus())
			require.EqualValues(t, r.status, rec.GetHttpStatus())
			require.Equal(t, model, rec.GetModel())
			require.Equal(t, "acme", rec.GetTenantId())
			require.Equal(t, decisionGrant(id), rec.GetGrant(), "the decision's grant, whatever the attempts")
			require.True(t, proto.Equal(decisionCaps(id), rec.GetCaps()), "the decision's caps, whatever the attempts: %v", rec.GetCaps())
			require.Len(t, rec.GetAttempts(), len(tt.modes))
			require.NotNil(t, rec.GetCreateTime())
			require.NotNil(t, rec.GetDuration())
			if tt.wantServed == "" {
				require.Empty(t, rec.GetEndpointId())
				require.Zero(t, rec.GetCostUsd())
				require.NotEmpty(t, rec.GetError())
				return
			}
			require.Equal(t, tt.wantServed, rec.GetProvider())
			require.Equal(t, tt.wantCost, rec.GetCostUsd() > 0)
		})
	}
}

func TestClientDisconnectMidStream(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.FirstTokenTimeout, c.IdleTimeout = longWait, longWait })
	h.ups[0].SetMode(fakeupstream.HangMidStream)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.edge.URL()+"/chat/completions", strings.NewReader(streamReq))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+clientKey)
	resp, err := h.client.Do(req)
	require.NoError(t, err)
	id := resp.Header.Get("X-Switchboard-Request-Id")
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), fakeupstream.DeliveredBeforeDrop) {
			break
		}
	}
	cancel()
	_ = resp.Body.Close()
	select {
	case <-h.ups[0].Cancelled():
	case <-time.After(10 * time.Second):
		t.Fatal("upstream request was not cancelled after the client left")
	}
	rec := h.waitRecord(id)
	require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_CLIENT_CANCELLED, rec.GetStatus())
	require.EqualValues(t, http.StatusOK, rec.GetHttpStatus())
	require.Equal(t, h.eps[0].GetId(), rec.GetEndpointId())
	// Billed for what it got: the prompt estimate and the delivered text.
	require.False(t, rec.GetUsage().GetReported())
	require.EqualValues(t, 2, rec.GetUsage().GetOutputTokens())
	require.Positive(t, rec.GetCostUsd())
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, h.waitReports(1)[0].GetOutcome())
}

func TestChatBilling(t *testing.T) {
	// The harness's endpoints cost 0.20 / 0.05 cached / 0.80 per million.
	known := &fakeupstream.Usage{Prompt: 1_000_000, Cached: 400_000, Completion: 10_000}
	tests := []struct {
		name       string
		body       string
		deciderCap *switchboardv1.MaxPrice
		wantCost   float64
		wantCapped bool
	}{
		{name: "exact", body: `{"model":"org/model","messages":[{"role":"user","content":"hi"}]}`, wantCost: 0.148},
		{name: "client max_price", body: `{"model":"org/model","messages":[{"role":"user","content":"hi"}],"provider":{"max_price":{"prompt":0.1,"completion":0.5}}}`,
			wantCost: 0.06 + 0.02 + 0.005, wantCapped: true},
		{name: "decider max_price", body: `{"model":"org/model","messages":[{"role":"user","content":"hi"}]}`,
			deciderCap: &switchboardv1.MaxPrice{Completion: ptr(0.4)}, wantCost: 0.12 + 0.02 + 0.004, wantCapped: true},
		{name: "max_tokens", body: `{"model":"org/model","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`,
			wantCost: 0.12 + 0.02 + 0.0008, wantCapped: true},
		{name: "stream usage chunk", body: `{"model":"org/model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
			wantCost: 0.148},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 1, nil)
			h.ups[0].SetUsage(known)
			h.fd.SetDecide(func(req *switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) {
				resp := h.decision(req)
				resp.MaxPrice = tt.deciderCap
				return resp, nil
			})
			r := h.chat(tt.body, authed())
			require.Equal(t, http.StatusOK, r.status, r.body)
			var usage map[string]any
			if strings.Contains(tt.body, `"stream":true`) {
				for _, ev := range sseData(t, r.body) {
					var c map[string]any
					if json.Unmarshal([]byte(ev), &c) == nil && c["usage"] != nil {
						usage = c["usage"].(map[string]any)
					}
				}
			} else {
				var c map[string]any
				require.NoError(t, json.Unmarshal([]byte(r.body), &c))
				require.Equal(t, r.header.Get("X-Switchboard-Request-Id"), c["id"])
				usage = c["usage"].(map[string]any)
			}
			require.InDelta(t, tt.wantCost, usage["cost"], 1e-12)
			rec := h.waitRecord(r.header.Get("X-Switchboard-Request-Id"))
			require.InDelta(t, tt.wantCost, rec.GetCostUsd(), 1e-12)
			require.Equal(t, tt.wantCapped, rec.GetCostCapped())
			require.True(t, rec.GetUsage().GetReported())
		})
	}
}

func ptr(f float64) *float64 { return &f }

func TestActivityList(t *testing.T) {
	h := newHarness(t, 1, nil)
	var ids []string
	for range 3 {
		r := h.chat(plainReq, authed())
		require.Equal(t, http.StatusOK, r.status)
		ids = append(ids, r.header.Get("X-Switchboard-Request-Id"))
	}
	for _, id := range ids {
		h.waitRecord(id)
	}

	list := func(query string) (reply, map[string]any) {
		t.Helper()
		r := h.do(t.Context(), http.MethodGet, "/v1/activity"+query, "", authed())
		var body map[string]any
		if r.status == http.StatusOK {
			require.NoError(t, json.Unmarshal([]byte(r.body), &body), r.body)
		}
		return r, body
	}

	r, body := list("")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "list", body["object"])
	require.Equal(t, "", body["next_cursor"])
	data := body["data"].([]any)
	require.Len(t, data, 3)
	first := data[0].(map[string]any)
	require.Equal(t, ids[2], first["id"], "newest first")
	for _, k := range []string{"created_at", "tenant_id", "endpoint_id", "total_cost", "http_status", "provider_responses", "native_tokens_prompt"} {
		require.Contains(t, first, k)
	}
	requireSnakeCase(t, body, "")
	lr := h.fd.ListActivityRequests()
	require.EqualValues(t, 50, lr[len(lr)-1].GetLimit(), "default page")
	require.Equal(t, clientKeyHash(), lr[len(lr)-1].GetIdentity().GetApiKeySha256())

	// Paging.
	r, body = list("?limit=2")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Len(t, body["data"], 2)
	cursor := body["next_cursor"].(string)
	require.NotEmpty(t, cursor)
	r, body = list("?limit=2&cursor=" + url.QueryEscape(cursor))
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Len(t, body["data"], 1)
	require.Equal(t, ids[0], body["data"].([]any)[0].(map[string]any)["id"])

	// Parameters reach the decider.
	start := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	r, _ = list("?start=" + url.QueryEscape(start.Format(time.RFC3339)) + "&end=" + "4102444800" + "&model=org/model&limit=500")
	require.Equal(t, http.StatusOK, r.status, r.body)
	lr = h.fd.ListActivityRequests()
	got := lr[len(lr)-1]
	require.Equal(t, start, got.GetStartTime().AsTime())
	require.Equal(t, time.Unix(4102444800, 0).UTC(), got.GetEndTime().AsTime())
	require.Equal(t, "org/model", got.GetModel())
	require.EqualValues(t, 500, got.GetLimit())
	r, body = list("?model=org/other")
	require.Equal(t, http.StatusOK, r.status)
	require.Empty(t, body["data"])

	bad := []struct {
		query, param, code string
	}{
		{"?start=yesterday", "start", "invalid_value"},
		{"?end=2026-13-01T00:00:00Z", "end", "invalid_value"},
		{"?start=1700000000&end=1600000000", "end", "invalid_value"},
		{"?limit=0", "limit", "invalid_value"},
		{"?limit=501", "limit", "invalid_value"},
		{"?limit=ten", "limit", "invalid_value"},
		{"?cursor=" + strings.Repeat("x", 2000), "cursor", "invalid_value"},
		// A misspelt filter would otherwise list everything.
		{"?modle=org/model", "modle", "unknown_parameter"},
		{"?limit=2&after=gen-1", "after", "unknown_parameter"},
		{"?limit=2&limit=3", "limit", "invalid_value"},
	}
	before := len(h.fd.ListActivityRequests())
	for _, b := range bad {
		r, _ := list(b.query)
		require.Equal(t, http.StatusBadRequest, r.status, b.query)
		e := r.errorJSON(t)
		require.Equal(t, b.param, e["param"], b.query)
		require.Equal(t, b.code, e["code"], b.query)
		require.Equal(t, "invalid_request_error", e["type"], b.query)
		if b.code == "unknown_parameter" {
			require.Contains(t, e["message"], "'"+b.param+"'", b.query)
		}
	}
	require.Len(t, h.fd.ListActivityRequests(), before, "bad parameters never reach the decider")

	r = h.do(t.Context(), http.MethodGet, "/v1/activity", "", nil)
	require.Equal(t, http.StatusUnauthorized, r.status)
	r = h.do(t.Context(), http.MethodPost, "/v1/activity", "", authed())
	require.Equal(t, http.StatusMethodNotAllowed, r.status)
	h.fd.SetIdentify(func(*switchboardv1.Identity) (string, error) {
		return "", status.Error(codes.Unauthenticated, "unknown API key")
	})
	r = h.do(t.Context(), http.MethodGet, "/v1/activity", "", authed())
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Equal(t, "invalid_api_key", r.errorJSON(t)["code"])
}

func TestGeneration(t *testing.T) {
	h := newHarness(t, 1, nil)
	r := h.chat(plainReq, authed())
	require.Equal(t, http.StatusOK, r.status)
	id := r.header.Get("X-Switchboard-Request-Id")
	h.waitRecord(id)
	const otherKey = "sk-other-tenant"
	h.fd.SetIdentify(func(id *switchboardv1.Identity) (string, error) {
		if id.GetApiKeySha256() == clientKeyHash() {
			return "acme", nil
		}
		return "other", nil
	})

	g := h.do(t.Context(), http.MethodGet, "/v1/generation?id="+id, "", authed())
	require.Equal(t, http.StatusOK, g.status, g.body)
	var body map[string]map[string]any
	require.NoError(t, json.Unmarshal([]byte(g.body), &body))
	require.Equal(t, id, body["data"]["id"])
	require.Equal(t, "alpha", body["data"]["provider_name"])
	require.Equal(t, "key-1", body["data"]["api_key_id"])

	tests := []struct {
		name       string
		query      string
		key        string
		wantStatus int
		wantCode   string
		wantParam  any
	}{
		{name: "missing id", query: "", key: clientKey, wantStatus: 400, wantCode: "invalid_value", wantParam: "id"},
		{name: "empty id", query: "?id=", key: clientKey, wantStatus: 400, wantCode: "invalid_value", wantParam: "id"},
		{name: "unknown id", query: "?id=gen-nope", key: clientKey, wantStatus: 404, wantCode: "not_found", wantParam: "id"},
		{name: "another tenant's id", query: "?id=" + id, key: otherKey, wantStatus: 404, wantCode: "not_found", wantParam: "id"},
		{name: "no key", query: "?id=" + id, wantStatus: 401, wantCode: "invalid_api_key", wantParam: nil},
		{name: "unknown parameter", query: "?id=" + id + "&format=full", key: clientKey, wantStatus: 400, wantCode: "unknown_parameter", wantParam: "format"},
		{name: "id twice", query: "?id=" + id + "&id=" + id, key: clientKey, wantStatus: 400, wantCode: "invalid_value", wantParam: "id"},
	}
	var notFound []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tt.key != "" {
				hdr["Authorization"] = "Bearer " + tt.key
			}
			g := h.do(t.Context(), http.MethodGet, "/v1/generation"+tt.query, "", hdr)
			require.Equal(t, tt.wantStatus, g.status, g.body)
			e := g.errorJSON(t)
			require.Equal(t, tt.wantCode, e["code"])
			require.Equal(t, tt.wantParam, e["param"])
			if g.status == http.StatusNotFound {
				notFound = append(notFound, strings.ReplaceAll(e["message"].(string), id, "gen-nope"))
			}
		})
	}
	require.Len(t, notFound, 2)
	require.Equal(t, notFound[0], notFound[1], "another tenant's id reads as a missing one")
}
