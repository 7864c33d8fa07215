package responses

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestToChatCodexRequest: what Codex CLI sends on every turn besides its
// function tools (client_metadata, a namespace of sub-agent tools, a web
// search tool) is accepted and not passed on; its function tools are.
func TestToChatCodexRequest(t *testing.T) {
	in := `{"model":"m","stream":true,"store":false,"tool_choice":"auto","parallel_tool_calls":true,
		"reasoning":{"summary":"auto"},"include":["reasoning.encrypted_content"],"prompt_cache_key":"01a2-thread",
		"client_metadata":{"x-codex-installation-id":"i","x-codex-turn-metadata":"{\"turn_id\":\"t\"}"},
		"tools":[{"type":"function","name":"exec_command","description":"Runs a command","strict":false,
			"parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}},
		{"type":"namespace","name":"multi_agent_v1","description":"Sub-agents","tools":[{"type":"function","name":"close_agent",
			"parameters":{"type":"object","properties":{}}}]},
		{"type":"web_search","external_web_access":true}],
		"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]}`
	out, req, err := ToChat([]byte(in))
	require.NoError(t, err)
	require.Equal(t, "01a2-thread", req.PromptCacheKey)
	require.NotContains(t, string(out), "client_metadata")
	require.NotContains(t, string(out), "multi_agent_v1")
	require.NotContains(t, string(out), "close_agent")
	require.Contains(t, string(out), `"tools":[{"type":"function","function":{"name":"exec_command","description":"Runs a command"`)
}
