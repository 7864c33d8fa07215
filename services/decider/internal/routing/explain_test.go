package routing

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// TestReasonWord: the summary names every route reason by its enum name
// without the prefix, in lower case, and a number the enum does not know
// by the same rule applied to its String.
func TestReasonWord(t *testing.T) {
	for v, name := range switchboardv1.RouteReason_name {
		require.Equal(t, strings.ToLower(strings.TrimPrefix(name, "ROUTE_REASON_")), reasonWord(switchboardv1.RouteReason(v)), name)
	}
	require.Equal(t, "cheapest_qualifying", reasonWord(switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING))
	require.Equal(t, "99", reasonWord(switchboardv1.RouteReason(99)))
	require.Equal(t, "-1", reasonWord(switchboardv1.RouteReason(-1)))
}
