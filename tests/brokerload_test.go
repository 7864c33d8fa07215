package tests

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/tests/loadtest"
)

// TestBrokerLoadShort runs the rate-limit load test's short mode on the
// whole system and asserts its invariants, not its speeds: no limit let
// more through than its bound (seen from the providers' counters, the
// activity log and the clients), every request got an answer or a clear
// error, every scenario's own checks held (the production tenant's floor
// among them), and every scenario sent traffic.
func TestBrokerLoadShort(t *testing.T) {
	if testing.Short() {
		t.Skip("long (a load test, about 50 s): make test-long runs it")
	}
	rep, err := loadtest.Run(t.Context(), loadtest.Options{Short: true, Classes: true})
	require.NoError(t, err)
	var b strings.Builder
	rep.Print(&b)
	t.Log(b.String())

	require.Len(t, rep.Scenarios, len(loadtest.ScenarioNames()))
	require.Zero(t, rep.OverAdmission, "over-admission")
	for _, s := range rep.Scenarios {
		require.Positive(t, s.Requests, s.Name)
		require.Zero(t, s.Lost, "%s: requests without an answer or a clear error", s.Name)
		for _, c := range s.Checks {
			require.True(t, c.OK, "%s: %s: %s", s.Name, c.Name, c.Detail)
		}
		for _, l := range s.Limits {
			require.LessOrEqual(t, l.Observed, l.Bound, "%s: %s (%s)", s.Name, l.Subject, l.Source)
		}
	}
	require.True(t, rep.Passed)
}
