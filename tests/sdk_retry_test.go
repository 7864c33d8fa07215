package tests

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	edgeapp "github.com/switchboard-ai/switchboard/services/edge/app"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// These tests drive the edge with the official SDKs at their default
// settings (two retries, the SDKs' own back-off) and count, from outside,
// the HTTP calls each SDK call became and the provider calls behind them.

// httpLog counts an SDK client's HTTP calls to the edge and keeps each
// answer's status and headers; onAnswer, when set, sees each answer first.
type httpLog struct {
	mu       sync.Mutex
	answers  []answer
	onAnswer func(status int, h http.Header)
}

// client is an http.Client whose calls the log records.
func (l *httpLog) client() *http.Client {
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		l.answers = append(l.answers, answer{status: resp.StatusCode, header: resp.Header.Clone()})
		hook := l.onAnswer
		l.mu.Unlock()
		if hook != nil {
			hook(resp.StatusCode, resp.Header)
		}
		return resp, nil
	})}
}

func (l *httpLog) all() []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]answer(nil), l.answers...)
}

// sdkCall makes one call with an official SDK at its default retries,
// through hc, for prompt; only, when set, pins the request to those
// providers (the provider.only routing option). It returns the HTTP status
// of the error the SDK gave up with, 0 on success.
type sdkCall func(t *testing.T, edgeURL string, hc *http.Client, modelID, prompt string, only []string) int

// sdkCalls are the SDKs under test: openai-go's chat completions and
// anthropic-sdk-go's Messages, both as a user builds them.
var sdkCalls = []struct {
	name string
	call sdkCall
}{
	{name: "openai-go chat completions", call: openAIChat},
	{name: "anthropic-sdk-go messages", call: anthropicMessages},
}

// sdkCallTimeout bounds one SDK call with its retries: an SDK waiting out a
// Retry-After of minutes would otherwise hold the test that long.
const sdkCallTimeout = 45 * time.Second

func openAIChat(t *testing.T, edgeURL string, hc *http.Client, modelID, prompt string, only []string) int {
	t.Helper()
	opts := []option.RequestOption{option.WithBaseURL(edgeURL + "/"), option.WithAPIKey(testKey), option.WithHTTPClient(hc)}
	if only != nil {
		opts = append(opts, option.WithJSONSet("provider", map[string]any{"only": only}))
	}
	ctx, cancel := context.WithTimeout(t.Context(), sdkCallTimeout)
	defer cancel()
	client := openai.NewClient(opts...)
	_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     modelID,
		MaxTokens: openai.Int(4),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	if err == nil {
		return 0
	}
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr, "the SDK gave up with the edge's answer, not a timeout of its own")
	return apiErr.StatusCode
}

func anthropicMessages(t *testing.T, edgeURL string, hc *http.Client, modelID, prompt string, only []string) int {
	t.Helper()
	opts := []anthropicoption.RequestOption{anthropicoption.WithBaseURL(strings.TrimSuffix(edgeURL, "/v1") + "/"),
		anthropicoption.WithAPIKey(testKey), anthropicoption.WithHTTPClient(hc)}
	if only != nil {
		opts = append(opts, anthropicoption.WithJSONSet("provider", map[string]any{"only": only}))
	}
	ctx, cancel := context.WithTimeout(t.Context(), sdkCallTimeout)
	defer cancel()
	client := anthropic.NewClient(opts...)
	_, err := client.Messages.New(ctx, anthropic.MessageNewParams{
		Model:     anthropic.Model(modelID),
		MaxTokens: 4,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
	})
	if err == nil {
		return 0
	}
	var apiErr *anthropic.Error
	require.True(t, errors.As(err, &apiErr), "the SDK gave up with the edge's answer, not a timeout of its own: %v", err)
	return apiErr.StatusCode
}

// retryAfterSeconds is an answer's Retry-After in seconds, -1 when absent.
func retryAfterSeconds(t *testing.T, h http.Header) int {
	t.Helper()
	v := h.Get("Retry-After")
	if v == "" {
		return -1
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "Retry-After in whole seconds: %q", v)
	return n
}

// TestSDKRetriesDoNotMultiplyProviderCalls: an SDK call the edge cannot
// serve becomes one HTTP call, and never more provider calls than the
// edge's own attempt limit, whether every provider fails it, its only
// provider is paused for minutes, the tenant's hourly limit is spent or
// the model does not exist. Each answer says x-should-retry: false, which
// both SDKs obey over their status-based default.
func TestSDKRetriesDoNotMultiplyProviderCalls(t *testing.T) {
	tests := []struct {
		name string
		// tenantLimits are the tenant's limits in the catalog.
		tenantLimits string
		// prepare runs before the SDK call, on a fresh system.
		prepare func(t *testing.T, l *stack)
		model   string
		prompt  string
		only    []string
		status  []int
		// minRetryAfter is the least Retry-After the answer must carry (in
		// seconds), 0 for none required.
		minRetryAfter int
	}{
		{name: "every provider unavailable", prompt: "[[provsim:fault=unavailable]] hi",
			status: []int{http.StatusServiceUnavailable, anthropicOverloaded, http.StatusBadGateway}},
		{name: "every provider rate limited", prompt: "[[provsim:fault=rate_limit]] hi",
			status: []int{http.StatusTooManyRequests}},
		{name: "every provider overloaded", prompt: "[[provsim:fault=overloaded]] hi",
			status: []int{http.StatusServiceUnavailable, anthropicOverloaded}},
		{name: "only provider answers 429 with a long Retry-After", prompt: "hi", only: []string{"alpha"},
			prepare: func(t *testing.T, l *stack) {
				require.NoError(t, l.sim.Provider("alpha").SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8,
					Faults: []provsim.FaultConfig{{Kind: provsim.FaultRateLimit, Rate: 1, RetryAfter: provsim.Duration(589 * time.Second)}}}))
			},
			status: []int{http.StatusTooManyRequests}, minRetryAfter: 500},
		{name: "only provider paused for minutes", prompt: "hi", only: []string{"alpha"},
			prepare: func(t *testing.T, l *stack) {
				require.NoError(t, l.sim.Provider("alpha").SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8,
					Faults: []provsim.FaultConfig{{Kind: provsim.FaultRateLimit, Rate: 1, RetryAfter: provsim.Duration(589 * time.Second)}}}))
				code, _, body := l.post(t, testKey, `{"model":"`+model+`","max_tokens":4,"provider":{"only":["alpha"]},"messages":[{"role":"user","content":"hi"}]}`)
				require.Equal(t, http.StatusTooManyRequests, code, "%v", body)
				require.Eventually(t, func() bool {
					code, h, _ := l.post(t, testKey, `{"model":"`+model+`","max_tokens":4,"provider":{"only":["alpha"]},"messages":[{"role":"user","content":"hi"}]}`)
					return code == http.StatusTooManyRequests && h.Get("X-Switchboard-Reason") == "provider_paused"
				}, waitFor, tick, "the decider pauses alpha")
			},
			status: []int{http.StatusTooManyRequests}, minRetryAfter: 500},
		{name: "tenant hourly limit spent", tenantLimits: `{unit: requests, per: hour, capacity: 1}`, prompt: "hi",
			prepare: func(t *testing.T, l *stack) {
				code, _, body := l.ask(t, testKey, 10)
				require.Equal(t, http.StatusOK, code, "%v", body)
			},
			status: []int{http.StatusTooManyRequests}, minRetryAfter: 61},
		{name: "unknown model", model: "vendor/no-such-model", prompt: "hi", status: []int{http.StatusNotFound}},
	}
	for _, tt := range tests {
		for _, sdk := range sdkCalls {
			t.Run(tt.name+"/"+sdk.name, func(t *testing.T) {
				// Each case has a system of its own: they run side by side,
				// as many at once as go test's -parallel lets.
				t.Parallel()
				l := startLimited(t, tt.tenantLimits, ``, nil, "--report-flush-interval=20ms")
				if tt.prepare != nil {
					tt.prepare(t, l)
				}
				modelID := model
				if tt.model != "" {
					modelID = tt.model
				}
				before := providerCalls(l, simModel)
				var log httpLog
				status := sdk.call(t, l.edge.URL(), log.client(), modelID, tt.prompt, tt.only)
				answers := log.all()
				require.Contains(t, tt.status, status)
				require.Len(t, answers, 1, "one SDK call, one HTTP call: %v", answers)
				h := answers[0].header
				require.Equal(t, "false", h.Get("X-Should-Retry"))
				calls := providerCalls(l, simModel) - before
				t.Logf("%d HTTP call, %d provider calls, status %d, Retry-After %q", len(answers), calls, status, h.Get("Retry-After"))
				require.LessOrEqual(t, calls, int64(edgeapp.DefaultMaxAttempts), "no more provider calls than the edge's own attempts")
				if tt.minRetryAfter > 0 {
					require.GreaterOrEqual(t, retryAfterSeconds(t, h), tt.minRetryAfter, "%v", h)
				}
			})
		}
	}
}

// anthropicOverloaded is the Messages API's status for an overloaded
// service, its SDKs' name for a 503.
const anthropicOverloaded = 529

// TestSDKRetriesWhenARetryHelps: a request refused because its only
// provider is paused for a moment (its 429's Retry-After of a few seconds)
// says so — Retry-After, retry-after-ms and x-should-retry: true — and the
// SDK waits that long, retries once and is served. The decider runs on a
// frozen clock that the test moves past the pause when the refusal
// arrives, so the retry is served whatever the machine's speed.
func TestSDKRetriesWhenARetryHelps(t *testing.T) {
	const pause = 2 * time.Second
	const pinned = `{"model":"` + model + `","max_tokens":4,"provider":{"only":["alpha"]},"messages":[{"role":"user","content":"hi"}]}`
	for _, sdk := range sdkCalls {
		t.Run(sdk.name, func(t *testing.T) {
			// Each SDK has a system and a clock of its own.
			t.Parallel()
			clock := &fakeClock{}
			l := startLimited(t, ``, ``, frozen(clock), "--report-flush-interval=20ms")
			alpha := l.sim.Provider("alpha")
			require.NoError(t, alpha.SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8,
				Faults: []provsim.FaultConfig{{Kind: provsim.FaultRateLimit, Rate: 1, RetryAfter: provsim.Duration(pause)}}}))
			code, _, body := l.post(t, testKey, pinned)
			require.Equal(t, http.StatusTooManyRequests, code, "%v", body)
			require.NoError(t, alpha.SetModel(provsim.ModelConfig{ID: simModel, DefaultOutputTokens: 8}))
			require.Eventually(t, func() bool {
				code, h, _ := l.post(t, testKey, pinned)
				return code == http.StatusTooManyRequests && h.Get("X-Switchboard-Reason") == "provider_paused"
			}, waitFor, tick, "the decider pauses alpha")

			before := alpha.Stats().Requests
			log := httpLog{onAnswer: func(status int, _ http.Header) {
				if status != http.StatusOK {
					clock.Advance(2 * pause)
				}
			}}
			began := time.Now()
			require.Zero(t, sdk.call(t, l.edge.URL(), log.client(), model, "hi", []string{"alpha"}), "served on the retry")
			answers := log.all()
			require.Len(t, answers, 2, "refused once, then served: %v", answers)
			h := answers[0].header
			require.Equal(t, "true", h.Get("X-Should-Retry"))
			wait := retryAfterSeconds(t, h)
			require.Positive(t, wait)
			require.LessOrEqual(t, wait, int(pause/time.Second)+1, "the pause, and its jitter of at most 10%")
			ms, err := strconv.Atoi(h.Get("Retry-After-Ms"))
			require.NoError(t, err, "retry-after-ms: %v", h)
			require.Positive(t, ms)
			require.LessOrEqual(t, ms, wait*1000)
			require.GreaterOrEqual(t, time.Since(began), time.Duration(ms)*time.Millisecond, "the SDK waited what the edge said")
			require.Equal(t, http.StatusOK, answers[1].status)
			require.Equal(t, before+1, alpha.Stats().Requests, "the refusal reached no provider; the retry did")
		})
	}
}
