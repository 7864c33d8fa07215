package tests

import (
	"encoding/json"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/require"
)

// top_k reaches an endpoint whose catalog lists it in supported_parameters
// and is dropped, never an error, for one that does not: OpenAI's chat API
// refuses it. Messages requests (Claude Code sends top_k at times) and chat
// requests alike.
func TestTopKOnlyToEndpointsThatTakeIt(t *testing.T) {
	alpha := &callLog{}
	s := startSystemWith(t, systemOptions{
		baseURL: func(p, u string) string {
			if p == "alpha" {
				return alpha.proxy(t, u)
			}
			return u
		},
		models: `  - id: vendor/topk
    endpoints:
      - {provider: alpha, base_url: %[1]s, upstream_model: %[4]s, api_key_env: SWITCHBOARD_PROVIDER_KEY_ALPHA, supported_parameters: [tools, top_k], price: {input: 0.10, output: 0.50}}`,
	})
	sent := func() map[string]json.RawMessage {
		calls := alpha.all()
		require.NotEmpty(t, calls)
		var body map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(calls[len(calls)-1].body, &body))
		return body
	}
	client := s.anthropicClient(testKey)
	for _, tt := range []struct {
		model string
		takes bool
	}{{model: model}, {model: "vendor/topk", takes: true}} {
		t.Run(tt.model, func(t *testing.T) {
			// The SDK's own params no longer carry top_k or temperature;
			// clients built on older ones, and raw bodies, still send them.
			msg, err := client.Messages.New(t.Context(), anthropic.MessageNewParams{
				Model: anthropic.Model(tt.model), MaxTokens: 4,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
			}, option.WithJSONSet("top_k", 40), option.WithJSONSet("temperature", 0.5))
			require.NoError(t, err)
			require.Equal(t, tt.model, string(msg.Model))
			body := sent()
			require.JSONEq(t, "0.5", string(body["temperature"]), "the other parameters are sent as ever")
			if tt.takes {
				require.JSONEq(t, "40", string(body["top_k"]))
			} else {
				require.NotContains(t, body, "top_k")
			}

			code, _, answer := s.post(t, testKey, `{"model":"`+tt.model+`","top_k":7,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
			require.Equal(t, 200, code, "%v", answer)
			body = sent()
			if tt.takes {
				require.JSONEq(t, "7", string(body["top_k"]))
			} else {
				require.NotContains(t, body, "top_k")
			}
		})
	}
}
