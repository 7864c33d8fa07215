package tests

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
	"github.com/stretchr/testify/require"
)

// anthropicClient is the official Anthropic SDK pointed at the edge, as
// Claude Code is by ANTHROPIC_BASE_URL.
func (s *stack) anthropicClient(key string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(strings.TrimSuffix(s.edge.URL(), "/v1")+"/"), option.WithAPIKey(key),
		option.WithMaxRetries(0))
}

func TestMessagesThroughEdgeWithAnthropicSDK(t *testing.T) {
	s := startSystem(t)
	client := s.anthropicClient(testKey)
	ctx := t.Context()
	prompt := longPrompt(600) + " tell me about routing"
	params := anthropic.MessageNewParams{
		Model: anthropic.Model(model),
		// The simulator writes max_tokens tokens and stops for length.
		MaxTokens: 6,
		System:    []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
	}

	// Non-streaming.
	var httpResp *http.Response
	msg, err := client.Messages.New(ctx, params, option.WithResponseInto(&httpResp))
	require.NoError(t, err)
	reqID := httpResp.Header.Get("X-Request-Id")
	require.Equal(t, reqID, httpResp.Header.Get("Request-Id"))
	require.Equal(t, "msg_"+strings.TrimPrefix(reqID, "gen-"), msg.ID)
	require.True(t, strings.HasPrefix(msg.ID, "msg_"), msg.ID)
	require.Equal(t, model, string(msg.Model))
	require.Len(t, msg.Content, 1)
	require.Equal(t, "text", msg.Content[0].Type)
	require.NotEmpty(t, msg.Content[0].Text)
	require.Equal(t, anthropic.StopReasonMaxTokens, msg.StopReason)
	require.Equal(t, int64(6), msg.Usage.OutputTokens)
	require.Positive(t, msg.Usage.InputTokens)
	require.Zero(t, msg.Usage.CacheReadInputTokens, "first sight of this prompt")
	firstInput := msg.Usage.InputTokens

	// The same prompt again is read from the provider's cache: Anthropic's
	// input_tokens leaves the cached tokens out.
	msg, err = client.Messages.New(ctx, params)
	require.NoError(t, err)
	require.Positive(t, msg.Usage.CacheReadInputTokens)
	require.Equal(t, firstInput, msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens)

	// Streaming: the SDK's accumulator rebuilds the same message.
	stream := client.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		require.NoError(t, acc.Accumulate(ev))
	}
	require.NoError(t, stream.Err())
	require.Equal(t, "message_start", types[0])
	require.Equal(t, "message_stop", types[len(types)-1])
	require.Contains(t, types, "content_block_delta")
	require.Len(t, acc.Content, 1)
	require.NotEmpty(t, acc.Content[0].Text)
	require.Equal(t, anthropic.StopReasonMaxTokens, acc.StopReason)
	require.Equal(t, int64(6), acc.Usage.OutputTokens)
	require.Equal(t, firstInput, acc.Usage.InputTokens+acc.Usage.CacheReadInputTokens)

	// count_tokens answers the edge's own estimate, without max_tokens.
	count, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model:    anthropic.Model(model),
		System:   anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System},
		Messages: params.Messages,
	})
	require.NoError(t, err)
	require.Equal(t, firstInput, count.InputTokens, "the estimate is what the simulator counts")

	// The activity record is the chat pipeline's, and says which API the
	// request came in by.
	rec := s.activityRecord(t, reqID)
	require.Equal(t, "messages", rec.APIType)
	require.Equal(t, model, rec.Model)
	require.Equal(t, "ok", rec.Status)
}

// activityRecord is a request's activity record, as GET /v1/generation
// answers it once the decider has it.
type activityRecord struct {
	APIType string `json:"api_type"`
	Model   string `json:"model"`
	Status  string `json:"status"`
}

// activityRecord waits for the activity record of the request with edge
// request id reqID, and returns it.
func (s *stack) activityRecord(t *testing.T, reqID string) activityRecord {
	t.Helper()
	var rec struct {
		Data activityRecord `json:"data"`
	}
	require.Eventually(t, func() bool {
		status, _, body := s.send(t, testKey, http.MethodGet, "/generation?id="+reqID, "")
		if status != http.StatusOK {
			return false
		}
		require.NoError(t, json.Unmarshal(body, &rec), string(body))
		return true
	}, 20*time.Second, 20*time.Millisecond)
	return rec.Data
}

func TestMessagesToolTurnThroughEdge(t *testing.T) {
	s := startSystem(t)
	client := s.anthropicClient(testKey)
	ctx := t.Context()
	tools := []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "read_file", Description: anthropic.String("reads a file"),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"word": map[string]any{"type": "string"}}}}}}
	// Claude Code's beta path and headers, an unknown beta among them.
	opts := []option.RequestOption{option.WithQuery("beta", "true"),
		option.WithHeader("anthropic-beta", "claude-code-20250219,unknown-beta-2099"),
		option.WithHeader("X-Claude-Code-Session-Id", "3f1e6c2a-9a7e-4a53-a0a5-5f3c4a1c2b10")}
	// The simulator calls the tool a directive names.
	ask := anthropic.NewUserMessage(anthropic.NewTextBlock("open [[provsim:tool=read_file]]"))
	params := anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 2, Tools: tools,
		ToolChoice: anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{}},
		Messages:   []anthropic.MessageParam{ask}}

	msg, err := client.Messages.New(ctx, params, opts...)
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonToolUse, msg.StopReason)
	require.Len(t, msg.Content, 2)
	require.Equal(t, "text", msg.Content[0].Type)
	call := msg.Content[1]
	require.Equal(t, "tool_use", call.Type)
	require.Equal(t, "read_file", call.Name)
	require.NotEmpty(t, call.ID)
	require.JSONEq(t, `{"word":"open"}`, string(call.Input))

	// Streamed, the tool call is a block of its own after the text.
	stream := client.Messages.NewStreaming(ctx, params, opts...)
	var acc anthropic.Message
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.Equal(t, anthropic.StopReasonToolUse, acc.StopReason)
	require.Len(t, acc.Content, 2)
	require.Equal(t, "tool_use", acc.Content[1].Type)
	require.Equal(t, "read_file", acc.Content[1].Name)
	require.JSONEq(t, `{"word":"open"}`, string(acc.Content[1].Input))

	// The tool's result goes back, and the answer is text.
	params.Messages = []anthropic.MessageParam{ask, msg.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.ID, "package main", false), anthropic.NewTextBlock("now explain"))}
	msg, err = client.Messages.New(ctx, params, opts...)
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonMaxTokens, msg.StopReason)
	require.Len(t, msg.Content, 1)
	require.Equal(t, "now explain ", msg.Content[0].Text, "the simulator echoes the last user text")
	require.Equal(t, int64(2), msg.Usage.OutputTokens)
}

func TestMessagesErrorsThroughEdge(t *testing.T) {
	s := startSystem(t)
	ctx := t.Context()
	params := anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 16,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}

	bad := s.anthropicClient("sk-not-a-key")
	_, err := bad.Messages.New(ctx, params)
	var apiErr *anthropic.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
	require.Equal(t, "authentication_error", string(apiErr.Type()))

	params.Model = "vendor/no-such-model"
	good := s.anthropicClient(testKey)
	_, err = good.Messages.New(ctx, params)
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	require.Equal(t, "not_found_error", string(apiErr.Type()))

	// A request the Messages API refuses (no max_tokens), in raw HTTP.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.edge.URL()+"/messages",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("x-api-key", testKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: is required"}}`, string(body))
}

// TestMessagesProviderFailuresThroughEdge: the chat pipeline's refusals and
// failures reach an Anthropic client in its own terms, as its SDK reads them.
func TestMessagesProviderFailuresThroughEdge(t *testing.T) {
	s := startSystem(t)
	client := s.anthropicClient(testKey)
	ctx := t.Context()
	ask := func(text string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 8,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}}
	}

	// Every provider answers 429: a rate_limit_error with retry-after.
	_, err := client.Messages.New(ctx, ask("[[provsim:fault=rate_limit]] hi"))
	var apiErr *anthropic.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
	require.Equal(t, "rate_limit_error", string(apiErr.Type()))
	require.NotEmpty(t, apiErr.Response.Header.Get("Retry-After"))

	// Every provider is overloaded: 529 overloaded_error, which Claude Code retries.
	_, err = client.Messages.New(ctx, ask("[[provsim:fault=overloaded]] hi"))
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, 529, apiErr.StatusCode)
	require.Equal(t, "overloaded_error", string(apiErr.Type()))

	// A stream cut after its first tokens ends with an error event: the
	// SDK reports it, not a complete message.
	requireCutStream(t, client.Messages.NewStreaming(ctx, ask("[[provsim:fault=drop]] one two three four")))
}

// requireCutStream reads a stream cut after its first tokens: it began,
// and ends with an api_error, not a complete message.
func requireCutStream(t *testing.T, stream *ssestream.Stream[anthropic.MessageStreamEventUnion]) {
	t.Helper()
	var types []string
	for stream.Next() {
		types = append(types, stream.Current().Type)
	}
	require.Error(t, stream.Err())
	require.Contains(t, stream.Err().Error(), "api_error")
	require.Contains(t, types, "content_block_delta", "the stream had begun")
	require.NotContains(t, types, "message_stop")
}

// claudeCodeBody is a request shaped as Claude Code sends it: system
// blocks with cache_control, tools with cache_control, thinking,
// context_management, metadata.user_id, a stream.
const claudeCodeBody = `{"model":"` + model + `","max_tokens":4,"stream":true,
 "system":[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Be brief."}],
 "tools":[{"name":"Bash","description":"runs a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}},
  {"name":"Read","description":"reads a file","input_schema":{"type":"object","properties":{"file_path":{"type":"string"}}},"cache_control":{"type":"ephemeral"}}],
 "thinking":{"type":"enabled","budget_tokens":1024},
 "context_management":{"edits":[]},
 "metadata":{"user_id":"user_0123abcd_account__session_3f1e6c2a-9a7e-4a53-a0a5-5f3c4a1c2b10"},
 "messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>ctx</system-reminder>"},{"type":"text","text":"hello world","cache_control":{"type":"ephemeral"}}]}]}`

// TestMessagesClaudeCodeStreamEvents: a Claude Code request, in raw HTTP,
// gets Anthropic's event sequence.
func TestMessagesClaudeCodeStreamEvents(t *testing.T) {
	s := startSystem(t)
	status, header, body := s.send(t, testKey, http.MethodPost, "/messages?beta=true", claudeCodeBody,
		"anthropic-version", "2023-06-01",
		"anthropic-beta", "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27",
		"X-Claude-Code-Session-Id", "3f1e6c2a-9a7e-4a53-a0a5-5f3c4a1c2b10")
	require.Equal(t, http.StatusOK, status, string(body))
	require.Equal(t, "text/event-stream", header.Get("Content-Type"))

	var names []string
	var deltas int
	for _, ev := range sseEvents(t, body) {
		name := ev.name
		if name == "content_block_delta" {
			deltas++
			if deltas > 1 {
				continue
			}
		}
		names = append(names, name)
	}
	require.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}, names)
	require.Equal(t, 4, deltas, "one delta per token")
}

// postMessages sends a Messages request, streamed, with Claude Code's
// session header, and returns the serving provider and the route summary.
func (s *stickySystem) postMessages(t *testing.T, body, session string) (provider, route string) {
	t.Helper()
	provider, route, stream := s.postTo(t, "/messages?beta=true", testKey, body, "X-Claude-Code-Session-Id", session)
	require.Contains(t, stream, "event: message_stop")
	return provider, route
}

// TestMessagesStickyByClaudeCodeSession: X-Claude-Code-Session-Id names a
// Messages conversation as X-Session-Id does: a turn with an unrelated
// prompt stays on the endpoint of the session's first turn.
func TestMessagesStickyByClaudeCodeSession(t *testing.T) {
	s := startSticky(t, "{input: 0.20, cached_input: 0.02, output: 0.80}", "{input: 0.12, cached_input: 0.03, output: 0.80}")
	served := map[string]int64{}
	afterTurn := func(p string) {
		served[p]++
		s.learnt(t, p, served[p])
	}
	// Both are measured (equally fast), so both qualify for the policy.
	for _, p := range []string{"warm", "plain"} {
		got, _ := s.post(t, otherKey, chat("measure-"+p, stickyPromptTokens, `"provider":{"only":["`+p+`"]},`))
		require.Equal(t, p, got)
		afterTurn(p)
	}
	const session = "3f1e6c2a-9a7e-4a53-a0a5-5f3c4a1c2b10"
	p, route := s.postMessages(t, chat("cc-1", stickyPromptTokens, `"provider":{"only":["plain"]},`), session)
	require.Equal(t, "plain", p)
	require.Contains(t, route, "sticky=new")
	p, route = s.postMessages(t, chat("cc-2", stickyPromptTokens, ""), session)
	require.Equal(t, "plain", p, route)
	require.Contains(t, route, "sticky=kept")
	// Another session is another conversation.
	_, route = s.postMessages(t, chat("cc-3", stickyPromptTokens, ""), "another-session")
	require.Contains(t, route, "sticky=new")
}
