package app

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

const (
	streamReq = `{"model":"org/model","stream":true,"temperature":0.3,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"provider":{"sort":"price","max_price":{"prompt":1}}}`
	plainReq  = `{"model":"org/model","max_tokens":100,"messages":[{"role":"user","content":"hi"}],"x_vendor_field":{"keep":true}}`
)

func TestChatStreamSuccess(t *testing.T) {
	h := newHarness(t, 2, nil)
	r := h.chat(streamReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "text/event-stream", r.header.Get("Content-Type"))
	require.Equal(t, "no-cache", r.header.Get("Cache-Control"))
	require.Equal(t, "no", r.header.Get("X-Accel-Buffering"))
	require.Equal(t, "alpha", r.header.Get("X-Switchboard-Provider"))
	require.Equal(t, "cheapest-qualifying alpha <8k", r.header.Get("X-Switchboard-Route"))
	require.Empty(t, r.header.Get("X-Switchboard-Route-Debug"))
	reqID := r.header.Get("X-Switchboard-Request-Id")
	require.True(t, strings.HasPrefix(reqID, "gen-"), reqID)

	evs := sseData(t, r.body)
	require.Equal(t, "[DONE]", evs[len(evs)-1])
	var content strings.Builder
	for _, ev := range evs[:len(evs)-1] {
		var c map[string]any
		require.NoError(t, json.Unmarshal([]byte(ev), &c))
		require.Equal(t, model, c["model"])
		require.Equal(t, "alpha", c["provider"])
		require.NotEmpty(t, c["choices"], "usage chunk forwarded although the client did not ask")
		delta := c["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)
		if s, ok := delta["content"].(string); ok {
			content.WriteString(s)
		}
	}
	require.Equal(t, fakeupstream.Content, content.String())

	up := h.ups[0].Requests()
	require.Len(t, up, 1)
	require.Equal(t, "upstream-alpha", up[0].Body["model"])
	require.Equal(t, "Bearer "+providerKey("alpha"), up[0].Authorization)
	require.NotContains(t, up[0].Body, "provider")
	require.Equal(t, map[string]any{"include_usage": true}, up[0].Body["stream_options"])
	require.Equal(t, 0.3, up[0].Body["temperature"])
	require.Empty(t, h.ups[1].Requests())

	decides := h.fd.DecideRequests()
	require.Len(t, decides, 1)
	d := decides[0]
	require.Equal(t, reqID, d.GetRequestId())
	require.Equal(t, clientKeyHash(), d.GetIdentity().GetApiKeySha256())
	require.Equal(t, model, d.GetModel())
	require.Equal(t, "eu-test", d.GetRegion())
	require.True(t, d.GetStream())
	require.False(t, d.GetExplain())
	require.Equal(t, []string{"temperature"}, d.GetParameters())
	require.Equal(t, switchboardv1.Sort_SORT_PRICE, d.GetProvider().GetSort())
	require.InDelta(t, 1.0, d.GetProvider().GetMaxPrice().GetPrompt(), 0)
	wantTokens := tokens.Prompt([]tokens.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}})
	require.Equal(t, wantTokens, d.GetTokens().GetInputTokens())
	require.NotEmpty(t, d.GetTokens().GetPrefixes())

	reps := h.waitReports(1)
	rep := reps[0]
	require.Equal(t, reqID, rep.GetRequestId())
	require.Equal(t, model, rep.GetModel())
	require.Equal(t, "alpha/"+model, rep.GetEndpointId())
	require.Equal(t, "acme", rep.GetTenantId())
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, rep.GetOutcome())
	require.EqualValues(t, http.StatusOK, rep.GetHttpStatus())
	require.Equal(t, wantTokens, rep.GetPromptTokens())
	require.NotNil(t, rep.GetTtft())
	require.NotNil(t, rep.GetStartTime())
	require.GreaterOrEqual(t, rep.GetDuration().AsDuration(), rep.GetTtft().AsDuration())
	require.True(t, rep.GetUsage().GetReported())
	require.EqualValues(t, fakeupstream.CachedTokens, rep.GetUsage().GetCachedInputTokens())
	require.Empty(t, rep.GetProbeId())

	hello := h.fd.Received()[0].GetHello()
	require.Equal(t, "edge-test", hello.GetEdgeId())
	require.Equal(t, "eu-test", hello.GetRegion())
	require.NotEmpty(t, hello.GetVersion())
}

func TestChatStreamIncludeUsage(t *testing.T) {
	h := newHarness(t, 1, nil)
	r := h.chat(`{"model":"org/model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	evs := sseData(t, r.body)
	require.Equal(t, "[DONE]", evs[len(evs)-1])
	var last map[string]any
	require.NoError(t, json.Unmarshal([]byte(evs[len(evs)-2]), &last))
	require.Empty(t, last["choices"])
	usage := last["usage"].(map[string]any)
	require.EqualValues(t, fakeupstream.PromptTokens, usage["prompt_tokens"])
	require.EqualValues(t, fakeupstream.CachedTokens, usage["prompt_tokens_details"].(map[string]any)["cached_tokens"])
	require.Equal(t, "alpha", last["provider"])
}

func TestChatNonStreamSuccess(t *testing.T) {
	h := newHarness(t, 1, nil)
	r := h.chat(plainReq, authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Equal(t, "alpha", r.header.Get("X-Switchboard-Provider"))
	var c map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.body), &c))
	require.Equal(t, model, c["model"])
	require.Equal(t, "alpha", c["provider"])
	require.Equal(t, "chat.completion", c["object"])
	msg := c["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	require.Equal(t, fakeupstream.Content, msg["content"])
	usage := c["usage"].(map[string]any)
	require.EqualValues(t, fakeupstream.CachedTokens, usage["prompt_tokens_details"].(map[string]any)["cached_tokens"])

	up := h.ups[0].Requests()
	require.Len(t, up, 1)
	require.Equal(t, map[string]any{"keep": true}, up[0].Body["x_vendor_field"])
	require.NotContains(t, up[0].Body, "stream_options")
	require.EqualValues(t, 100, h.fd.DecideRequests()[0].GetTokens().GetMaxOutputTokens())

	rep := h.waitReports(1)[0]
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, rep.GetOutcome())
	require.EqualValues(t, fakeupstream.PromptTokens, rep.GetUsage().GetInputTokens())
	require.EqualValues(t, fakeupstream.CompletionTokens, rep.GetUsage().GetOutputTokens())
	require.NotNil(t, rep.GetTtft())
}

func TestChatDebugHeader(t *testing.T) {
	h := newHarness(t, 1, nil)
	r := h.chat(plainReq, authed("X-Switchboard-Debug", "1"))
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.True(t, h.fd.DecideRequests()[0].GetExplain())
	dbg := r.header.Get("X-Switchboard-Route-Debug")
	require.NotEmpty(t, dbg)
	require.NotContains(t, dbg, "\n")
	var decision map[string]any
	require.NoError(t, json.Unmarshal([]byte(dbg), &decision))
	require.Equal(t, "cheapest-qualifying alpha <8k", decision["summary"])
	require.Contains(t, dbg, "alpha <8k", "not HTML-escaped")
	// The HTTP API's dialect, not protobuf's JSON: snake_case, enums as
	// lower-case words, numbers as numbers.
	requireSnakeCase(t, decision, "")
	require.Equal(t, "cheapest_qualifying", decision["reason"])
	require.Equal(t, "under_8k", decision["bucket"])
	require.Len(t, decision["candidates"], 1)
	c := decision["candidates"].([]any)[0].(map[string]any)
	require.Equal(t, "alpha", c["provider_name"])
	require.Equal(t, true, c["qualified"])
	require.Equal(t, 0.0, c["samples"])
	require.Nil(t, c["typical_ttft"], "no data: null")
}

func TestChatRequestErrors(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		header     map[string]string
		wantStatus int
		wantCode   any
		wantParam  any
		wantDecide bool
	}{
		{name: "bad JSON", body: `{"model":`, header: authed(), wantStatus: 400, wantCode: "invalid_json", wantParam: nil},
		{name: "bad field", body: `{"model":"m","messages":[{"role":"user","content":5}]}`, header: authed(), wantStatus: 400, wantCode: "invalid_type", wantParam: "messages[0].content"},
		{name: "negative max_tokens", body: `{"model":"m","max_tokens":-2,"messages":[{"role":"user","content":"q"}]}`, header: authed(), wantStatus: 400, wantCode: "integer_below_min_value", wantParam: "max_tokens"},
		{name: "bad provider option", body: `{"model":"m","messages":[{"role":"user","content":"q"}],"provider":{"sort":"cheap"}}`, header: authed(), wantStatus: 400, wantCode: "invalid_value", wantParam: "provider.sort"},
		{name: "unknown provider option", body: `{"model":"m","messages":[{"role":"user","content":"q"}],"provider":{"fast":true}}`, header: authed(), wantStatus: 400, wantCode: "invalid_value", wantParam: "provider.fast"},
		{name: "missing key", body: plainReq, header: nil, wantStatus: 401, wantCode: "invalid_api_key", wantParam: nil},
		{name: "garbled key", body: plainReq, header: map[string]string{"Authorization": "Basic abc"}, wantStatus: 401, wantCode: "invalid_api_key", wantParam: nil},
		{name: "empty bearer", body: plainReq, header: map[string]string{"Authorization": "Bearer "}, wantStatus: 401, wantCode: "invalid_api_key", wantParam: nil},
		{name: "oversize", body: `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2048) + `"}]}`, header: authed(), wantStatus: 413, wantCode: "request_too_large", wantParam: nil},
		{name: "wrong method", method: http.MethodGet, path: "/v1/chat/completions", header: authed(), wantStatus: 405, wantCode: "method_not_allowed", wantParam: nil},
		{name: "unknown path", method: http.MethodGet, path: "/v1/nope", header: authed(), wantStatus: 404, wantCode: "unknown_url", wantParam: nil},
		{name: "models wrong method", method: http.MethodPost, path: "/v1/models", header: authed(), wantStatus: 405, wantCode: "method_not_allowed", wantParam: nil},
	}
	h := newHarness(t, 1, func(c *Config) { c.MaxBodyBytes = 1024 })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path := tt.method, tt.path
			if method == "" {
				method, path = http.MethodPost, "/v1/chat/completions"
			}
			before := len(h.fd.DecideRequests())
			r := h.do(t.Context(), method, path, tt.body, tt.header)
			require.Equal(t, tt.wantStatus, r.status, r.body)
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
			require.Equal(t, "false", r.header.Get("X-Should-Retry"), "the request itself is at fault")
			e := r.errorJSON(t)
			require.Equal(t, tt.wantCode, e["code"])
			require.Equal(t, tt.wantParam, e["param"])
			require.NotEmpty(t, e["message"])
			require.Len(t, h.fd.DecideRequests(), before, "decider must not be called")
		})
	}
	require.Empty(t, h.ups[0].Requests())
}

func TestChatDeciderErrors(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
		wantRetry  string
		// wantShould is the answer's x-should-retry.
		wantShould string
		wantMsg    string
	}{
		{name: "not found", err: status.Error(codes.NotFound, "model org/x does not exist"), wantStatus: 404, wantCode: "model_not_found", wantShould: "false", wantMsg: "model org/x does not exist"},
		{name: "invalid argument", err: status.Error(codes.InvalidArgument, "provider.only names no provider of this model"), wantStatus: 400, wantCode: "invalid_value", wantShould: "false", wantMsg: "provider.only names no provider of this model"},
		{name: "permission denied", err: status.Error(codes.PermissionDenied, "model not allowed for tenant"), wantStatus: 403, wantCode: "permission_denied", wantShould: "false", wantMsg: "model not allowed for tenant"},
		{name: "resource exhausted", err: retryStatus(t), wantStatus: 429, wantCode: "rate_limit_exceeded", wantRetry: "3", wantShould: "true", wantMsg: "tenant limit reached"},
		{name: "failed precondition", err: status.Error(codes.FailedPrecondition, "no endpoint can take this request"), wantStatus: 404, wantCode: "no_endpoints_found", wantShould: "false", wantMsg: "no endpoint can take this request"},
		{name: "unavailable", err: status.Error(codes.Unavailable, "dial tcp 10.0.0.1:9090: refused"), wantStatus: 503, wantCode: "decider_unavailable", wantRetry: "1", wantShould: "true"},
		{name: "deadline", err: status.Error(codes.DeadlineExceeded, "slow"), wantStatus: 504, wantCode: "decider_timeout", wantRetry: "1", wantShould: "true"},
		{name: "internal", err: status.Error(codes.Internal, "stack trace here"), wantStatus: 500, wantCode: "internal_error"},
		// Last: the edge then remembers the key as refused for a while.
		{name: "unauthenticated", err: status.Error(codes.Unauthenticated, "unknown API key"), wantStatus: 401, wantCode: "invalid_api_key", wantShould: "false", wantMsg: "unknown API key"},
	}
	h := newHarness(t, 1, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.fd.SetDecide(func(*switchboardv1.DecideRequest) (*switchboardv1.DecideResponse, error) { return nil, tt.err })
			r := h.chat(plainReq, authed())
			require.Equal(t, tt.wantStatus, r.status, r.body)
			e := r.errorJSON(t)
			require.Equal(t, tt.wantCode, e["code"])
			require.Equal(t, tt.wantRetry, r.header.Get("Retry-After"))
			require.Equal(t, tt.wantShould, r.header.Get("X-Should-Retry"))
			if tt.wantMsg != "" {
				require.Equal(t, tt.wantMsg, e["message"])
			} else {
				require.NotContains(t, e["message"], "10.0.0.1")
				require.NotContains(t, e["message"], "stack")
			}
		})
	}
	require.Empty(t, h.ups[0].Requests())
}

func retryStatus(t *testing.T) error {
	st, err := status.New(codes.ResourceExhausted, "tenant limit reached").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(2500 * time.Millisecond)})
	require.NoError(t, err)
	return st.Err()
}

func TestChatUpstreamFailures(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		modes      []fakeupstream.Mode
		wantStatus int
		wantCode   string
		wantRetry  string
		wantServed string
	}{
		{name: "fallback before any byte", body: streamReq, modes: []fakeupstream.Mode{fakeupstream.Unavailable, fakeupstream.OK}, wantStatus: 200, wantServed: "beta"},
		{name: "fallback after malformed first chunk", body: streamReq, modes: []fakeupstream.Mode{fakeupstream.MalformedFirstChunk, fakeupstream.OK}, wantStatus: 200, wantServed: "beta"},
		{name: "timeout then next", body: streamReq, modes: []fakeupstream.Mode{fakeupstream.HangAfterHeaders, fakeupstream.OK}, wantStatus: 200, wantServed: "beta"},
		{name: "all fail", body: plainReq, modes: []fakeupstream.Mode{fakeupstream.Unavailable, fakeupstream.MalformedFirstChunk}, wantStatus: 502, wantCode: "upstream_error"},
		{name: "all rate limited", body: streamReq, modes: []fakeupstream.Mode{fakeupstream.RateLimited, fakeupstream.RateLimited}, wantStatus: 429, wantCode: "rate_limit_exceeded", wantRetry: fakeupstream.RetryAfter},
		{name: "all time out", body: streamReq, modes: []fakeupstream.Mode{fakeupstream.Hang, fakeupstream.HangAfterHeaders}, wantStatus: 504, wantCode: "upstream_timeout"},
		{name: "provider 400 passed through", body: plainReq, modes: []fakeupstream.Mode{fakeupstream.BadRequest, fakeupstream.OK}, wantStatus: 400, wantCode: ""},
		{name: "provider 401 is ours, next provider", body: plainReq, modes: []fakeupstream.Mode{fakeupstream.Unauthorized, fakeupstream.OK}, wantStatus: 200, wantServed: "beta"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, len(tt.modes), nil)
			for i, m := range tt.modes {
				h.ups[i].SetMode(m)
			}
			r := h.chat(tt.body, authed())
			require.Equal(t, tt.wantStatus, r.status, r.body)
			if tt.wantStatus == http.StatusBadRequest {
				reps := h.waitReports(1)
				require.Len(t, reps, 1)
				require.Empty(t, h.ups[1].Requests(), "a request the provider rejected is not retried")
				e := r.errorJSON(t)
				require.Equal(t, fakeupstream.BadRequestText, e["message"])
				return
			}
			reps := h.waitReports(len(tt.modes))
			require.Len(t, reps, len(tt.modes))
			if tt.wantStatus == http.StatusOK {
				require.Equal(t, tt.wantServed, r.header.Get("X-Switchboard-Provider"))
				require.Contains(t, r.body, "world")
				require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, reps[len(reps)-1].GetOutcome())
				return
			}
			e := r.errorJSON(t)
			require.Equal(t, tt.wantCode, e["code"])
			require.Equal(t, tt.wantRetry, r.header.Get("Retry-After"))
			msg := e["message"].(string)
			require.Contains(t, msg, "alpha: ")
			require.Contains(t, msg, "beta: ")
			require.NotContains(t, msg, "127.0.0.1")
			if tt.wantStatus == http.StatusTooManyRequests {
				require.Equal(t, switchboardv1.Outcome_OUTCOME_RATE_LIMITED, reps[0].GetOutcome())
				require.Equal(t, 7*time.Second, reps[0].GetRetryAfter().AsDuration())
				var names []string
				for _, hdr := range reps[0].GetRateLimitHeaders() {
					names = append(names, hdr.GetName())
				}
				require.Equal(t, []string{"retry-after", "x-ratelimit-remaining-requests"}, names)
			}
		})
	}
}

// A provider that closes right after "data: [DONE]" without the blank line
// ending the event completed its answer: the client gets it whole, with its
// [DONE], and the call is reported OK, not as a dropped stream.
func TestChatDoneWithoutBlankLine(t *testing.T) {
	h := newHarness(t, 2, nil)
	h.ups[0].SetMode(fakeupstream.DoneWithoutBlankLine)
	r := h.chat(streamReq, authed())
	require.Equal(t, http.StatusOK, r.status)
	evs := sseData(t, r.body)
	require.Equal(t, "[DONE]", evs[len(evs)-1], r.body)
	require.NotContains(t, r.body, "stream_interrupted")
	reps := h.waitReports(1)
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, reps[0].GetOutcome(), reps[0].GetError())
	require.Empty(t, h.ups[1].Requests())
}

func TestChatMidStreamDrop(t *testing.T) {
	h := newHarness(t, 2, nil)
	h.ups[0].SetMode(fakeupstream.DropMidStream)
	r := h.chat(streamReq, authed())
	require.Equal(t, http.StatusOK, r.status)
	evs := sseData(t, r.body)
	require.NotContains(t, evs, "[DONE]")
	require.Contains(t, evs[len(evs)-1], `"stream_interrupted"`)
	require.Empty(t, h.ups[1].Requests(), "no retry once bytes reached the client")
	reps := h.waitReports(1)
	require.Equal(t, switchboardv1.Outcome_OUTCOME_DROPPED, reps[0].GetOutcome())
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.FirstTokenTimeout = 30 * time.Second })
	h.ups[0].SetMode(fakeupstream.Hang)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.edge.URL()+"/chat/completions", strings.NewReader(streamReq))
		req.Header.Set("Authorization", "Bearer "+clientKey)
		resp, err := h.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return len(h.ups[0].Requests()) == 1 }, 5*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case <-h.ups[0].Cancelled():
	case <-time.After(5 * time.Second):
		t.Fatal("upstream request was not cancelled after the client left")
	}
	require.Error(t, <-done)
	rep := h.waitReports(1)[0]
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, rep.GetOutcome())
}

func TestCooldownCommandSkipsFallback(t *testing.T) {
	h := newHarness(t, 3, nil)
	require.Eventually(t, func() bool { return len(h.fd.Received()) >= 1 }, 5*time.Second, 10*time.Millisecond)
	h.fd.Send(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Cooldown{Cooldown: &switchboardv1.CooldownCommand{
		EndpointId: h.eps[1].GetId(), Until: timestamppb.New(time.Now().Add(time.Hour)), Reason: "429 storm",
	}}})
	h.ups[0].SetMode(fakeupstream.Unavailable)
	// The command travels asynchronously; retry until the edge applied it.
	require.Eventually(t, func() bool {
		r := h.chat(plainReq, authed())
		return r.status == http.StatusOK && r.header.Get("X-Switchboard-Provider") == "gamma"
	}, 5*time.Second, 20*time.Millisecond)
}

func TestProbeCommand(t *testing.T) {
	h := newHarness(t, 1, nil)
	require.Eventually(t, func() bool { return len(h.fd.Received()) >= 1 }, 5*time.Second, 10*time.Millisecond)
	h.fd.Send(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Probe{Probe: &switchboardv1.ProbeCommand{
		ProbeId: "probe-20k", Model: model, Endpoint: h.eps[0], PromptTokens: 20000, MaxOutputTokens: 4,
	}}})
	rep := h.waitReports(1)[0]
	require.Equal(t, "probe-20k", rep.GetProbeId())
	require.Empty(t, rep.GetTenantId())
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, rep.GetOutcome())
	require.EqualValues(t, 20000, rep.GetPromptTokens())
	up := h.ups[0].Requests()
	require.Len(t, up, 1)
	require.Equal(t, "Bearer "+providerKey("alpha"), up[0].Authorization)
	require.EqualValues(t, 4, up[0].Body["max_tokens"])
}

func TestReportStreamReconnects(t *testing.T) {
	h := newHarness(t, 1, nil)
	require.Equal(t, http.StatusOK, h.chat(plainReq, authed()).status)
	h.waitReports(1)
	h.fd.Restart()
	require.Eventually(t, func() bool { return h.fd.Streams() >= 2 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return h.chat(plainReq, authed()).status == http.StatusOK }, 10*time.Second, 50*time.Millisecond)
	h.waitReports(2)
}

func TestDeciderDown(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.fd.Stop()
	r := h.chat(plainReq, authed())
	require.Equal(t, http.StatusServiceUnavailable, r.status, r.body)
	require.Equal(t, "decider_unavailable", r.errorJSON(t)["code"])
	require.Empty(t, h.ups[0].Requests())
}

func TestStartWithoutDecider(t *testing.T) {
	e, err := Start(t.Context(), Config{Listen: "127.0.0.1:0", Decider: "127.0.0.1:1"}, nil)
	require.NoError(t, err)
	require.NoError(t, e.Close())
	require.NoError(t, e.Close(), "Close is idempotent")
}

func TestCredentialsNeverLogged(t *testing.T) {
	h := newHarness(t, 3, nil)
	h.ups[0].SetMode(fakeupstream.Unauthorized) // echoes the provider key
	h.ups[1].SetMode(fakeupstream.RateLimited)
	r := h.chat(streamReq, authed("X-Switchboard-Debug", "1"))
	require.Equal(t, http.StatusOK, r.status, r.body)
	h.ups[2].SetMode(fakeupstream.Unavailable)
	r2 := h.chat(plainReq, authed())
	require.Equal(t, http.StatusServiceUnavailable, r2.status, "the last provider was overloaded")
	h.chat(plainReq, map[string]string{"Authorization": "Bearer " + clientKey + " junk"})
	reps := h.waitReports(6)

	secrets := []string{clientKey, providerKey("alpha"), providerKey("beta"), providerKey("gamma")}
	require.NoError(t, h.edge.Close())
	logs := h.logs.String()
	require.Contains(t, logs, "upstream attempt", "logs were captured")
	for _, s := range secrets {
		require.NotContains(t, logs, s)
		require.NotContains(t, r.body, s)
		require.NotContains(t, r2.body, s)
		for k, v := range r.header {
			require.NotContains(t, k+strings.Join(v, ","), s)
		}
		for _, rep := range reps {
			require.NotContains(t, rep.String(), s)
		}
	}
	// The 401's report is held until the next attempt said whose failure
	// it was (a bare 401 may be the request's), so it is not the first.
	var unauthorized *switchboardv1.CallReport
	for _, rep := range reps {
		if rep.GetHttpStatus() == http.StatusUnauthorized {
			unauthorized = rep
		}
	}
	require.NotNil(t, unauthorized, "the 401 is reported")
	require.Contains(t, unauthorized.GetError(), "[redacted]")
}

func TestModels(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.fd.SetListModels(func(req *switchboardv1.ListModelsRequest) (*switchboardv1.ListModelsResponse, error) {
		if req.GetIdentity().GetApiKeySha256() != clientKeyHash() {
			return nil, status.Error(codes.Unauthenticated, "unknown API key")
		}
		return &switchboardv1.ListModelsResponse{Models: []*switchboardv1.Model{
			{Id: "org/a", ContextLength: 8192, Providers: []string{"alpha", "beta"}, Aliases: []string{"gpt-5-codex", "claude-*"},
				CreateTime: timestamppb.New(time.Unix(1_790_000_000, 0))},
			{Id: "org/b", CreateTime: timestamppb.New(time.Unix(1_790_000_500, 0))},
		}}, nil
	})
	r := h.do(t.Context(), http.MethodGet, "/v1/models", "", authed())
	require.Equal(t, http.StatusOK, r.status, r.body)
	// An exact alias is an entry of its own; a pattern is not listed.
	// created is when the decider first served the model, in unix seconds.
	require.JSONEq(t, `{"object":"list","data":[
		{"id":"org/a","object":"model","created":1790000000,"owned_by":"switchboard","context_length":8192,"providers":["alpha","beta"]},
		{"id":"org/b","object":"model","created":1790000500,"owned_by":"switchboard","context_length":0,"providers":[]},
		{"id":"gpt-5-codex","object":"model","created":1790000000,"owned_by":"switchboard","context_length":8192,"providers":["alpha","beta"],"alias_of":"org/a"}]}`, r.body)

	r = h.do(t.Context(), http.MethodGet, "/v1/models", "", nil)
	require.Equal(t, http.StatusUnauthorized, r.status)
	r = h.do(t.Context(), http.MethodGet, "/v1/models", "", map[string]string{"Authorization": "Bearer other"})
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Equal(t, "unknown API key", r.errorJSON(t)["message"])
}

func TestHealthz(t *testing.T) {
	h := newHarness(t, 1, nil)
	var body map[string]string
	require.Eventually(t, func() bool {
		r := h.do(t.Context(), http.MethodGet, "/healthz", "", nil)
		require.Equal(t, http.StatusOK, r.status)
		require.NoError(t, json.Unmarshal([]byte(r.body), &body))
		return body["decider"] == "READY"
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, "ok", body["status"])

	// Liveness does not fail while draining: a restart would cut the
	// streams the drain lets finish. Readiness does.
	h.edge.api.SetDraining()
	r := h.do(t.Context(), http.MethodGet, "/healthz", "", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.NoError(t, json.Unmarshal([]byte(r.body), &body))
	require.Equal(t, "shutting_down", body["status"])
	require.Equal(t, http.StatusServiceUnavailable, h.do(t.Context(), http.MethodGet, "/readyz", "", nil).status)
}

func TestCloseDrains(t *testing.T) {
	// The drain delay is the window in which the test must see /healthz
	// turn and get one answer: 300 ms was too narrow on a loaded machine.
	h := newHarness(t, 1, func(c *Config) { c.DrainDelay = 3 * time.Second })
	closed := make(chan error, 1)
	go func() { closed <- h.edge.Close() }()
	// During the drain delay the edge still serves, but reports not ready.
	require.Eventually(t, func() bool {
		return h.do(t.Context(), http.MethodGet, "/readyz", "", nil).status == http.StatusServiceUnavailable
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusOK, h.chat(plainReq, authed()).status)
	require.NoError(t, <-closed)
	// The last report was flushed before the stream closed.
	h.waitReports(1)
	h.client.CloseIdleConnections()
}

// TestChatSessionHeader: a valid X-Session-Id names the conversation in
// Decide; an invalid one is ignored, not refused. Every call report says
// which answer-quality checks the answer failed (none here).
func TestChatSessionHeader(t *testing.T) {
	h := newHarness(t, 1, nil)
	r := h.chat(plainReq, authed("X-Session-Id", "conv-42"))
	require.Equal(t, http.StatusOK, r.status, r.body)
	r = h.chat(plainReq, authed("X-Session-Id", "not a valid id"))
	require.Equal(t, http.StatusOK, r.status, r.body)
	decides := h.fd.DecideRequests()
	require.Len(t, decides, 2)
	require.Equal(t, "conv-42", decides[0].GetSessionId())
	require.Empty(t, decides[1].GetSessionId())
	for _, rep := range h.waitReports(2) {
		require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, rep.GetOutcome())
		require.Empty(t, rep.GetQualityFailures())
	}
}
