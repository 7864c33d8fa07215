package loadtest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOverAdmissionCaughtFromOutside runs the burst scenario on the real
// system while the harness believes the tenant's and the provider
// project's limits are half what the catalog gives them: what the system
// rightly admits is then more than the harness's bounds, and each of the
// three outside views (the provider's counters, the activity log, the
// clients) must say so. It shows the checks can fail.
func TestOverAdmissionCaughtFromOutside(t *testing.T) {
	sz := sizesFor(true)
	p := buildPlan(sz, false)
	sys, err := startSystem(t.Context(), p, Binaries{}, false)
	require.NoError(t, err)
	t.Cleanup(sys.stop)
	e := newEnv(sys, p, sz)
	t.Cleanup(e.client.close)
	require.NoError(t, e.waitReady(t.Context()))

	tl := &p.tenant("t-burst").limits[0]
	tl.capacity, tl.burst = tl.capacity/2, tl.burst/2
	pl := &p.model("vendor/lt-burst").endpoints[0].limits[0]
	pl.capacity /= 2

	var burst scenario
	for _, sc := range scenarios(sz) {
		if sc.name == "burst" {
			burst = sc
		}
	}
	sr, err := e.run(t.Context(), burst)
	require.NoError(t, err)
	require.Positive(t, sr.OverAdmission)
	require.False(t, sr.Passed)
	over := map[string]bool{}
	for _, l := range sr.Limits {
		if l.Over > 0 {
			over[l.Source] = true
		}
	}
	for _, source := range []string{"provider counters", "activity log", "clients"} {
		require.True(t, over[source], "over-admission seen in %s: %+v", source, sr.Limits)
	}
}
