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
	p := start(t, app.ModelConfig{ID: "claude-sim", TokensPerSecond: 2000})
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
