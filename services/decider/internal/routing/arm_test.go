package routing

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// TestPolicyOfExperimentArm checks the experiment's arm is asked with the
// request's model and time, and applies only where it says so.
func TestPolicyOfExperimentArm(t *testing.T) {
	c, err := catalog.Parse([]byte(strings.Replace(testCatalog, "@KEYHASH@", keyA, 1)))
	require.NoError(t, err)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var asked []string
	r := New(c, Options{Exploration: -1, Arm: func(model string, now time.Time) (Policy, bool) {
		asked = append(asked, model)
		if now.Before(t0) {
			return "", false
		}
		return PolicyRoutingCost, true
	}})
	idx := r.o.Catalog()
	m := idx.models["vendor/model"]
	require.Equal(t, PolicySmart, r.policyOf(idx, m, nil, t0.Add(-time.Second)), "outside the experiment: the deployment default")
	require.Equal(t, PolicyRoutingCost, r.policyOf(idx, m, nil, t0), "inside: the arm")
	require.Equal(t, []string{"vendor/model", "vendor/model"}, asked)
}
