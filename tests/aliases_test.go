package tests

import (
	"net/http"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// coderModel is a second catalog model, sold by gamma only, that the
// coding agents' own model names are aliases of.
const coderModel = "vendor/coder"

const coderYAML = `  - id: ` + coderModel + `
    aliases: [claude-sonnet-4-5, "claude-sonnet-4-5-*", gpt-5-codex]
    endpoints:
      - {provider: gamma, base_url: %[3]s, upstream_model: %[4]s, price: {input: 0.25, cached_input: 0.10, output: 0.70}}`

// startAliasSystem starts a system whose model also answers "gpt-5*", and
// whose coder model answers Claude Code's and Codex's default names.
func startAliasSystem(t *testing.T) *stack {
	t.Helper()
	return startSystemWith(t, systemOptions{modelYAML: `    aliases: ["gpt-5*"]`, models: coderYAML},
		"--report-flush-interval=20ms")
}

func TestMessagesForAnAgentsModelNameServedByItsAlias(t *testing.T) {
	s := startAliasSystem(t)
	client := s.anthropicClient(testKey)
	params := anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5-20250929", // what Claude Code sends by default
		MaxTokens: 6,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
	}
	var httpResp *http.Response
	msg, err := client.Messages.New(t.Context(), params, option.WithResponseInto(&httpResp))
	require.NoError(t, err)
	require.Equal(t, coderModel, string(msg.Model), "the answer names the model that served it")
	require.Equal(t, "gamma", httpResp.Header.Get("X-Switchboard-Provider"), "the coder model's only endpoint")
	require.NotEmpty(t, msg.Content)

	rec := s.record(t, testKey, httpResp.Header.Get("X-Request-Id"))
	require.Equal(t, coderModel, rec.GetModel())
	require.Equal(t, "claude-sonnet-4-5-20250929", rec.GetRequestedModel())
	require.Equal(t, "gamma/"+coderModel, rec.GetEndpointId())

	stream := client.Messages.NewStreaming(t.Context(), params)
	var acc anthropic.Message
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.Equal(t, coderModel, string(acc.Model))
	require.NotEmpty(t, acc.Content)

	// A name no model claims is still an unknown model.
	params.Model = "claude-opus-4-1-20250805"
	_, err = client.Messages.New(t.Context(), params)
	var aerr *anthropic.Error
	require.ErrorAs(t, err, &aerr)
	require.Equal(t, http.StatusNotFound, aerr.StatusCode)
}

func TestChatForAnAliasServedByTheAliasedModel(t *testing.T) {
	s := startAliasSystem(t)
	client := s.client()
	tests := []struct {
		asked, served, provider string
	}{
		{asked: "gpt-5-codex", served: coderModel, provider: "gamma"}, // an exact alias wins over the other model's pattern
		{asked: "gpt-5-mini", served: model, provider: "alpha"},       // the pattern: alpha is that model's cheapest
		{asked: model, served: model, provider: "alpha"},
	}
	for _, tt := range tests {
		t.Run(tt.asked, func(t *testing.T) {
			resp, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
				Model:    tt.asked,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
			})
			require.NoError(t, err)
			require.Equal(t, tt.served, resp.Model)
			require.Equal(t, `"`+tt.provider+`"`, resp.JSON.ExtraFields["provider"].Raw())
			rec := s.record(t, testKey, resp.ID)
			require.Equal(t, tt.served, rec.GetModel())
			if tt.asked != tt.served {
				require.Equal(t, tt.asked, rec.GetRequestedModel())
			} else {
				require.Empty(t, rec.GetRequestedModel())
			}
		})
	}

	// The listed models: each id, then each exact alias; a pattern is no
	// model a client could pick.
	page, err := client.Models.List(t.Context())
	require.NoError(t, err)
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	require.Equal(t, []string{coderModel, model, "claude-sonnet-4-5", "gpt-5-codex"}, ids)
	m, err := client.Models.Get(t.Context(), "claude-sonnet-4-5-20250929")
	require.NoError(t, err)
	require.Equal(t, "claude-sonnet-4-5-20250929", m.ID)
	require.Equal(t, `"`+coderModel+`"`, m.JSON.ExtraFields["alias_of"].Raw())
}

// The catalog `make run` serves answers the names Claude Code and Codex
// CLI ask for by default.
func TestLocalCatalogAnswersCodingAgentsNames(t *testing.T) {
	raw, err := os.ReadFile("../deploy/local/catalog.yaml")
	require.NoError(t, err)
	// run.sh puts a different key's or token's digest in each placeholder.
	n := 0
	yaml := regexp.MustCompile(`@[A-Z_]+_SHA256@`).ReplaceAllStringFunc(string(raw), func(string) string {
		n++
		return catalog.HashKey(strconv.Itoa(n))
	})
	c, err := catalog.Parse([]byte(yaml))
	require.NoError(t, err)
	names := c.Resolver()
	for _, asked := range []string{"claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001", "claude-opus-4-1-20250805",
		"claude-3-5-haiku-20241022", "gpt-5-codex", "gpt-5", "codex-mini-latest"} {
		id, ok := names.Resolve(asked)
		require.True(t, ok, asked)
		require.Equal(t, "deepseek/deepseek-v4.1-flash", id, asked)
	}
}
