package app

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// The callers every test catalog lists: the test client calls as the edge,
// replicas forward to the broker's owner as the replica.
const (
	testEdgeToken     = "test-edge-token"
	testReplicaToken  = "test-replica-token"
	testOperatorToken = "test-operator-token"
)

// unpaced is the hedge budget burst of tests about where the budget lives
// rather than its pacing: the whole day's budget at any hour, so they do
// not depend on the time of day they run at.
const unpaced = 24 * time.Hour

// testCallers is the callers section every test catalog ends with.
func testCallers() string {
	return "callers:\n" +
		"  - {id: edges, role: edge, tokens_sha256: [" + catalog.HashKey(testEdgeToken) + "]}\n" +
		"  - {id: deciders, role: replica, tokens_sha256: [" + catalog.HashKey(testReplicaToken) + "]}\n" +
		"  - {id: ops, role: operator, tokens_sha256: [" + catalog.HashKey(testOperatorToken) + "]}\n"
}

// writeToken writes a token file into a new temporary directory.
func writeToken(t testing.TB, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(p, []byte(token+"\n"), 0o600))
	return p
}
