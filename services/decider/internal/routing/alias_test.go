package routing

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestDecideByAlias(t *testing.T) {
	yaml := strings.Replace(strings.Replace(testCatalog,
		"  - id: vendor/model\n", "  - id: vendor/model\n    aliases: [gpt-5-codex, \"claude-sonnet-4-5*\"]\n", 1),
		"@KEYHASH@", keyA, 1)
	// A tenant routed by price: its own setting applies to the model an
	// alias names.
	yaml += "    routing: {sort: price}\n"
	c, err := catalog.Parse([]byte(yaml))
	require.NoError(t, err)
	r := New(c, Options{Exploration: -1})
	id := &switchboardv1.Identity{TenantId: "acme"}
	tok := &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 100}

	byID, err := r.Decide(&switchboardv1.DecideRequest{Model: "vendor/model", Tokens: tok}, id)
	require.NoError(t, err)
	for _, asked := range []string{"gpt-5-codex", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5:floor"} {
		t.Run(asked, func(t *testing.T) {
			resp, err := r.Decide(&switchboardv1.DecideRequest{Model: asked, Tokens: tok}, id)
			require.NoError(t, err)
			require.Equal(t, "vendor/model", resp.GetModel(), "the decision names the catalog id")
			require.Equal(t, order(byID), order(resp))
			require.Equal(t, "alpha/vendor/model", resp.GetEndpoint().GetId())
		})
	}
	_, err = r.Decide(&switchboardv1.DecideRequest{Model: "claude-opus-4-1", Tokens: tok}, id)
	var re *Error
	require.ErrorAs(t, err, &re)
	require.Equal(t, KindNotFound, re.Kind)
	require.ErrorContains(t, err, `model "claude-opus-4-1" does not exist`)

	got, ok := r.Resolve("claude-sonnet-4-5")
	require.True(t, ok)
	require.Equal(t, "vendor/model", got)
	require.Equal(t, []string{"gpt-5-codex", "claude-sonnet-4-5*"}, r.ListModels()[0].GetAliases())
}

func TestDecisionCarriesSupportedParameters(t *testing.T) {
	r := newTestRouter(t)
	resp, err := r.Decide(&switchboardv1.DecideRequest{Model: "vendor/model",
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 100}}, &switchboardv1.Identity{TenantId: "acme"})
	require.NoError(t, err)
	params := map[string][]string{resp.GetEndpoint().GetProvider(): resp.GetEndpoint().GetSupportedParameters()}
	for _, f := range resp.GetFallbacks() {
		params[f.GetProvider()] = f.GetSupportedParameters()
	}
	require.Equal(t, map[string][]string{"alpha": nil, "beta": {"tools", "response_format"}, "gamma": {"tools"}}, params)
}
