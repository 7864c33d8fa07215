package tests

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// TestReplicasLearnTogether: three deciders on one etcd, one edge on the
// first (a) and another on the third (c). Each replica used to learn alone
// from the edges connected to it: after traffic through a, b and c had no
// first-token sample and did not know of a's cool-downs, and a tenant's
// activity read through a replica listed only the calls that replica's
// edges reported. Now what one replica learns reaches the others, and the
// activity log is read across every replica, one cursor over all of them,
// naming a replica that does not answer.
func TestReplicasLearnTogether(t *testing.T) {
	const onA, onC = 12, 5
	// One refusal benches an endpoint: one call that fails everywhere
	// benches all three.
	s := startSystemWith(t, systemOptions{cooldownRule: "first-refusal"}, "--report-flush-interval=20ms")
	a := s.decider
	replica := func(id string) *deciderapp.Decider {
		return s.addReplica(t, id, func(c *deciderapp.Config) { c.CooldownRule = "first-refusal" })
	}
	b, c := replica("b"), replica("c")
	toC := &stack{edge: s.addEdge(t, c.Addr())}
	require.Eventually(t, func() bool { return len(a.Edges()) == 1 && len(c.Edges()) == 1 }, waitFor, tick, "each edge reports to its replica")

	// Streamed calls: each a first-token sample of the endpoint that served it.
	var ids []string
	stream := `{"model":"` + model + `","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`
	for range onA {
		code, h, body := s.send(t, testKey, http.MethodPost, "/chat/completions", stream)
		require.Equal(t, http.StatusOK, code, "%s", body)
		ids = append(ids, h.Get("X-Switchboard-Request-Id"))
	}
	for range onC {
		code, h, body := toC.send(t, testKey, http.MethodPost, "/chat/completions", stream)
		require.Equal(t, http.StatusOK, code, "%s", body)
		ids = append(ids, h.Get("X-Switchboard-Request-Id"))
	}

	// Every replica counts every edge's samples, whichever replica took them.
	samples := func(d *deciderapp.Decider) map[string]int64 {
		out := map[string]int64{}
		for p, cand := range candidates(t, d.Addr()) {
			out[p] = cand.GetSamples()
		}
		return out
	}
	total := func(m map[string]int64) (n int64) {
		for _, v := range m {
			n += v
		}
		return n
	}
	var last [3]map[string]int64
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		last = [3]map[string]int64{samples(a), samples(b), samples(c)}
		assert.Equal(ct, int64(onA+onC), total(last[0]), "a counts both edges' calls")
		assert.Equal(ct, last[0], last[1], "b's samples are a's")
		assert.Equal(ct, last[0], last[2], "c's samples are a's")
	}, waitFor, tick)
	t.Logf("samples by provider: a %v, b %v, c %v", last[0], last[1], last[2])

	// A named conversation decided through a is known to b and c: its next
	// turn stays on its endpoint whichever replica decides it.
	code, h, body := s.send(t, testKey, http.MethodPost, "/chat/completions", stream, "X-Session-Id", "conv-shared")
	require.Equal(t, http.StatusOK, code, "%s", body)
	ids = append(ids, h.Get("X-Switchboard-Request-Id"))
	for name, d := range map[string]*deciderapp.Decider{"a": a, "b": b, "c": c} {
		rpc := operatorRPC(t, d.Addr())
		require.Eventually(t, func() bool {
			return strings.Contains(sessionDryRun(t, rpc, "conv-shared", 100), "sticky=kept")
		}, waitFor, tick, "replica %s knows the conversation: %s", name, sessionDryRun(t, rpc, "conv-shared", 100))
	}

	// A cool-down a's edge caused is seen by b and c.
	code, h, _ = s.send(t, testKey, http.MethodPost, "/chat/completions",
		`{"model":"`+model+`","max_tokens":4,"messages":[{"role":"user","content":"[[provsim:fault=unavailable]]"}]}`)
	require.Equal(t, http.StatusServiceUnavailable, code, "every provider overloaded")
	ids = append(ids, h.Get("X-Switchboard-Request-Id"))
	for name, d := range map[string]*deciderapp.Decider{"a": a, "b": b, "c": c} {
		require.Eventually(t, func() bool {
			for _, cand := range candidates(t, d.Addr()) {
				if !strings.Contains(cand.GetNote(), "cooling down") {
					return false
				}
			}
			return true
		}, waitFor, tick, "replica %s benches the endpoints that refused a's call", name)
	}

	// Every call once, read through any replica, a page of 5 at a time.
	for name, d := range map[string]*deciderapp.Decider{"a": a, "b": b, "c": c} {
		var listed map[string]int
		require.Eventually(t, func() bool {
			listed, _ = listActivity(t, d.Addr(), 5)
			return len(listed) == len(ids)
		}, waitFor, tick, "through %s", name)
		for _, id := range ids {
			require.Equal(t, 1, listed[id], "call %s listed once through %s: %v", id, name, listed)
		}
		for _, id := range []string{ids[0], ids[len(ids)-2]} {
			resp, err := operatorRPC(t, d.Addr()).GetActivity(t.Context(), &switchboardv1.GetActivityRequest{
				Identity: &switchboardv1.Identity{TenantId: "acme"}, Id: id})
			require.NoError(t, err, "GetActivity %s through %s", id, name)
			require.Equal(t, id, resp.GetRecord().GetId())
		}
	}
	t.Logf("%d calls listed through each replica", len(ids))
	for _, d := range []*deciderapp.Decider{a, b, c} {
		require.Zero(t, d.ObservationsDropped(), "nothing lost while every replica lives")
	}
	require.Positive(t, a.ObservationsShared())
	require.Positive(t, c.ObservationsShared())

	// A replica gone: its log is out of reach, and the answer says so.
	c.Kill()
	listed, missing := listActivity(t, a.Addr(), 5)
	require.Equal(t, []string{"c"}, missing, "the answer names the replica it could not read")
	require.Len(t, listed, onA+2, "a's own calls still listed")
}

// listActivity pages through acme's activity on the decider at addr, limit
// records a page, and returns how often each call was listed and the
// replicas any page said it left out.
func listActivity(t *testing.T, addr string, limit int32) (map[string]int, []string) {
	t.Helper()
	rpc := operatorRPC(t, addr)
	out := map[string]int{}
	missing := map[string]bool{}
	for cursor := ""; ; {
		resp, err := rpc.ListActivity(t.Context(), &switchboardv1.ListActivityRequest{
			Identity: &switchboardv1.Identity{TenantId: "acme"}, Limit: limit, Cursor: cursor})
		require.NoError(t, err)
		require.LessOrEqual(t, len(resp.GetRecords()), int(limit))
		for _, rec := range resp.GetRecords() {
			out[rec.GetId()]++
		}
		for _, r := range resp.GetMissingReplicas() {
			missing[r] = true
		}
		if cursor = resp.GetNextCursor(); cursor == "" {
			break
		}
	}
	var names []string
	for r := range missing {
		names = append(names, r)
	}
	return out, names
}
