package dispatch

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
	"github.com/switchboard-ai/switchboard/services/edge/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const secret = "sk-test-secret-0123456789"

type recorder struct {
	mu       sync.Mutex
	reports  []*switchboardv1.CallReport
	activity []*switchboardv1.ActivityRecord
}

var _ Reporter = (*recorder)(nil)

func (r *recorder) Report(c *switchboardv1.CallReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, c)
}

func (r *recorder) Activity(a *switchboardv1.ActivityRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.activity = append(r.activity, a)
}

func (r *recorder) all() []*switchboardv1.CallReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*switchboardv1.CallReport(nil), r.reports...)
}

// records returns the activity records so far.
func (r *recorder) records() []*switchboardv1.ActivityRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*switchboardv1.ActivityRecord(nil), r.activity...)
}

func endpoint(provider, baseURL string) *switchboardv1.Endpoint {
	return &switchboardv1.Endpoint{
		Id: provider + "/m", Provider: provider, BaseUrl: baseURL, UpstreamModel: "up-" + provider,
		ApiKeyEnv: "SWITCHBOARD_PROVIDER_KEY_" + strings.ToUpper(provider),
		Price:     &switchboardv1.Price{Input: 1, CachedInput: 0.5, Output: 2},
	}
}

func newDispatcher(rec *recorder, cd *cooldown.Table) *Dispatcher {
	return New(Options{
		Client:    &http.Client{},
		Getenv:    func(string) string { return secret },
		Reporter:  rec,
		Cooldowns: cd,
		// Long enough that a healthy fake provider always answers first on
		// a loaded machine; a hanging one times out.
		FirstTokenTimeout: time.Second,
		IdleTimeout:       time.Second,
		MaxAttempts:       4,
	})
}

func newCall(t *testing.T, body string) Call {
	t.Helper()
	req, err := chatreq.Parse([]byte(body))
	require.NoError(t, err)
	return Call{
		RequestID: "gen-1", Model: "org/model", TenantID: "acme", PromptTokens: req.InputTokens,
		Stream: req.Stream, IncludeUsage: req.IncludeUsage, Body: req.UpstreamBody,
	}
}

const (
	streamBody      = `{"model":"org/model","stream":true,"messages":[{"role":"user","content":"hi"}],"provider":{"sort":"price"}}`
	streamUsageBody = `{"model":"org/model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	plainBody       = `{"model":"org/model","messages":[{"role":"user","content":"hi"}],"provider":{"sort":"price"}}`
)

// events splits an SSE body into its data payloads.
func events(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	for ev := range strings.SplitSeq(strings.TrimSpace(body), "\n\n") {
		require.True(t, strings.HasPrefix(ev, "data: "), "event %q", ev)
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	return out
}

func TestServeSuccess(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantUsage bool
	}{
		{name: "stream", body: streamBody},
		{name: "stream with usage", body: streamUsageBody, wantUsage: true},
		{name: "non-stream", body: plainBody, wantUsage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := fakeupstream.Start(t)
			rec := &recorder{}
			d := newDispatcher(rec, nil)
			call := newCall(t, tt.body)
			w := httptest.NewRecorder()
			require.NoError(t, d.Serve(t.Context(), w, call, []*switchboardv1.Endpoint{endpoint("alpha", up.BaseURL())}))
			require.Equal(t, http.StatusOK, w.Code)
			require.Equal(t, "alpha", w.Header().Get("X-Switchboard-Provider"))

			got := up.Requests()
			require.Len(t, got, 1)
			require.Equal(t, "Bearer "+secret, got[0].Authorization)
			require.Equal(t, "up-alpha", got[0].Body["model"])
			require.NotContains(t, got[0].Body, "provider")

			var content strings.Builder
			var usage map[string]any
			if call.Stream {
				require.Equal(t, "text/event-stream", w.Header().Get("Content-Type"))
				require.Equal(t, "no-cache", w.Header().Get("Cache-Control"))
				require.Equal(t, map[string]any{"include_usage": true}, got[0].Body["stream_options"])
				evs := events(t, w.Body.String())
				require.Equal(t, "[DONE]", evs[len(evs)-1])
				for _, ev := range evs[:len(evs)-1] {
					var c map[string]any
					require.NoError(t, json.Unmarshal([]byte(ev), &c))
					require.Equal(t, "org/model", c["model"])
					require.Equal(t, "alpha", c["provider"])
					choices := c["choices"].([]any)
					if len(choices) == 0 {
						usage = c["usage"].(map[string]any)
						continue
					}
					require.NotContains(t, c, "usage")
					delta := choices[0].(map[string]any)["delta"].(map[string]any)
					if s, ok := delta["content"].(string); ok {
						content.WriteString(s)
					}
				}
			} else {
				var c map[string]any
				require.NoError(t, json.Unmarshal(w.Body.Bytes(), &c))
				require.Equal(t, "org/model", c["model"])
				require.Equal(t, "alpha", c["provider"])
				require.Equal(t, "fp_x", c["system_fingerprint"])
				content.WriteString(c["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string))
				usage = c["usage"].(map[string]any)
			}
			require.Equal(t, fakeupstream.Content, content.String())
			if tt.wantUsage {
				require.NotNil(t, usage)
				require.EqualValues(t, fakeupstream.CachedTokens, usage["prompt_tokens_details"].(map[string]any)["cached_tokens"])
			} else {
				require.Nil(t, usage)
			}

			reps := rec.all()
			require.Len(t, reps, 1)
			r := reps[0]
			require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, r.GetOutcome())
			require.Equal(t, "gen-1", r.GetRequestId())
			require.Equal(t, "alpha/m", r.GetEndpointId())
			require.Equal(t, "acme", r.GetTenantId())
			require.NotNil(t, r.GetTtft())
			require.Positive(t, r.GetDuration().AsDuration())
			require.True(t, r.GetUsage().GetReported())
			require.EqualValues(t, fakeupstream.PromptTokens, r.GetUsage().GetInputTokens())
			require.EqualValues(t, fakeupstream.CachedTokens, r.GetUsage().GetCachedInputTokens())
			require.EqualValues(t, fakeupstream.CompletionTokens, r.GetUsage().GetOutputTokens())
			wantCost := (12*1.0 + 30*0.5 + 2*2.0) / 1e6
			require.InDelta(t, wantCost, r.GetUsage().GetCostUsd(), 1e-12)
		})
	}
}

func TestServeFailover(t *testing.T) {
	tests := []struct {
		name        string
		body        string
		modes       []fakeupstream.Mode
		wantErr     bool
		wantStatus  int
		wantRetry   time.Duration
		wantOutcome []switchboardv1.Outcome
		wantServed  int // index of the provider that answered
	}{
		{
			name: "429 then ok", body: streamBody,
			modes:       []fakeupstream.Mode{fakeupstream.RateLimited, fakeupstream.OK},
			wantOutcome: []switchboardv1.Outcome{switchboardv1.Outcome_OUTCOME_RATE_LIMITED, switchboardv1.Outcome_OUTCOME_OK},
			wantServed:  1,
		},
		{
			name: "503 then ok", body: plainBody,
			modes:       []fakeupstream.Mode{fakeupstream.Unavailable, fakeupstream.OK},
			wantOutcome: []switchboardv1.Outcome{switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, switchboardv1.Outcome_OUTCOME_OK},
			wantServed:  1,
		},
		{
			name: "malformed first chunk then ok", body: streamBody,
			modes:       []fakeupstream.Mode{fakeupstream.MalformedFirstChunk, fakeupstream.OK},
			wantOutcome: []switchboardv1.Outcome{switchboardv1.Outcome_OUTCOME_MALFORMED, switchboardv1.Outcome_OUTCOME_OK},
			wantServed:  1,
		},
		{
			name: "no first token then ok", body: streamBody,
			modes:       []fakeupstream.Mode{fakeupstream.HangAfterHeaders, fakeupstream.OK},
			wantOutcome: []switchboardv1.Outcome{switchboardv1.Outcome_OUTCOME_TIMEOUT, switchboardv1.Outcome_OUTCOME_OK},
			wantServed:  1,
		},
		{
			name: "hang then ok, non-stream", body: plainBody,
			modes:       []fakeupstream.Mode{fakeupstream.Hang, fakeupstream.OK},
			wantOutcome: []switchboardv1.Outcome{switchboardv1.Outcome_OUTCOME_TIMEOUT, switchboardv1.Outcome_OUTCOME_OK},
			wantServed:  1,
		},
		{
			name: "all rate limited", body: streamBody,
			modes:      []fakeupstream.Mode{fakeupstream.RateLimited, fakeupstream.RateLimited},
			wantErr:    true,
			wantStatus: http.StatusTooManyRequests, wantRetry: 7 * time.Second,
			wantOutcome: []switchboardv1.Outcome{switchboardv1.Outcome_OUTCOME_RATE_LIMITED, switchboardv1.Outcome_OUTCOME_RATE_LIMITED},
		},
		{
			name: "all time out", body: streamBody,
			modes:       []fakeupstream.Mode{fakeupstream.Hang, fakeupstream.HangAfterHeaders},
			wantErr:     true,
			wantStatus:  http.StatusGatewayTimeout,
			wantOutcome: []switchboardv1.Outcome{switchboardv1.Outcome_OUTCOME_TIMEOUT, switchboardv1.Outcome_OUTCOME_TIMEOUT},
		},
		{
			name: "all fail", body: plainBody,
			modes:       []fakeupstream.Mode{fakeupstream.RateLimited, fakeupstream.Unavailable},
			wantErr:     true,
			wantStatus:  http.StatusServiceUnavailable, // the last was an overload
			wantRetry:   3 * time.Second,               // the 503's Retry-After, sooner than the 429's
			wantOutcome: []switchboardv1.Outcome{switchboardv1.Outcome_OUTCOME_RATE_LIMITED, switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR},
		},
		{
			name: "400 is not retried", body: plainBody,
			modes:       []fakeupstream.Mode{fakeupstream.BadRequest, fakeupstream.OK},
			wantErr:     true,
			wantStatus:  http.StatusBadRequest,
			wantOutcome: []switchboardv1.Outcome{switchboardv1.Outcome_OUTCOME_CLIENT_ERROR},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var eps []*switchboardv1.Endpoint
			var ups []*fakeupstream.Server
			for i, m := range tt.modes {
				up := fakeupstream.Start(t)
				up.SetMode(m)
				ups = append(ups, up)
				eps = append(eps, endpoint(string(rune('a'+i)), up.BaseURL()))
			}
			rec := &recorder{}
			d := newDispatcher(rec, nil)
			w := httptest.NewRecorder()
			err := d.Serve(t.Context(), w, newCall(t, tt.body), eps)
			var outcomes []switchboardv1.Outcome
			for _, r := range rec.all() {
				outcomes = append(outcomes, r.GetOutcome())
				require.NotContains(t, r.GetError(), secret)
			}
			require.Equal(t, tt.wantOutcome, outcomes)
			if tt.wantErr {
				var f *Failure
				require.ErrorAs(t, err, &f)
				require.Equal(t, tt.wantStatus, f.Status, f.Message)
				require.True(t, f.Final, "every endpoint tried failed the request")
				// The soonest Retry-After, from when it was said.
				require.LessOrEqual(t, f.RetryAfter, tt.wantRetry)
				require.Greater(t, f.RetryAfter, tt.wantRetry-time.Second)
				require.NotContains(t, f.Message, secret)
				require.NotContains(t, f.Message, "127.0.0.1")
				require.Zero(t, w.Body.Len(), "nothing written on failure")
				if tt.wantStatus == http.StatusBadRequest {
					require.Equal(t, fakeupstream.BadRequestText, f.Message)
					require.Empty(t, ups[1].Requests())
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, w.Code)
			require.Equal(t, eps[tt.wantServed].GetProvider(), w.Header().Get("X-Switchboard-Provider"))
			require.Contains(t, w.Body.String(), "world")
		})
	}
}

func TestServeConnectError(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL + "/v1"
	dead.Close()
	up := fakeupstream.Start(t)
	rec := &recorder{}
	d := newDispatcher(rec, nil)
	w := httptest.NewRecorder()
	require.NoError(t, d.Serve(t.Context(), w, newCall(t, plainBody),
		[]*switchboardv1.Endpoint{endpoint("dead", deadURL), endpoint("live", up.BaseURL())}))
	reps := rec.all()
	require.Len(t, reps, 2)
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, reps[0].GetOutcome())
	require.Equal(t, "live", w.Header().Get("X-Switchboard-Provider"))
}

func TestServeMidStreamDrop(t *testing.T) {
	first, second := fakeupstream.Start(t), fakeupstream.Start(t)
	first.SetMode(fakeupstream.DropMidStream)
	rec := &recorder{}
	d := newDispatcher(rec, nil)
	w := httptest.NewRecorder()
	err := d.Serve(t.Context(), w, newCall(t, streamBody),
		[]*switchboardv1.Endpoint{endpoint("a", first.BaseURL()), endpoint("b", second.BaseURL())})
	require.NoError(t, err)
	evs := events(t, w.Body.String())
	require.NotContains(t, evs, "[DONE]")
	last := evs[len(evs)-1]
	var e map[string]map[string]any
	require.NoError(t, json.Unmarshal([]byte(last), &e))
	require.Equal(t, "stream_interrupted", e["error"]["code"])
	require.Equal(t, "upstream_error", e["error"]["type"])
	require.Contains(t, w.Body.String(), "Hello")
	require.Empty(t, second.Requests(), "no retry after bytes reached the client")
	reps := rec.all()
	require.Len(t, reps, 1)
	require.Equal(t, switchboardv1.Outcome_OUTCOME_DROPPED, reps[0].GetOutcome())
	require.NotNil(t, reps[0].GetTtft())
}

func TestPlan(t *testing.T) {
	now := time.Now()
	cd := cooldown.New(func() time.Time { return now })
	cd.Set("b/m", now.Add(time.Minute))
	cd.Set("a/m", now.Add(time.Minute))
	mk := func(names ...string) []*switchboardv1.Endpoint {
		var out []*switchboardv1.Endpoint
		for _, n := range names {
			out = append(out, endpoint(n, "http://x/v1"))
		}
		return out
	}
	tests := []struct {
		name string
		in   []*switchboardv1.Endpoint
		want []string
	}{
		{name: "chosen kept even if cooling, benched fallback tried last", in: mk("a", "b", "c"), want: []string{"a/m", "c/m", "b/m"}},
		{name: "every fallback benched: still fallbacks", in: mk("c", "a", "b"), want: []string{"c/m", "a/m", "b/m"}},
		{name: "the cap cuts benched fallbacks first", in: mk("a", "b", "c", "d", "e"), want: []string{"a/m", "c/m", "d/m", "e/m"}},
		{name: "capped at max attempts", in: mk("c", "d", "e", "f", "g"), want: []string{"c/m", "d/m", "e/m", "f/m"}},
		{name: "duplicates and nils dropped", in: append(mk("c", "c"), nil), want: []string{"c/m"}},
		{name: "empty", in: nil, want: nil},
	}
	d := newDispatcher(&recorder{}, cd)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, ep := range d.plan(tt.in) {
				got = append(got, ep.GetId())
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestProbe(t *testing.T) {
	up := fakeupstream.Start(t)
	rec := &recorder{}
	d := newDispatcher(rec, nil)
	cmd := &switchboardv1.ProbeCommand{
		ProbeId: "p1", Model: "org/model", Endpoint: endpoint("alpha", up.BaseURL()),
		PromptTokens: 20000, MaxOutputTokens: 3,
	}
	require.NoError(t, d.Probe(t.Context(), cmd))
	got := up.Requests()
	require.Len(t, got, 1)
	require.Equal(t, "up-alpha", got[0].Body["model"])
	require.EqualValues(t, 3, got[0].Body["max_tokens"])
	require.Equal(t, true, got[0].Body["stream"], "only a stream shows the first token and the speed after it")
	require.Equal(t, map[string]any{"include_usage": true}, got[0].Body["stream_options"])
	text := got[0].Body["messages"].([]any)[0].(map[string]any)["content"].(string)
	require.EqualValues(t, 20000, tokens.Prompt([]tokens.Message{{Role: "user", Content: text}}))

	reps := rec.all()
	require.Len(t, reps, 1)
	require.Equal(t, "p1", reps[0].GetProbeId())
	require.Empty(t, reps[0].GetTenantId())
	require.Empty(t, reps[0].GetReservationId(), "probes are the operator's: no tenant reservation")
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, reps[0].GetOutcome())
	require.EqualValues(t, 20000, reps[0].GetPromptTokens())
	require.True(t, reps[0].GetStream())
	require.NotNil(t, reps[0].GetTtft(), "the first streamed token")
	require.True(t, reps[0].GetUsage().GetReported(), "the stream's usage chunk")
	require.Positive(t, reps[0].GetUsage().GetOutputTokens())
}
