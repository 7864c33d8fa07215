package app_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	"github.com/switchboard-ai/switchboard/services/provsim/app"
)

// These tests use only the exported API and the official SDK as the client,
// to prove the simulator is wire-compatible with what the gateway will call.

func start(t *testing.T, models ...app.ModelConfig) *app.Provider {
	t.Helper()
	sim, err := app.Start(t.Context(), app.Config{
		Providers: []app.ProviderConfig{{Name: "sdk", Listen: "127.0.0.1:0", APIKey: "sk-test", Models: models}},
	}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	return sim.Provider("sdk")
}

func sdkClient(t *testing.T, p *app.Provider) openai.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return openai.NewClient(
		option.WithBaseURL(p.URL()+"/"),
		option.WithAPIKey("sk-test"),
		option.WithHTTPClient(&http.Client{Transport: tr}),
		// Retries would hide faults and skew the counters.
		option.WithMaxRetries(0),
	)
}

func TestSDKRoundTrip(t *testing.T) {
	t.Parallel()
	p := start(t, app.ModelConfig{ID: "deepseek-v4.1-flash", Cache: app.CacheConfig{Enabled: true}, TokensPerSecond: 2000})
	client := sdkClient(t, p)
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 120) // ~5.3 kB, >1024 tokens
	prompt := tokens.Prompt([]tokens.Message{{Role: "user", Content: long}})
	blocks := int64((len("user\n") + len(long) + 1) / (128 * tokens.BytesPerToken))
	params := openai.ChatCompletionNewParams{
		Model:     "deepseek-v4.1-flash",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(long)},
		MaxTokens: openai.Int(4),
	}

	tests := []struct {
		name       string
		stream     bool
		wantCached int64
	}{
		{name: "non-stream cold", stream: false, wantCached: 0},
		{name: "non-stream warm", stream: false, wantCached: blocks * 128},
		{name: "stream warm", stream: true, wantCached: blocks * 128},
	}
	for _, tt := range tests {
		var got openai.ChatCompletion
		if tt.stream {
			sp := params
			sp.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			stream := client.Chat.Completions.NewStreaming(t.Context(), sp)
			acc := openai.ChatCompletionAccumulator{}
			chunks := 0
			for stream.Next() {
				require.True(t, acc.AddChunk(stream.Current()), "chunk %d accepted", chunks)
				chunks++
			}
			require.NoError(t, stream.Err(), tt.name)
			require.NoError(t, stream.Close())
			require.Equal(t, 1+4+1+1, chunks, "role, 4 tokens, finish, usage")
			got = acc.ChatCompletion
		} else {
			resp, err := client.Chat.Completions.New(t.Context(), params)
			require.NoError(t, err, tt.name)
			got = *resp
		}
		require.Equal(t, "the quick brown fox ", got.Choices[0].Message.Content, tt.name)
		require.Equal(t, "length", got.Choices[0].FinishReason, tt.name)
		require.Equal(t, "deepseek-v4.1-flash", got.Model)
		require.Equal(t, prompt, got.Usage.PromptTokens, tt.name)
		require.Equal(t, int64(4), got.Usage.CompletionTokens, tt.name)
		require.Equal(t, prompt+4, got.Usage.TotalTokens, tt.name)
		require.Equal(t, tt.wantCached, got.Usage.PromptTokensDetails.CachedTokens, tt.name)
	}

	models, err := client.Models.List(t.Context())
	require.NoError(t, err)
	require.Len(t, models.Data, 1)
	require.Equal(t, "deepseek-v4.1-flash", models.Data[0].ID)

	// The handler counts a call once it has written the answer: the client
	// may have read all of it a moment before.
	require.Eventually(t, func() bool {
		return p.Stats().Models["deepseek-v4.1-flash"].Outcomes == app.Outcomes{OK: 3}
	}, 10*time.Second, time.Millisecond)
	st := p.Stats().Models["deepseek-v4.1-flash"]
	require.Equal(t, app.Outcomes{OK: 3}, st.Outcomes)
	require.Equal(t, 3*prompt, st.PromptTokens)
	require.Equal(t, 2*blocks*128, st.CachedTokens)
	require.Equal(t, int64(12), st.CompletionTokens)
}

func TestSDKFaults(t *testing.T) {
	t.Parallel()
	p := start(t,
		app.ModelConfig{
			ID: "m",
			Faults: []app.FaultConfig{
				{Kind: app.FaultRateLimit, RetryAfter: app.Duration(1500 * time.Millisecond)},
				{Kind: app.FaultUnavailable, Status: 502},
				{Kind: app.FaultDrop, AfterTokens: 2},
			},
			TokensPerSecond: 1000,
		},
		app.ModelConfig{ID: "defaults"},
	)
	client := sdkClient(t, p)
	msg := func(model, text string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{
			Model:     model,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("you are a test"), openai.UserMessage(text)},
			MaxTokens: openai.Int(6),
		}
	}
	apiErr := func(t *testing.T, err error) *openai.Error {
		t.Helper()
		var e *openai.Error
		require.ErrorAs(t, err, &e)
		return e
	}

	tests := []struct {
		name  string
		model string
		text  string
		check func(t *testing.T, params openai.ChatCompletionNewParams)
	}{
		{
			name: "rate_limit answers 429 with Retry-After", model: "m", text: "go [[provsim:fault=rate_limit]]",
			check: func(t *testing.T, params openai.ChatCompletionNewParams) {
				var raw *http.Response
				_, err := client.Chat.Completions.New(t.Context(), params, option.WithResponseInto(&raw))
				e := apiErr(t, err)
				require.Equal(t, 429, e.StatusCode)
				require.Equal(t, "rate_limit_error", e.Type)
				require.Equal(t, "rate_limit_exceeded", e.Code)
				require.Equal(t, "2", e.Response.Header.Get("Retry-After"), "1.5s rounds up")
				require.Equal(t, "1500", e.Response.Header.Get("Retry-After-Ms"))
			},
		},
		{
			name: "unavailable uses the configured status", model: "m", text: "[[provsim:fault=unavailable]]",
			check: func(t *testing.T, params openai.ChatCompletionNewParams) {
				_, err := client.Chat.Completions.New(t.Context(), params)
				require.Equal(t, 502, apiErr(t, err).StatusCode)
			},
		},
		{
			name: "unavailable defaults to 503", model: "defaults", text: "[[provsim:fault=unavailable]]",
			check: func(t *testing.T, params openai.ChatCompletionNewParams) {
				_, err := client.Chat.Completions.New(t.Context(), params)
				e := apiErr(t, err)
				require.Equal(t, 503, e.StatusCode)
				require.Equal(t, "server_error", e.Type)
			},
		},
		{
			name: "spend_limit answers 429 insufficient_quota without Retry-After", model: "defaults", text: "[[provsim:fault=spend_limit]]",
			check: func(t *testing.T, params openai.ChatCompletionNewParams) {
				_, err := client.Chat.Completions.New(t.Context(), params)
				e := apiErr(t, err)
				require.Equal(t, 429, e.StatusCode)
				require.Equal(t, "insufficient_quota", e.Code)
				require.Equal(t, "insufficient_quota", e.Type)
				require.Empty(t, e.Response.Header.Get("Retry-After"), "waiting does not cure a spent quota")
			},
		},
		{
			name: "overloaded answers 529 overloaded_error with Retry-After", model: "defaults", text: "[[provsim:fault=overloaded]]",
			check: func(t *testing.T, params openai.ChatCompletionNewParams) {
				_, err := client.Chat.Completions.New(t.Context(), params)
				e := apiErr(t, err)
				require.Equal(t, 529, e.StatusCode)
				require.Equal(t, "overloaded_error", e.Type)
				require.Equal(t, "1", e.Response.Header.Get("Retry-After"))
			},
		},
		{
			name: "rate_limit fault on a model without it uses 1s", model: "defaults", text: "[[provsim:fault=rate_limit]]",
			check: func(t *testing.T, params openai.ChatCompletionNewParams) {
				_, err := client.Chat.Completions.New(t.Context(), params)
				require.Equal(t, "1", apiErr(t, err).Response.Header.Get("Retry-After"))
			},
		},
		{
			name: "drop mid-stream is an error after some tokens", model: "m", text: "a b c d [[provsim:fault=drop]]",
			check: func(t *testing.T, params openai.ChatCompletionNewParams) {
				stream := client.Chat.Completions.NewStreaming(t.Context(), params)
				var content strings.Builder
				for stream.Next() {
					for _, ch := range stream.Current().Choices {
						content.WriteString(ch.Delta.Content)
					}
				}
				require.Error(t, stream.Err())
				require.NoError(t, stream.Close())
				require.Equal(t, "a b ", content.String())
			},
		},
		{
			name: "drop without stream is an error with no body", model: "m", text: "x [[provsim:fault=drop]]",
			check: func(t *testing.T, params openai.ChatCompletionNewParams) {
				_, err := client.Chat.Completions.New(t.Context(), params)
				require.Error(t, err)
				var e *openai.Error
				require.False(t, errors.As(err, &e), "not an HTTP status: the connection died")
			},
		},
		{
			name: "malformed stream fails to decode", model: "m", text: "[[provsim:fault=malformed]] hi",
			check: func(t *testing.T, params openai.ChatCompletionNewParams) {
				stream := client.Chat.Completions.NewStreaming(t.Context(), params)
				require.False(t, stream.Next())
				require.Error(t, stream.Err())
				require.NoError(t, stream.Close())
			},
		},
		{
			name: "malformed non-stream fails to decode", model: "m", text: "[[provsim:fault=malformed]] hi",
			check: func(t *testing.T, params openai.ChatCompletionNewParams) {
				_, err := client.Chat.Completions.New(t.Context(), params)
				require.Error(t, err)
			},
		},
		{
			name: "hang ends when the client gives up", model: "m", text: "[[provsim:fault=hang]]",
			check: func(t *testing.T, params openai.ChatCompletionNewParams) {
				// The deadline counts from WithTimeout: measured from after
				// it, the wait was seen to be a few µs short of 150 ms.
				start := time.Now()
				ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
				defer cancel()
				_, err := client.Chat.Completions.New(ctx, params)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, msg(tt.model, tt.text))
		})
	}

	// The hang handler notices the client left; counters settle shortly after.
	require.Eventually(t, func() bool {
		return p.Stats().Models["m"].Outcomes.Hang == 1
	}, 5*time.Second, 10*time.Millisecond)
	m := p.Stats().Models["m"]
	require.Equal(t, app.Outcomes{RateLimited: 1, Unavailable: 1, Drop: 2, Malformed: 2, Hang: 1}, m.Outcomes)
	require.Equal(t, int64(2), m.CompletionTokens, "only what the streamed drop sent")
	require.Equal(t, app.Outcomes{RateLimited: 2, Unavailable: 2}, p.Stats().Models["defaults"].Outcomes) // with spend_limit and overloaded
}
