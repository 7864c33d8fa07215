package catalog

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const classModels = `models:
  - id: big
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 1, output: 1}}
  - id: small
    endpoints:
      - {provider: a, base_url: http://x/v1, price: {input: 0.1, output: 0.1}}
`

var (
	keyA = strings.Repeat("a", 64)
	keyB = strings.Repeat("b", 64)
	keyC = strings.Repeat("c", 64)
)

func TestWorkloadClassesDefaults(t *testing.T) {
	c, err := Parse([]byte(classModels + "tenants:\n  - {id: t, api_keys_sha256: [" + keyA + "]}\n"))
	require.NoError(t, err)
	ks := c.Contracts()
	require.Equal(t, DefaultContracts(), ks, "without workload_classes every class has its default")
	require.Len(t, ks, len(Classes))
	for i, k := range ks {
		require.Equal(t, Classes[i], k.Class)
		require.Positive(t, k.MaxWait)
		require.Positive(t, k.MaxDepth)
		require.Positive(t, k.Weight)
		require.Equal(t, OverloadReject, k.Overload)
	}
	ten := c.Tenants[0]
	require.Equal(t, []string{ClassInteractive, ClassBackground, ClassBatch}, ten.AllowedClasses(), "partner only for a partner's tenant")
	require.Equal(t, ClassInteractive, ten.DefaultClassOf(keyA))
}

func TestWorkloadClassesParsed(t *testing.T) {
	yaml := classModels + `workload_classes:
  interactive:
    max_wait: 500ms
    max_depth: 0
    overload: fallback
    fallback_model: small
  batch:
    weight: 0.5
    retry_budget: 0
partners:
  - id: p
tenants:
  - id: t
    api_keys_sha256: [` + keyA + `]
    api_keys:
      - {sha256: ` + keyB + `, class: batch}
      - {sha256: ` + keyC + `}
    default_class: background
    weight: 3
    burst: 20
  - id: u
    partner: p
    api_keys_sha256: [` + strings.Repeat("d", 64) + `]
`
	c, err := Parse([]byte(yaml))
	require.NoError(t, err)
	in, ok := c.Contract(ClassInteractive)
	require.True(t, ok)
	require.Equal(t, Contract{Class: ClassInteractive, MaxWait: 500 * time.Millisecond, MaxDepth: 0, Overload: OverloadFallback,
		FallbackModel: "small", Weight: 4, RetryBudget: 2}, in, "fields left out keep their defaults")
	b, _ := c.Contract(ClassBatch)
	require.Equal(t, 0.5, b.Weight)
	require.Equal(t, 0, b.RetryBudget)
	require.Equal(t, 30*time.Minute, b.MaxWait)
	bg, _ := c.Contract(ClassBackground)
	require.Equal(t, DefaultContracts()[1], bg)
	_, ok = c.Contract("urgent")
	require.False(t, ok)

	ten := c.Tenants[0]
	require.Equal(t, []string{keyA, keyB, keyC}, ten.APIKeysSHA256, "keys with a class are keys of the tenant like the others")
	require.Equal(t, ClassBatch, ten.DefaultClassOf(keyB), "a key's own class")
	require.Equal(t, ClassBackground, ten.DefaultClassOf(keyC), "a key without a class takes the tenant's default")
	require.Equal(t, ClassBackground, ten.DefaultClassOf(keyA))
	require.Equal(t, 3.0, *ten.Weight)
	require.Equal(t, 20.0, ten.Burst)
	require.Equal(t, Classes, c.Tenants[1].AllowedClasses(), "a partner's tenant may use every class")
}

func TestWorkloadClassesErrors(t *testing.T) {
	tests := []parseErrorCase{
		{
			name: "class fields",
			yaml: classModels + `workload_classes:
  interactive:
    max_wait: soon
    max_depth: -1
    overload: panic
    weight: 0
    retry_budget: -2
  urgent:
    max_wait: 1s
  batch:
    overload: fallback
  background:
    overload: fallback
    fallback_model: huge
  partner:
    fallback_model: small
`,
			want: []string{
				`line 10: workload_classes.interactive.max_wait: "soon" must be a duration`,
				"line 11: workload_classes.interactive.max_depth: must not be negative",
				`line 12: workload_classes.interactive.overload: "panic" must be one of reject, fallback`,
				"line 13: workload_classes.interactive.weight: must be a positive number",
				"line 14: workload_classes.interactive.retry_budget: must be between 0 and 100",
				`line 15: workload_classes.urgent: "urgent" is not a workload class`,
				"line 17: workload_classes.batch.fallback_model: is required with overload: fallback",
				`line 21: workload_classes.background.fallback_model: "huge" is not a model of this catalog`,
				"line 23: workload_classes.partner.fallback_model: is used only with overload: fallback",
			},
		},
		{
			name: "unknown class field",
			yaml: classModels + "workload_classes:\n  batch:\n    deadline: 1h\n",
			want: []string{"line 10", "deadline"},
		},
		{
			name: "negative wait",
			yaml: classModels + "workload_classes:\n  batch:\n    max_wait: -1s\n",
			want: []string{`line 10: workload_classes.batch.max_wait: "-1s" must be a duration between 0s and 24h0m0s`},
		},
		{
			name: "tenant classes",
			yaml: classModels + `tenants:
  - id: t
    api_keys_sha256: [` + keyA + `]
    api_keys:
      - {sha256: ` + keyA + `, class: batch}
      - {sha256: ` + keyB + `, class: partner}
      - {sha256: nothex}
    classes: [batch, batch, urgent]
    default_class: interactive
    weight: -1
    burst: -2
  - id: u
    api_keys: [{sha256: ` + keyC + `, class: whenever}]
    classes: [batch]
  - id: v
    api_keys_sha256: [` + strings.Repeat("e", 64) + `]
    default_class: partner
`,
			want: []string{
				"line 12: tenants[0].api_keys[0].sha256: key is already used by tenants[0]",
				"line 14: tenants[0].api_keys[2].sha256: must be 64 lowercase hex digits",
				`line 15: tenants[0].classes[1]: "batch" is listed twice`,
				`line 15: tenants[0].classes[2]: "urgent" must be one of interactive, background, partner, batch`,
				`line 16: tenants[0].default_class: "interactive" is not among the tenant's classes`,
				"line 17: tenants[0].weight: must be a positive number",
				"line 18: tenants[0].burst: must be a non-negative number",
				`line 13: tenants[0].api_keys[1].class: "partner" is not among the tenant's classes`,
				`line 20: tenants[1].api_keys[0].class: "whenever" must be one of`,
				"tenants[1].default_class: is required: the default, interactive, is not among the tenant's classes (batch)",
				`line 24: tenants[2].default_class: "partner" is not among the tenant's classes (interactive, background, batch)`,
			},
		},
		{
			name: "no key at all",
			yaml: classModels + "tenants:\n  - {id: t, classes: [batch], default_class: batch}\n",
			want: []string{"tenants[0].api_keys_sha256: at least one key digest is required (here or under api_keys)"},
		},
	}
	requireParseErrors(t, tests)
}
