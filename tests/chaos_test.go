package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/tests/chaos"
)

// TestChaosShort runs the chaos test's short form (docs/chaos.md): three
// etcd members, three decider processes and three edges in two regions,
// about 90 s of load against tight tenants with a kill -9 of the broker's
// owner, a SIGTERM of the next, a SIGSTOP of the next past its session and
// membership lease, an etcd member restart, eu-west cut off past the
// session TTL and attacks from valid credentials; the deciders run with
// quota leases, which a tenant of 120 requests a minute uses. Every check is judged
// from the providers' side (their counters, and a tap in front of each)
// and must hold: no over-admission, handovers within their bounds, no
// ghost slots, no lost activity through any replica, every replica
// learning every edge's calls after the faults, the hedge budget never
// exceeded, each attack refused or without effect.
// The etcd members are embedded, or processes of the etcd binary that
// SWITCHBOARD_CHAOS_ETCD names (e.g. Debian's etcd-server, /usr/bin/etcd;
// `make chaos CHAOSFLAGS=--etcd-bin=...` runs the long form on it).
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("long (builds the services, about 90 s): make test-long runs it")
	}
	bins := buildServices(t)
	if etcd := os.Getenv("SWITCHBOARD_CHAOS_ETCD"); etcd != "" {
		path, err := exec.LookPath(etcd)
		require.NoError(t, err, "SWITCHBOARD_CHAOS_ETCD")
		bins.Etcd = path
		t.Logf("etcd members: processes of %s", path)
	} else {
		t.Logf("etcd members: embedded (SWITCHBOARD_CHAOS_ETCD unset)")
	}
	res, err := chaos.Run(t.Context(), chaos.Options{Binaries: bins, Short: true, Keep: os.Getenv("SWITCHBOARD_CHAOS_KEEP") != "", Progress: testWriter{t}})
	require.NoError(t, err)
	var b strings.Builder
	res.Print(&b)
	t.Log("\n" + b.String())
	for _, c := range res.Checks {
		assert.True(t, c.OK, "%s: measured %s, bound %s", c.Name, c.Measured, c.Bound)
	}
	assert.Zero(t, res.OverAdmission, "over-admission of the requests-per-minute tenant")
	assert.Zero(t, res.LeaseOverAdmission, "over-admission of the leased tenant")
	assert.Positive(t, res.Admissions.Lease, "reservations admitted on quota leases")
	assert.Zero(t, res.ActivityLost, "answered requests without an activity record")
}

// buildServices builds the decider, the edge and the simulator (without the
// race detector: they are the system under test, run as processes).
func buildServices(t *testing.T) chaos.Binaries {
	t.Helper()
	dir := t.TempDir()
	build := func(name, pkg string) string {
		out := filepath.Join(dir, name)
		cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, pkg)
		raw, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %s: %s", pkg, raw)
		return out
	}
	return chaos.Binaries{
		Decider: build("decider", "github.com/switchboard-ai/switchboard/services/decider/cmd/decider"),
		Edge:    build("edge", "github.com/switchboard-ai/switchboard/services/edge/cmd/edge"),
		Provsim: build("provsim", "github.com/switchboard-ai/switchboard/services/provsim/cmd/provsim"),
	}
}

// testWriter writes each event into the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
