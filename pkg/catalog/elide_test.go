package catalog

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestElide(t *testing.T) {
	in := `# the demo catalog
digests: &ops [` + HashKey("anchored") + `]
tenants:
  - id: acme # the demo tenant
    api_keys_sha256: [` + HashKey("a") + `, ` + HashKey("b") + `]
    api_keys: [{sha256: ` + HashKey("c") + `, class: batch}]
callers:
  - {id: ops, role: operator, tokens_sha256: *ops}
`
	out, err := Elide([]byte(in))
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c", "anchored"} {
		require.NotContains(t, string(out), HashKey(k))
	}
	require.Equal(t, 4, strings.Count(string(out), Elided), "%s", out)
	require.Contains(t, string(out), "# the demo tenant")
	require.Contains(t, string(out), "class: batch")
	_, err = Elide([]byte("a: [b"))
	require.Error(t, err)
}
