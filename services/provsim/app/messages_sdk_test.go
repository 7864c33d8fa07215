package app_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	"github.com/switchboard-ai/switchboard/services/provsim/app"
)

// These tests use Anthropic's official Go SDK as the client: its types are
// the contract for what Anthropic's Messages API sends.

func anthropicClient(t *testing.T, p *app.Provider, opts ...option.RequestOption) anthropic.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	// The SDK appends v1/messages to its base URL; the provider's URL ends
	// in /v1, as a catalog's base_url does.
	return anthropic.NewClient(append([]option.RequestOption{
		option.WithBaseURL(strings.TrimSuffix(p.URL(), "v1")),
		option.WithAPIKey("sk-test"),
		option.WithHTTPClient(&http.Client{Transport: tr}),
		// Retries would hide faults and skew the counters.
		option.WithMaxRetries(0),
	}, opts...)...)
}

// streamed runs params as a stream and accumulates it into a Message,
// checking the order of the events on the way.
func streamed(t *testing.T, client anthropic.Client, params anthropic.MessageNewParams) (anthropic.Message, []string, error) {
	t.Helper()
	stream := client.Messages.NewStreaming(t.Context(), params)
	defer stream.Close()
	var msg anthropic.Message
	var events []string
	for stream.Next() {
		ev := stream.Current()
		events = append(events, ev.Type)
		require.NoError(t, msg.Accumulate(ev))
	}
	return msg, events, stream.Err()
}

var weatherTool = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
	Name:        "get_weather",
	Description: anthropic.String("The weather at a place."),
	InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"place": map[string]any{"type": "string"}}},
}}

func TestMessagesSDKAnswers(t *testing.T) {
	t.Parallel()
	p := start(t, app.ModelConfig{ID: "claude-sim", DefaultOutputTokens: 4, TokensPerSecond: 2000})
	client := anthropicClient(t, p)
	user := func(text string) []anthropic.MessageParam {
		return []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}
	}
	tests := []struct {
		name         string
		params       anthropic.MessageNewParams
		wantBlocks   []string // content block types
		wantText     string
		wantStop     anthropic.StopReason
		wantStopSeq  string
		wantOutput   int64
		wantThinking string
	}{
		{
			name:       "text, natural end",
			params:     anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 1024, Messages: user("hello there")},
			wantBlocks: []string{"text"}, wantText: "hello there hello there ", wantStop: anthropic.StopReasonEndTurn, wantOutput: 4,
		},
		{
			name:       "max_tokens cuts",
			params:     anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 3, Messages: user("hello there")},
			wantBlocks: []string{"text"}, wantText: "hello there hello ", wantStop: anthropic.StopReasonMaxTokens, wantOutput: 3,
		},
		{
			name: "stop sequence",
			params: anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 1024, Messages: user("alpha beta gamma"),
				StopSequences: []string{"gam"}},
			wantBlocks: []string{"text"}, wantText: "alpha beta ", wantStop: anthropic.StopReasonStopSequence, wantStopSeq: "gam", wantOutput: 3,
		},
		{
			name: "tool directive, system blocks",
			params: anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 1024, Tools: []anthropic.ToolUnionParam{weatherTool},
				System:   []anthropic.TextBlockParam{{Text: "You are terse."}},
				Messages: user("weather in Paris [[provsim:tool=get_weather]]")},
			wantBlocks: []string{"text", "tool_use"}, wantText: "weather in Paris weather ", wantStop: anthropic.StopReasonToolUse, wantOutput: 4,
		},
		{
			name: "thinking first",
			params: anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 2048, Messages: user("think hard"),
				Thinking: anthropic.ThinkingConfigParamOfEnabled(1024)},
			wantBlocks: []string{"thinking", "text"}, wantText: "think hard think hard ", wantStop: anthropic.StopReasonEndTurn,
			wantOutput: 8, wantThinking: "think hard think hard ",
		},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			name := tt.name
			if stream {
				name += ", streamed"
			}
			t.Run(name, func(t *testing.T) {
				var msg anthropic.Message
				if stream {
					var events []string
					var err error
					msg, events, err = streamed(t, client, tt.params)
					require.NoError(t, err)
					// The SDK drops ping events; TestMessagesStreamWire sees them.
					require.Equal(t, []string{"message_start", "content_block_start"}, events[:2])
					require.Equal(t, []string{"message_delta", "message_stop"}, events[len(events)-2:])
				} else {
					got, err := client.Messages.New(t.Context(), tt.params)
					require.NoError(t, err)
					msg = *got
				}
				require.True(t, strings.HasPrefix(msg.ID, "msg_"), msg.ID)
				require.Equal(t, "claude-sim", string(msg.Model))
				require.Equal(t, tt.wantStop, msg.StopReason)
				require.Equal(t, tt.wantStopSeq, msg.StopSequence)
				require.Equal(t, tt.wantOutput, msg.Usage.OutputTokens)
				var types []string
				var text string
				for _, b := range msg.Content {
					types = append(types, b.Type)
					switch v := b.AsAny().(type) {
					case anthropic.TextBlock:
						text += v.Text
					case anthropic.ThinkingBlock:
						require.Equal(t, tt.wantThinking, v.Thinking)
						require.NotEmpty(t, v.Signature)
					case anthropic.ToolUseBlock:
						require.Equal(t, "get_weather", v.Name)
						require.True(t, strings.HasPrefix(v.ID, "toolu_"), v.ID)
						var in map[string]string
						require.NoError(t, json.Unmarshal(v.Input, &in))
						require.Equal(t, "weather", in["word"])
					}
				}
				require.Equal(t, tt.wantBlocks, types)
				require.Equal(t, tt.wantText, text)
			})
		}
	}
}

func TestMessagesSDKErrors(t *testing.T) {
	t.Parallel()
	p := start(t, app.ModelConfig{ID: "claude-sim", TokensPerSecond: 2000,
		Refusals: []app.RefusalConfig{{Match: "BROKE", Status: 429, Code: "insufficient_quota"}, {Match: "POISON", Status: 500}}})
	params := anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	with := func(text string) anthropic.MessageNewParams {
		q := params
		q.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}
		return q
	}
	tests := []struct {
		name       string
		client     anthropic.Client
		params     anthropic.MessageNewParams
		wantStatus int
		wantType   string
	}{
		{name: "bad key", client: anthropicClient(t, p, option.WithAPIKey("sk-wrong")), params: params, wantStatus: 401, wantType: "authentication_error"},
		{name: "unknown model", client: anthropicClient(t, p), params: anthropic.MessageNewParams{Model: "nope", MaxTokens: 8, Messages: params.Messages},
			wantStatus: 404, wantType: "not_found_error"},
		{name: "bad thinking budget", client: anthropicClient(t, p),
			params:     anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 8, Messages: params.Messages, Thinking: anthropic.ThinkingConfigParamOfEnabled(1024)},
			wantStatus: 400, wantType: "invalid_request_error"},
		{name: "rate limited", client: anthropicClient(t, p), params: with("[[provsim:fault=rate_limit]]"), wantStatus: 429, wantType: "rate_limit_error"},
		{name: "overloaded", client: anthropicClient(t, p), params: with("[[provsim:fault=overloaded]]"), wantStatus: 529, wantType: "overloaded_error"},
		{name: "unavailable", client: anthropicClient(t, p), params: with("[[provsim:fault=unavailable]]"), wantStatus: 503, wantType: "api_error"},
		{name: "spend limit", client: anthropicClient(t, p), params: with("[[provsim:fault=spend_limit]]"), wantStatus: 402, wantType: "billing_error"},
		{name: "account refusal", client: anthropicClient(t, p), params: with("BROKE"), wantStatus: 402, wantType: "billing_error"},
		{name: "refusal", client: anthropicClient(t, p), params: with("POISON"), wantStatus: 500, wantType: "api_error"},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(tt.name, func(t *testing.T) {
				var err error
				if stream {
					_, _, err = streamed(t, tt.client, tt.params)
				} else {
					_, err = tt.client.Messages.New(t.Context(), tt.params)
				}
				var apiErr *anthropic.Error
				require.True(t, errors.As(err, &apiErr), "%v", err)
				require.Equal(t, tt.wantStatus, apiErr.StatusCode)
				require.Equal(t, tt.wantType, string(apiErr.Type()))
				require.NotEmpty(t, apiErr.Message)
				require.True(t, strings.HasPrefix(apiErr.RequestID, "req_"), apiErr.RequestID)
				if tt.wantStatus == 429 || tt.wantStatus == 529 {
					require.NotEmpty(t, apiErr.Response.Header.Get("Retry-After"))
				}
			})
		}
	}
}

func TestMessagesSDKPromptCache(t *testing.T) {
	t.Parallel()
	p := start(t, app.ModelConfig{ID: "claude-sim", DefaultOutputTokens: 2, TokensPerSecond: 2000, Cache: app.CacheConfig{Enabled: true}})
	client := anthropicClient(t, p)
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 120) // > 1024 tokens
	ephemeral := func(ttl anthropic.CacheControlEphemeralTTL) anthropic.CacheControlEphemeralParam {
		cc := anthropic.NewCacheControlEphemeralParam()
		cc.TTL = ttl
		return cc
	}
	userText := func(text string, cached bool) anthropic.MessageParam {
		b := anthropic.TextBlockParam{Text: text}
		if cached {
			b.CacheControl = ephemeral("")
		}
		return anthropic.NewUserMessage(anthropic.ContentBlockParamUnion{OfText: &b})
	}
	system := func(ttl anthropic.CacheControlEphemeralTTL) []anthropic.TextBlockParam {
		return []anthropic.TextBlockParam{{Text: long, CacheControl: ephemeral(ttl)}}
	}
	// The rule of pkg/tokens on the prompt in chat form, system first.
	prompt := func(msgs ...tokens.Message) int64 { return tokens.Prompt(msgs) }
	sys := tokens.Message{Role: "system", Content: long}
	u1 := tokens.Message{Role: "user", Content: "first question"}
	a1 := tokens.Message{Role: "assistant", Content: "an answer"}
	u2 := tokens.Message{Role: "user", Content: "second question"}

	type usage struct{ input, read, create5m, create1h int64 }
	tests := []struct {
		name   string
		stream bool
		params anthropic.MessageNewParams
		want   usage
	}{
		{
			name:   "short prefix is never cached",
			params: anthropic.MessageNewParams{System: []anthropic.TextBlockParam{{Text: "short", CacheControl: ephemeral("")}}, Messages: []anthropic.MessageParam{userText("first question", false)}},
			want:   usage{input: prompt(tokens.Message{Role: "system", Content: "short"}, u1)},
		},
		{
			name:   "cold: the system prefix is written for 1h",
			params: anthropic.MessageNewParams{System: system(anthropic.CacheControlEphemeralTTLTTL1h), Messages: []anthropic.MessageParam{userText("first question", false)}},
			want:   usage{input: prompt(sys, u1) - prompt(sys), create1h: prompt(sys)},
		},
		{
			name:   "warm: the system prefix is read, and the first turn written",
			stream: true,
			params: anthropic.MessageNewParams{System: system(""), Messages: []anthropic.MessageParam{userText("first question", true)}},
			want:   usage{read: prompt(sys), create5m: prompt(sys, u1) - prompt(sys)},
		},
		{
			name: "next turn: the earlier breakpoint is found behind the new one",
			params: anthropic.MessageNewParams{System: system(""), Messages: []anthropic.MessageParam{
				userText("first question", false), anthropic.NewAssistantMessage(anthropic.NewTextBlock("an answer")), userText("second question", true),
			}},
			want: usage{read: prompt(sys, u1), create5m: prompt(sys, u1, a1, u2) - prompt(sys, u1)},
		},
	}
	var wantReads, wantWrites int64
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.params.Model, tt.params.MaxTokens = "claude-sim", 1024
			var msg anthropic.Message
			if tt.stream {
				var err error
				msg, _, err = streamed(t, client, tt.params)
				require.NoError(t, err)
			} else {
				got, err := client.Messages.New(t.Context(), tt.params)
				require.NoError(t, err)
				msg = *got
			}
			u := msg.Usage
			require.Equal(t, tt.want, usage{u.InputTokens, u.CacheReadInputTokens, u.CacheCreation.Ephemeral5mInputTokens, u.CacheCreation.Ephemeral1hInputTokens})
			require.Equal(t, tt.want.create5m+tt.want.create1h, u.CacheCreationInputTokens)
			wantReads += tt.want.read
			wantWrites += tt.want.create5m + tt.want.create1h
		})
	}
	st := p.Stats()
	require.Equal(t, int64(len(tests)), st.Messages)
	require.Equal(t, wantReads, st.Models["claude-sim"].CachedTokens)
	require.Equal(t, wantWrites, st.Models["claude-sim"].CacheWriteTokens)
}

func TestMessagesSDKErrorMidStream(t *testing.T) {
	t.Parallel()
	p := start(t, app.ModelConfig{ID: "claude-sim", TokensPerSecond: 2000})
	msg, _, err := streamed(t, anthropicClient(t, p), anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("one two [[provsim:fault=stream_error]]"))}})
	var apiErr *anthropic.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, "overloaded_error", string(apiErr.Type()))
	require.Equal(t, "one two one ", msg.Content[0].Text, "the tokens before the error arrived")
}
