package tests

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	edgeapp "github.com/switchboard-ai/switchboard/services/edge/app"
)

// TestNewReplicaStartsKnowingWhatItsPeerLearned: replica a learns a named
// conversation, an unnamed one (prompt affinity) and cool-downs from the
// calls of its edge; then replica b starts. b used to start with all of
// that empty, its first decisions cold until new reports refilled it
// (affinity, conversations, outcomes and cool-downs are not in the etcd
// snapshot). Now b asks a for them before it serves, and answers at once,
// with no report since: the conversation sticks to its endpoint, the
// unnamed conversation's next turn stays where its prompt is cached, and
// the benched endpoints are cooling. A replica whose transfer fails starts
// empty, as before, and says so.
func TestNewReplicaStartsKnowingWhatItsPeerLearned(t *testing.T) {
	s := startSystemWith(t, systemOptions{cooldownRule: "first-refusal"}, "--report-flush-interval=20ms")
	a := s.decider
	rpcA := operatorRPC(t, a.Addr())

	// A named conversation, decided and answered through a.
	stream := func(e *edgeapp.Edge, body string, header ...string) (provider, route string) {
		t.Helper()
		provider, route, _ = postStreamed(t, e.URL()+"/chat/completions", testKey, body, header...)
		return provider, route
	}
	_, _ = stream(s.edge, chat("named", 100, ""), "X-Session-Id", "conv-transfer")
	require.Eventually(t, func() bool { return strings.Contains(sessionDryRun(t, rpcA, "conv-transfer", 100), "sticky=kept") },
		waitFor, tick, "a knows the conversation")

	// An unnamed conversation's first turn through a: its prompt is cached
	// where it was served, as the report tells a.
	msgs := `{"role":"system","content":"` + longPrompt(4096) + `"},{"role":"user","content":"question 1"}`
	first, _ := stream(s.edge, `{"model":"`+model+`","max_tokens":4,"messages":[`+msgs+`]}`)
	msgs += `,{"role":"assistant","content":"answer"},{"role":"user","content":"question 2"}`
	secondTurn := `{"model":"` + model + `","max_tokens":4,"messages":[` + msgs + `]}`

	// A call that gamma refuses benches gamma on a.
	code, _, _ := s.send(t, testKey, http.MethodPost, "/chat/completions",
		`{"model":"`+model+`","max_tokens":4,"provider":{"only":["gamma"]},"messages":[{"role":"user","content":"[[provsim:fault=unavailable]]"}]}`)
	require.Equal(t, http.StatusServiceUnavailable, code, "gamma overloaded")
	cooling := func(addr string) []string {
		var out []string
		for p, c := range candidates(t, addr) {
			if strings.Contains(c.GetNote(), "cooling down") {
				out = append(out, p)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return slices.Equal(cooling(a.Addr()), []string{"gamma"}) }, waitFor, tick, "a benches gamma")
	require.NotEqual(t, "gamma", first)

	replica := func(id string, timeout time.Duration) *deciderapp.Decider {
		return startDecider(t, deciderapp.Config{
			Listen: "127.0.0.1:0", Etcd: []string{a.EtcdEndpoint()}, DataDir: t.TempDir(), ID: id,
			ShutdownTimeout: 5 * time.Second, Exploration: -1, Seed: 1, CooldownRule: "first-refusal", StateTransferTimeout: timeout,
		})
	}
	b := replica("b", 0)

	// At once, no report since: what a learned, b knows.
	res, ok, failed := b.StateTransferred()
	require.True(t, ok, "b took a's state")
	require.Zero(t, failed)
	t.Logf("b took %+v", res)
	require.Positive(t, res.Affinity)
	require.Positive(t, res.Conversations)
	require.Equal(t, 1, res.Cooldowns)
	require.Positive(t, res.Outcomes)
	require.Zero(t, res.Refused)
	require.Contains(t, sessionDryRun(t, operatorRPC(t, b.Addr()), "conv-transfer", 100), "sticky=kept", "b knows the conversation")
	require.Equal(t, []string{"gamma"}, cooling(b.Addr()), "b benches what a benched")

	// The unnamed conversation's next turn, through an edge on b, stays
	// where its prompt is cached.
	toB := s.addEdge(t, b.Addr())
	require.Eventually(t, func() bool { return len(b.Edges()) == 1 }, waitFor, tick)
	second, route := stream(toB, secondTurn)
	require.Equal(t, first, second, "the next turn stays where the first is cached: %s", route)
	require.Contains(t, route, "sticky=kept", "b recognises the conversation from a's affinity")

	// Only a replica may ask for what a replica learned.
	for name, rpc := range map[string]switchboardv1.DeciderClient{"an edge": dialAs(t, a.Addr(), testEdgeToken), "an operator": rpcA} {
		st, err := rpc.TransferState(t.Context(), &switchboardv1.TransferStateRequest{ReplicaId: "x"})
		if err == nil {
			_, err = st.Recv()
		}
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", name, err)
	}

	// A transfer that cannot finish in time: the replica starts empty.
	c := replica("c", time.Nanosecond)
	_, ok, failed = c.StateTransferred()
	require.False(t, ok)
	require.EqualValues(t, 1, failed, "the failed transfer is counted")
	require.NotContains(t, sessionDryRun(t, operatorRPC(t, c.Addr()), "conv-transfer", 100), "sticky=kept",
		fmt.Sprintf("c started empty: %s", sessionDryRun(t, operatorRPC(t, c.Addr()), "conv-transfer", 100)))
}
