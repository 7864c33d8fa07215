package httpapi

import (
	"testing"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
)

// TestStandbyKey: requests the decider could route differently have
// different keys; those that differ only in what steers towards a warm
// prompt cache share one.
func TestStandbyKey(t *testing.T) {
	base := func() *chatRequest {
		return &chatRequest{
			keyHash:  "h1",
			identity: &switchboardv1.Identity{ApiKeySha256: "h1", App: "chat"},
			api:      switchboardv1.ClientApi_CLIENT_API_CHAT_COMPLETIONS,
			req: &chatreq.Request{Model: "m", InputTokens: 100, MaxOutputTokens: 64, Parameters: []string{"tools", "top_p"},
				Prefixes: []*switchboardv1.PromptPrefix{{Hash: 1, Tokens: 10}}},
		}
	}
	key := standbyKey(base(), "m")
	tests := []struct {
		name   string
		change func(c *chatRequest) string
		same   bool
	}{
		{name: "the same request", change: func(c *chatRequest) string { return standbyKey(c, "m") }, same: true},
		{name: "parameters in another order", same: true, change: func(c *chatRequest) string {
			c.req.Parameters = []string{"top_p", "tools"}
			return standbyKey(c, "m")
		}},
		{name: "other prefixes and session", same: true, change: func(c *chatRequest) string {
			c.req.Prefixes, c.session = nil, "conv-1"
			return standbyKey(c, "m")
		}},
		{name: "a prompt of the same size bucket", same: true, change: func(c *chatRequest) string {
			c.req.InputTokens = 101
			return standbyKey(c, "m")
		}},
		{name: "another model", change: func(c *chatRequest) string { return standbyKey(c, "m2") }},
		{name: "another API key", change: func(c *chatRequest) string {
			c.identity.ApiKeySha256 = "h2"
			return standbyKey(c, "m")
		}},
		{name: "another app", change: func(c *chatRequest) string {
			c.identity.App = "batch"
			return standbyKey(c, "m")
		}},
		{name: "another workload class", change: func(c *chatRequest) string {
			c.identity.WorkloadClass = switchboardv1.WorkloadClass_WORKLOAD_CLASS_BATCH
			return standbyKey(c, "m")
		}},
		{name: "another size bucket", change: func(c *chatRequest) string {
			c.req.InputTokens = 100_000
			return standbyKey(c, "m")
		}},
		{name: "another max_tokens", change: func(c *chatRequest) string {
			c.req.MaxOutputTokens = 65
			return standbyKey(c, "m")
		}},
		{name: "streamed", change: func(c *chatRequest) string {
			c.req.Stream = true
			return standbyKey(c, "m")
		}},
		{name: "another API", change: func(c *chatRequest) string {
			c.api = switchboardv1.ClientApi_CLIENT_API_MESSAGES
			return standbyKey(c, "m")
		}},
		{name: "other parameters", change: func(c *chatRequest) string {
			c.req.Parameters = []string{"tools"}
			return standbyKey(c, "m")
		}},
		{name: "provider options", change: func(c *chatRequest) string {
			c.req.Provider = &switchboardv1.ProviderPreferences{Only: []string{"alpha"}}
			return standbyKey(c, "m")
		}},
		{name: "cache writes", change: func(c *chatRequest) string {
			c.cacheWrite = 10
			return standbyKey(c, "m")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.change(base())
			if tt.same {
				require.Equal(t, key, got)
			} else {
				require.NotEqual(t, key, got)
			}
		})
	}
}
