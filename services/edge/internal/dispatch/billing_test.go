package dispatch

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/invoice"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

func ptr(f float64) *float64 { return &f }

// billPrice is a known price list: USD per million tokens.
var billPrice = &switchboardv1.Price{Input: 0.20, CachedInput: 0.05, Output: 0.80}

// billUsage is a known usage: 1M input of which 400k cached, 10k output,
// which costs 600k×0.20 + 400k×0.05 + 10k×0.80 = $0.12 + $0.02 + $0.008.
var billUsage = fakeupstream.Usage{Prompt: 1_000_000, Cached: 400_000, Completion: 10_000}

const billCost = 0.148

// billEndpoint is an endpoint at billPrice.
func billEndpoint(name, baseURL string) *switchboardv1.Endpoint {
	ep := endpoint(name, baseURL)
	ep.Price = billPrice
	return ep
}

// chunks decodes the JSON events of an SSE body, leaving out [DONE].
func chunks(t *testing.T, body string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range events(t, body) {
		if ev == "[DONE]" {
			continue
		}
		var c map[string]any
		require.NoError(t, json.Unmarshal([]byte(ev), &c), ev)
		out = append(out, c)
	}
	return out
}

// usageOf returns the usage object the client got: the non-streamed body's,
// or the stream's usage chunk; nil when there is none.
func usageOf(t *testing.T, stream bool, body string) map[string]any {
	t.Helper()
	if !stream {
		var c map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &c))
		u, _ := c["usage"].(map[string]any)
		return u
	}
	var u map[string]any
	for _, c := range chunks(t, body) {
		if cu, ok := c["usage"].(map[string]any); ok {
			require.Nil(t, u, "one usage chunk")
			u = cu
		}
	}
	return u
}

func TestServeBilling(t *testing.T) {
	delivered := invoice.TextTokens(int64(len(fakeupstream.Content)))
	tests := []struct {
		name      string
		body      string
		mode      fakeupstream.Mode
		usage     *fakeupstream.Usage
		caps      invoice.Caps
		wantCost  float64
		wantUsage *switchboardv1.Usage // billed, without cost
		capped    bool
		status    switchboardv1.CallStatus
		// wantClientUsage: the client's answer carries usage with cost.
		wantClientUsage bool
	}{
		{
			name: "stream, provider usage", body: streamUsageBody, usage: &billUsage,
			wantCost: billCost, wantUsage: &switchboardv1.Usage{InputTokens: 1_000_000, CachedInputTokens: 400_000, OutputTokens: 10_000, Reported: true},
			status: switchboardv1.CallStatus_CALL_STATUS_OK, wantClientUsage: true,
		},
		{
			name: "non-stream, provider usage", body: plainBody, usage: &billUsage,
			wantCost: billCost, wantUsage: &switchboardv1.Usage{InputTokens: 1_000_000, CachedInputTokens: 400_000, OutputTokens: 10_000, Reported: true},
			status: switchboardv1.CallStatus_CALL_STATUS_OK, wantClientUsage: true,
		},
		{
			name: "stream without include_usage is billed the same", body: streamBody, usage: &billUsage,
			wantCost: billCost, wantUsage: &switchboardv1.Usage{InputTokens: 1_000_000, CachedInputTokens: 400_000, OutputTokens: 10_000, Reported: true},
			status: switchboardv1.CallStatus_CALL_STATUS_OK,
		},
		{
			name: "capped by max_price", body: streamUsageBody, usage: &billUsage,
			caps:     invoice.Caps{MaxPrice: &switchboardv1.MaxPrice{Prompt: ptr(0.10), Completion: ptr(0.50)}},
			wantCost: 0.06 + 0.02 + 0.005, capped: true,
			wantUsage: &switchboardv1.Usage{InputTokens: 1_000_000, CachedInputTokens: 400_000, OutputTokens: 10_000, Reported: true},
			status:    switchboardv1.CallStatus_CALL_STATUS_OK, wantClientUsage: true,
		},
		{
			name: "capped by max_tokens", body: plainBody, usage: &billUsage,
			caps:     invoice.Caps{MaxOutputTokens: 100},
			wantCost: 0.12 + 0.02 + 100*0.8/1e6, capped: true,
			wantUsage: &switchboardv1.Usage{InputTokens: 1_000_000, CachedInputTokens: 400_000, OutputTokens: 10_000, Reported: true},
			status:    switchboardv1.CallStatus_CALL_STATUS_OK, wantClientUsage: true,
		},
		{
			name: "stream without provider usage: estimate", body: streamUsageBody, usage: nil,
			wantUsage: &switchboardv1.Usage{InputTokens: -1, OutputTokens: delivered},
			status:    switchboardv1.CallStatus_CALL_STATUS_OK, wantClientUsage: true,
		},
		{
			name: "non-stream without provider usage: estimate", body: plainBody, usage: nil,
			wantUsage: &switchboardv1.Usage{InputTokens: -1, OutputTokens: delivered},
			status:    switchboardv1.CallStatus_CALL_STATUS_OK, wantClientUsage: true,
		},
		{
			name: "mid-stream failure: what was delivered", body: streamUsageBody, mode: fakeupstream.DropMidStream, usage: &billUsage,
			wantUsage: &switchboardv1.Usage{InputTokens: -1, OutputTokens: invoice.TextTokens(int64(len(fakeupstream.DeliveredBeforeDrop)))},
			status:    switchboardv1.CallStatus_CALL_STATUS_INTERRUPTED,
		},
		{
			name: "all fail: nothing", body: streamUsageBody, mode: fakeupstream.Unavailable, usage: &billUsage,
			wantUsage: &switchboardv1.Usage{}, status: switchboardv1.CallStatus_CALL_STATUS_FAILED,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := fakeupstream.Start(t)
			up.SetMode(tt.mode)
			up.SetUsage(tt.usage)
			rec := &recorder{}
			d := newDispatcher(rec, nil)
			call := newCall(t, tt.body)
			call.Caps = tt.caps
			w := httptest.NewRecorder()
			err := d.Serve(t.Context(), w, call, []*switchboardv1.Endpoint{billEndpoint("alpha", up.BaseURL())})
			if tt.status == switchboardv1.CallStatus_CALL_STATUS_FAILED {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}

			want := tt.wantUsage
			if want.GetInputTokens() == -1 {
				// An estimate: the edge's prompt estimate, all uncached.
				want.InputTokens = call.PromptTokens
				tt.wantCost = (float64(want.GetInputTokens())*billPrice.GetInput() + float64(want.GetOutputTokens())*billPrice.GetOutput()) / 1e6
			}
			recs := rec.records()
			require.Len(t, recs, 1)
			r := recs[0]
			require.Equal(t, tt.status, r.GetStatus())
			require.InDelta(t, tt.wantCost, r.GetCostUsd(), 1e-12)
			require.InDelta(t, tt.wantCost, r.GetUsage().GetCostUsd(), 1e-12)
			require.Equal(t, tt.capped, r.GetCostCapped())
			require.Equal(t, want.GetInputTokens(), r.GetUsage().GetInputTokens())
			require.Equal(t, want.GetCachedInputTokens(), r.GetUsage().GetCachedInputTokens())
			require.Equal(t, want.GetOutputTokens(), r.GetUsage().GetOutputTokens())
			require.Equal(t, want.GetReported(), r.GetUsage().GetReported())

			if tt.status == switchboardv1.CallStatus_CALL_STATUS_FAILED {
				for _, a := range r.GetAttempts() {
					require.Zero(t, a.GetCostUsd())
				}
				return
			}
			u := usageOf(t, call.Stream, w.Body.String())
			if !tt.wantClientUsage {
				require.Nil(t, u)
				return
			}
			require.NotNil(t, u, w.Body.String())
			require.InDelta(t, tt.wantCost, u["cost"], 1e-12, "usage.cost is the bill")
			require.EqualValues(t, want.GetInputTokens(), u["prompt_tokens"])
			require.EqualValues(t, want.GetOutputTokens(), u["completion_tokens"])
		})
	}
}

func TestServeCompletionID(t *testing.T) {
	for _, body := range []string{streamUsageBody, plainBody} {
		up := fakeupstream.Start(t)
		rec := &recorder{}
		d := newDispatcher(rec, nil)
		call := newCall(t, body)
		call.RequestID = "gen-xyz"
		w := httptest.NewRecorder()
		require.NoError(t, d.Serve(t.Context(), w, call, []*switchboardv1.Endpoint{endpoint("alpha", up.BaseURL())}))
		var got []map[string]any
		if call.Stream {
			got = chunks(t, w.Body.String())
		} else {
			var c map[string]any
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &c))
			got = append(got, c)
		}
		require.NotEmpty(t, got)
		for _, c := range got {
			require.Equal(t, "gen-xyz", c["id"])
			require.Equal(t, "org/model", c["model"])
			require.Equal(t, "alpha", c["provider"])
		}
		require.Equal(t, "gen-xyz", rec.records()[0].GetId())
	}
}

func TestActivityRecord(t *testing.T) {
	t.Run("ok", func(t *testing.T) {
		first, second := fakeupstream.Start(t), fakeupstream.Start(t)
		first.SetMode(fakeupstream.RateLimited)
		rec := &recorder{}
		d := newDispatcher(rec, nil)
		call := newCall(t, streamBody)
		call.APIKeyID = "key-1"
		call.ClientAPI = switchboardv1.ClientApi_CLIENT_API_MESSAGES
		call.Received = time.Now().Add(-time.Millisecond)
		w := httptest.NewRecorder()
		require.NoError(t, d.Serve(t.Context(), w, call, []*switchboardv1.Endpoint{endpoint("a", first.BaseURL()), endpoint("b", second.BaseURL())}))
		r := rec.records()[0]
		require.Equal(t, "gen-1", r.GetId())
		require.Equal(t, call.Received.UnixNano(), r.GetCreateTime().AsTime().UnixNano())
		require.Equal(t, "acme", r.GetTenantId())
		require.Equal(t, "key-1", r.GetApiKeyId())
		require.Equal(t, "org/model", r.GetModel())
		require.Equal(t, "b/m", r.GetEndpointId())
		require.Equal(t, "b", r.GetProvider())
		require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_OK, r.GetStatus())
		require.EqualValues(t, http.StatusOK, r.GetHttpStatus())
		require.True(t, r.GetStream())
		require.Equal(t, switchboardv1.ClientApi_CLIENT_API_MESSAGES, r.GetClientApi())
		require.Empty(t, r.GetError())
		require.Nil(t, r.GetHedge())
		require.NotNil(t, r.GetTtft())
		require.GreaterOrEqual(t, r.GetDuration().AsDuration(), r.GetTtft().AsDuration())
		require.Len(t, r.GetAttempts(), 2)
		a0, a1 := r.GetAttempts()[0], r.GetAttempts()[1]
		require.Equal(t, "a/m", a0.GetEndpointId())
		require.Equal(t, "a", a0.GetProvider())
		require.Equal(t, switchboardv1.Outcome_OUTCOME_RATE_LIMITED, a0.GetOutcome())
		require.EqualValues(t, http.StatusTooManyRequests, a0.GetHttpStatus())
		require.Equal(t, "rate limited (HTTP 429)", a0.GetError())
		require.Zero(t, a0.GetCostUsd())
		require.Nil(t, a0.GetTtft())
		require.False(t, a0.GetStartTime().AsTime().After(a1.GetStartTime().AsTime()))
		require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, a1.GetOutcome())
		require.NotNil(t, a1.GetTtft())
		require.Empty(t, a1.GetError())
		require.InDelta(t, r.GetCostUsd(), a1.GetCostUsd(), 1e-15)
		require.Positive(t, r.GetCostUsd())
	})
	t.Run("failed", func(t *testing.T) {
		up := fakeupstream.Start(t)
		up.SetMode(fakeupstream.Unavailable)
		rec := &recorder{}
		d := newDispatcher(rec, nil)
		w := httptest.NewRecorder()
		err := d.Serve(t.Context(), w, newCall(t, plainBody), []*switchboardv1.Endpoint{endpoint("a", up.BaseURL())})
		var f *Failure
		require.ErrorAs(t, err, &f)
		r := rec.records()[0]
		require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_FAILED, r.GetStatus())
		require.EqualValues(t, f.Status, r.GetHttpStatus())
		require.Equal(t, f.Message, r.GetError())
		require.Empty(t, r.GetEndpointId())
		require.Zero(t, r.GetCostUsd())
		require.Nil(t, r.GetTtft())
		require.Len(t, r.GetAttempts(), 1)
		// The report carries the 503's Retry-After, so the decider can bench
		// the endpoint at least that long.
		require.Equal(t, 3*time.Second, rec.all()[0].GetRetryAfter().AsDuration())
	})
	t.Run("provider rejects the request", func(t *testing.T) {
		up := fakeupstream.Start(t)
		up.SetMode(fakeupstream.BadRequest)
		rec := &recorder{}
		d := newDispatcher(rec, nil)
		err := d.Serve(t.Context(), httptest.NewRecorder(), newCall(t, plainBody), []*switchboardv1.Endpoint{endpoint("a", up.BaseURL())})
		require.Error(t, err)
		r := rec.records()[0]
		require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_FAILED, r.GetStatus())
		require.EqualValues(t, http.StatusBadRequest, r.GetHttpStatus())
		require.Equal(t, fakeupstream.BadRequestText, r.GetError())
	})
	t.Run("interrupted by idle timeout", func(t *testing.T) {
		up := fakeupstream.Start(t)
		up.SetMode(fakeupstream.HangMidStream)
		rec := &recorder{}
		d := newDispatcher(rec, nil)
		w := httptest.NewRecorder()
		require.NoError(t, d.Serve(t.Context(), w, newCall(t, streamBody), []*switchboardv1.Endpoint{endpoint("a", up.BaseURL())}))
		evs := events(t, w.Body.String())
		require.Contains(t, evs[len(evs)-1], "stream_interrupted")
		require.Contains(t, evs[len(evs)-1], "stream idle")
		r := rec.records()[0]
		require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_INTERRUPTED, r.GetStatus())
		require.EqualValues(t, http.StatusOK, r.GetHttpStatus())
		require.Contains(t, r.GetError(), "stream idle")
		require.Equal(t, switchboardv1.Outcome_OUTCOME_TIMEOUT, r.GetAttempts()[0].GetOutcome())
		require.Equal(t, "a/m", r.GetEndpointId())
		require.False(t, r.GetUsage().GetReported())
		require.EqualValues(t, invoice.TextTokens(int64(len(fakeupstream.DeliveredBeforeDrop))), r.GetUsage().GetOutputTokens())
	})
	t.Run("client cancelled before any answer", func(t *testing.T) {
		up := fakeupstream.Start(t)
		up.SetMode(fakeupstream.Hang)
		rec := &recorder{}
		d := newDispatcher(rec, nil)
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			errc <- d.Serve(ctx, httptest.NewRecorder(), newCall(t, streamBody), []*switchboardv1.Endpoint{endpoint("a", up.BaseURL())})
		}()
		<-up.Arrived()
		cancel()
		require.ErrorIs(t, <-errc, ErrClientGone)
		r := rec.records()[0]
		require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_CLIENT_CANCELLED, r.GetStatus())
		require.EqualValues(t, StatusClientClosedRequest, r.GetHttpStatus())
		require.Zero(t, r.GetCostUsd())
		require.Empty(t, r.GetEndpointId())
		require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, r.GetAttempts()[0].GetOutcome())
	})
	t.Run("no endpoint", func(t *testing.T) {
		rec := &recorder{}
		d := newDispatcher(rec, nil)
		require.Error(t, d.Serve(t.Context(), httptest.NewRecorder(), newCall(t, plainBody), nil))
		r := rec.records()[0]
		require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_FAILED, r.GetStatus())
		require.EqualValues(t, http.StatusServiceUnavailable, r.GetHttpStatus())
		require.Empty(t, r.GetAttempts())
	})
}
