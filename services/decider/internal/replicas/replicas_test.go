package replicas

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/etcdtest"
)

func newSet(t *testing.T, st *store.Store, self string) *Set {
	t.Helper()
	return newSetIn(t, st, self, "")
}

func newSetIn(t *testing.T, st *store.Store, self, region string) *Set {
	t.Helper()
	s, err := New(t.Context(), Options{Client: st.Client(), Self: self, Region: region, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(t.Context()) }()
	t.Cleanup(func() { <-done })
	return s
}

// TestSetFollowsReplicas: the live replicas and the logs come from etcd at
// start and follow it; a replica whose membership ended keeps its log
// listed; the set never lists itself.
func TestSetFollowsReplicas(t *testing.T) {
	st := etcdtest.Connect(t, etcdtest.Start(t))
	ctx := t.Context()
	require.NoError(t, st.Register(ctx, "a", store.Member{Addr: "10.0.0.1:1"}, 10))
	require.NoError(t, st.RegisterLog(ctx, "a"))
	require.NoError(t, st.RegisterLog(ctx, "gone"))
	s := newSet(t, st, "a")
	live, changed := s.Live()
	require.Empty(t, live, "itself is no peer")
	require.Equal(t, []string{"gone"}, s.Logs())

	_, err := st.Client().Put(ctx, store.MembersPrefix+"bad", "not a member")
	require.NoError(t, err)
	_, err = st.Client().Put(ctx, store.MembersPrefix+"b", store.MemberValue(store.Member{Addr: "10.0.0.2:1"}))
	require.NoError(t, err)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no change seen")
	}
	require.Eventually(t, func() bool { l, _ := s.Live(); return l["b"] == "10.0.0.2:1" }, 10*time.Second, 10*time.Millisecond)
	l, _ := s.Live()
	require.NotContains(t, l, "bad", "a membership key that does not decode names no peer")
	require.Equal(t, []string{"b", "gone"}, s.Logs(), "a live replica's log is read before its log key is seen")
	_, err = st.Client().Delete(ctx, store.MembersPrefix+"b")
	require.NoError(t, err)
	require.Eventually(t, func() bool { l, _ := s.Live(); return len(l) == 0 }, 10*time.Second, 10*time.Millisecond)
}

// TestOwnsSplitsWork: of the live replicas of one region, exactly one owns
// each key, and each owns some; every region has its own owner of every
// key, the replicas naming no region being one region too.
func TestOwnsSplitsWork(t *testing.T) {
	st := etcdtest.Connect(t, etcdtest.Start(t))
	regions := map[string][]string{"us-east": {"u1", "u2", "u3"}, "eu-west": {"e1", "e2"}, "": {"n1"}}
	for region, ids := range regions {
		for _, id := range ids {
			_, err := st.Client().Put(t.Context(), store.MembersPrefix+id, store.MemberValue(store.Member{Addr: id + ":1", Region: region}))
			require.NoError(t, err)
		}
	}
	sets := map[string]*Set{}
	for region, ids := range regions {
		for _, id := range ids {
			sets[id] = newSetIn(t, st, id, region)
		}
	}
	// Every set has seen every other replica.
	require.Eventually(t, func() bool {
		for _, s := range sets {
			if l, _ := s.Live(); len(l) != len(sets)-1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	for region, ids := range regions {
		t.Run("region "+region, func(t *testing.T) {
			owned := map[string]int{}
			for k := range 300 {
				key := fmt.Sprintf("model-%d", k)
				owners := 0
				for _, id := range ids {
					if sets[id].Owns(key) {
						owners++
						owned[id]++
					}
				}
				require.Equal(t, 1, owners, "key %s", key)
			}
			require.Len(t, owned, len(ids), "%v", owned)
		})
	}
}
