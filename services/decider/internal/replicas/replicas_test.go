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
	s, err := New(t.Context(), Options{Client: st.Client(), Self: self, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	require.NoError(t, st.Register(ctx, "a", "10.0.0.1:1", 10))
	require.NoError(t, st.RegisterLog(ctx, "a"))
	require.NoError(t, st.RegisterLog(ctx, "gone"))
	s := newSet(t, st, "a")
	live, changed := s.Live()
	require.Empty(t, live, "itself is no peer")
	require.Equal(t, []string{"gone"}, s.Logs())

	_, err := st.Client().Put(ctx, store.MembersPrefix+"b", "10.0.0.2:1")
	require.NoError(t, err)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no change seen")
	}
	require.Eventually(t, func() bool { l, _ := s.Live(); return l["b"] == "10.0.0.2:1" }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"b", "gone"}, s.Logs(), "a live replica's log is read before its log key is seen")
	_, err = st.Client().Delete(ctx, store.MembersPrefix+"b")
	require.NoError(t, err)
	require.Eventually(t, func() bool { l, _ := s.Live(); return len(l) == 0 }, 10*time.Second, 10*time.Millisecond)
}

// TestOwnsSplitsWork: of three live replicas, exactly one owns each key,
// and each owns some.
func TestOwnsSplitsWork(t *testing.T) {
	st := etcdtest.Connect(t, etcdtest.Start(t))
	ids := []string{"r1", "r2", "r3"}
	for _, id := range ids {
		_, err := st.Client().Put(t.Context(), store.MembersPrefix+id, id+":1")
		require.NoError(t, err)
	}
	var sets []*Set
	for _, id := range ids {
		sets = append(sets, newSet(t, st, id))
	}
	owned := map[string]int{}
	for k := range 300 {
		key := fmt.Sprintf("model-%d", k)
		owners := 0
		for i, s := range sets {
			if s.Owns(key) {
				owners++
				owned[ids[i]]++
			}
		}
		require.Equal(t, 1, owners, "key %s", key)
	}
	require.Len(t, owned, 3, "%v", owned)
}
