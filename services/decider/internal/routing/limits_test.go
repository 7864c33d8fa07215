package routing

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/contextlength"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

const limitsCatalog = `
models:
  - id: vendor/model
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.1, output: 0.5}, context_length: 32768, max_output_tokens: 8192}
      - {provider: beta, base_url: http://127.0.0.1:2/v1, price: {input: 0.2, output: 0.6}, context_length: 131072}
      - {provider: gamma, base_url: http://127.0.0.1:3/v1, price: {input: 0.3, output: 0.7}}
tenants:
  - {id: acme, api_keys_sha256: ["@KEYHASH@"]}
`

// A request's max output is bounded by each endpoint's max output and
// context, with arithmetic that a hostile max_tokens cannot wrap.
func TestDecideBoundsMaxOutput(t *testing.T) {
	c, err := catalog.Parse([]byte(strings.Replace(limitsCatalog, "@KEYHASH@", keyA, 1)))
	require.NoError(t, err)
	r := New(c, Options{Exploration: -1})
	id := &switchboardv1.Identity{TenantId: "acme"}
	tests := []struct {
		name     string
		tokens   *switchboardv1.TokenEstimate
		only     []string
		want     []string
		wantKind Kind
		wantErr  string
	}{
		{name: "fits everywhere", tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 8192}, want: []string{"alpha", "beta", "gamma"}},
		{name: "above alpha's max output", tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 8193}, want: []string{"beta", "gamma"}},
		{name: "above beta's context", tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 131072}, want: []string{"gamma"}},
		{name: "prompt alone above the context", tokens: &switchboardv1.TokenEstimate{InputTokens: 140000}, want: []string{"gamma"}},
		{name: "largest accepted max output", tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: MaxTokens}, want: []string{"gamma"}},
		{name: "only a too-small endpoint", tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: 9000}, only: []string{"alpha"},
			wantKind: KindUnavailable, wantErr: "alpha: max output 8192 tokens too small for 9000"},
		{name: "near 2^63", tokens: &switchboardv1.TokenEstimate{InputTokens: 1000, MaxOutputTokens: math.MaxInt64},
			wantKind: KindInvalid, wantErr: "max_output_tokens"},
		{name: "input near 2^63", tokens: &switchboardv1.TokenEstimate{InputTokens: math.MaxInt64 - 10, MaxOutputTokens: 100},
			wantKind: KindInvalid, wantErr: "input_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &switchboardv1.DecideRequest{Model: "vendor/model", Tokens: tt.tokens}
			if tt.only != nil {
				req.Provider = &switchboardv1.ProviderPreferences{Only: tt.only}
			}
			resp, err := r.Decide(req, id)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Equal(t, tt.wantKind, err.(*Error).Kind)
				return
			}
			require.NoError(t, err)
			got := []string{resp.GetEndpoint().GetProvider()}
			for _, f := range resp.GetFallbacks() {
				got = append(got, f.GetProvider())
			}
			require.Equal(t, tt.want, got)
			require.Less(t, resp.GetEndpoint().GetEstimatedCostUsd(), 1e4, "a bounded max output has a bounded price")
		})
	}
}

// A request no endpoint of its model can hold names the field at fault: the
// prompt when it is too long for an endpoint's context, else the output it
// asks for.
func TestFitsNoEndpointNamesTheField(t *testing.T) {
	const cat = `
models:
  - id: vendor/model
    endpoints:
      - {provider: alpha, base_url: http://127.0.0.1:1/v1, price: {input: 0.1, output: 0.5}, context_length: 4096, max_output_tokens: 1024}
      - {provider: beta, base_url: http://127.0.0.1:2/v1, price: {input: 0.2, output: 0.6}, context_length: 8192, max_output_tokens: 2048}
tenants:
  - {id: acme, api_keys_sha256: ["@KEYHASH@"]}
`
	c, err := catalog.Parse([]byte(strings.Replace(cat, "@KEYHASH@", keyA, 1)))
	require.NoError(t, err)
	r := New(c, Options{Exploration: -1})
	tests := []struct {
		name          string
		tokens        *switchboardv1.TokenEstimate
		field, reason string
		// context are the figures of a request longer than every context:
		// the largest context length among the endpoints.
		context *contextlength.Exceeded
	}{
		{name: "prompt above every context", tokens: &switchboardv1.TokenEstimate{InputTokens: 9000},
			field: "tokens.input_tokens", reason: "CONTEXT_LENGTH_EXCEEDED", context: &contextlength.Exceeded{Limit: 8192, PromptTokens: 9000}},
		{name: "prompt and output together above every context", tokens: &switchboardv1.TokenEstimate{InputTokens: 7000, MaxOutputTokens: 2000},
			field: "tokens.input_tokens", reason: "CONTEXT_LENGTH_EXCEEDED", context: &contextlength.Exceeded{Limit: 8192, PromptTokens: 7000, OutputTokens: 2000}},
		{name: "output above every max output", tokens: &switchboardv1.TokenEstimate{InputTokens: 10, MaxOutputTokens: 4000},
			field: "tokens.max_output_tokens", reason: "INVALID_VALUE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Decide(&switchboardv1.DecideRequest{Model: "vendor/model", Tokens: tt.tokens}, &switchboardv1.Identity{TenantId: "acme"})
			var re *Error
			require.ErrorAs(t, err, &re)
			require.Equal(t, KindInvalid, re.Kind, re.Msg)
			require.Equal(t, tt.field, re.Field, re.Msg)
			require.Equal(t, tt.reason, re.Reason)
			require.Equal(t, tt.context, re.Context)
			if tt.context != nil {
				require.Equal(t, tt.context.OpenAIMessage(), re.Msg, "OpenAI's words, which its clients know")
			}
		})
	}
}
