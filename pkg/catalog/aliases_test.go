package catalog

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const aliasCatalog = `models:
  - id: qwen3-coder
    aliases: [claude-sonnet-4-5, "claude-sonnet-4-5*", "claude-*", gpt-5-codex]
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}
  - id: small
    aliases: ["claude-haiku-4-5*", "claude-3-5-haiku*"]
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 0.1, output: 0.1}}
  - id: claude-opus-local
    aliases: ["claude-opus-4-1-2025*"]
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 5, output: 5}}
workload_classes:
  batch: {overload: fallback, fallback_model: claude-haiku-4-5-20251001}
`

func TestResolve(t *testing.T) {
	c, err := Parse([]byte(aliasCatalog))
	require.NoError(t, err)
	r := c.Resolver()
	tests := []struct {
		name, asked, want string
	}{
		{name: "an id", asked: "small", want: "small"},
		{name: "an exact alias", asked: "gpt-5-codex", want: "qwen3-coder"},
		{name: "a pattern covers its undated name", asked: "claude-haiku-4-5", want: "small"},
		{name: "a pattern covers dated names", asked: "claude-sonnet-4-5-20250929", want: "qwen3-coder"},
		{name: "the longest pattern wins", asked: "claude-haiku-4-5-20251001", want: "small"},
		{name: "a shorter pattern catches the rest", asked: "claude-opus-4-1", want: "qwen3-coder"},
		{name: "an id wins over a pattern matching it", asked: "claude-opus-local", want: "claude-opus-local"},
		{name: "the longer pattern", asked: "claude-opus-4-1-20250805", want: "claude-opus-local"},
		{name: "unknown", asked: "gpt-4o", want: ""},
		{name: "case matters", asked: "Claude-sonnet-4-5", want: ""},
		{name: "the suffix is not cut here", asked: "small:floor", want: ""},
		{name: "empty", asked: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := r.Resolve(tt.asked)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.want != "", ok)
		})
	}
	require.Equal(t, "small", c.WorkloadClasses["batch"].FallbackModel, "a fallback model named by alias is stored as its id")
}

func TestAliasErrors(t *testing.T) {
	const ep = "\n    endpoints: [{provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}]\n"
	tests := []parseErrorCase{
		{
			name: "two models claim one name",
			yaml: "models:\n  - id: a\n    aliases: [claude-sonnet-4-5]" + ep + "  - id: b\n    aliases: [x, claude-sonnet-4-5]" + ep,
			want: []string{`line 6: models[1].aliases[1]: "claude-sonnet-4-5" is already claimed by models[0].aliases[0] (line 3)`},
		},
		{
			name: "two models claim one pattern",
			yaml: "models:\n  - id: a\n    aliases: [\"claude-*\"]" + ep + "  - id: b\n    aliases:\n      - \"claude-*\"" + ep,
			want: []string{`line 7: models[1].aliases[0]: "claude-*" is already claimed by models[0].aliases[0] (line 3)`},
		},
		{
			name: "an alias is another model's id, defined after it",
			yaml: "models:\n  - id: a\n    aliases: [b]" + ep + "  - id: b" + ep,
			want: []string{`line 3: models[0].aliases[0]: "b" is the id of models[1].id (line 5): an alias may not name another model`},
		},
		{
			name: "an alias is the model's own id",
			yaml: "models:\n  - id: a\n    aliases: [a]" + ep,
			want: []string{`models[0].aliases[0]: "a" is this model's own id`},
		},
		{
			name: "malformed aliases",
			yaml: "models:\n  - id: a\n    aliases: [\"\", \"*\", \"claude-*-x\", \"a b\", \"a:floor\", \"claude-**\"]" + ep,
			want: []string{
				"models[0].aliases[0]: must not be empty",
				`models[0].aliases[1]: "*" matches every model name`,
				`models[0].aliases[2]: "claude-*-x": '*' may only end an alias`,
				`models[0].aliases[3]: "a b" must not contain spaces`,
				`models[0].aliases[4]: "a:floor" must not contain spaces or ':'`,
				`models[0].aliases[5]: "claude-**": '*' may only end an alias`,
			},
		},
		{
			name: "a fallback model that is no model nor alias",
			yaml: "models:\n  - id: a\n    aliases: [\"claude-*\"]" + ep + "workload_classes:\n  batch: {overload: fallback, fallback_model: gpt-4o}\n",
			want: []string{`workload_classes.batch.fallback_model: "gpt-4o" is not a model of this catalog (nor an alias of one)`},
		},
	}
	requireParseErrors(t, tests)
}

func TestNewResolverOfUnvalidatedModels(t *testing.T) {
	// The edge builds a resolver from the decider's model list: the first
	// claim wins, and nothing panics on what Parse would refuse.
	r := NewResolver([]Model{
		{ID: "a", Aliases: []string{"x", "p*", "", "*"}},
		{ID: "b", Aliases: []string{"x", "p*", "a"}},
	})
	for asked, want := range map[string]string{"x": "a", "pq": "a", "a": "a", "b": "b"} {
		got, ok := r.Resolve(asked)
		require.True(t, ok, asked)
		require.Equal(t, want, got, asked)
	}
	_, ok := r.Resolve("zzz")
	require.False(t, ok, "a lone '*' matches nothing")
}

func BenchmarkResolve(b *testing.B) {
	c, err := Parse([]byte(aliasCatalog))
	require.NoError(b, err)
	r := c.Resolver()
	for _, name := range []string{"small", "claude-sonnet-4-5-20250929", "gpt-4o"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				r.Resolve(name)
			}
		})
	}
}
