package store_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/etcdtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds waits for something asynchronous; it is a hang guard only.
const waitFor = 20 * time.Second

type catalogEvent struct {
	data string
	rev  int64
}

func TestCatalogPutGetWatch(t *testing.T) {
	s := etcdtest.Connect(t, etcdtest.Start(t))
	ctx := t.Context()

	_, _, err := s.GetCatalog(ctx)
	require.ErrorIs(t, err, store.ErrNoCatalog)

	rev1, err := s.PutCatalog(ctx, []byte("v1"))
	require.NoError(t, err)
	again, err := s.PutCatalog(ctx, []byte("v1"))
	require.NoError(t, err)
	require.Equal(t, rev1, again, "an identical catalog is not written again")

	data, readRev, err := s.GetCatalog(ctx)
	require.NoError(t, err)
	require.Equal(t, "v1", string(data))
	require.GreaterOrEqual(t, readRev, rev1)

	// A catalog stored between the read and the start of the watch is not
	// missed: the watch starts just after the read's revision.
	rev2, err := s.PutCatalog(ctx, []byte("v2"))
	require.NoError(t, err)
	require.Greater(t, rev2, rev1)

	events := make(chan catalogEvent, 8)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.WatchCatalog(wctx, readRev, func(data []byte, rev int64) { events <- catalogEvent{string(data), rev} })
	}()
	defer func() {
		cancel()
		<-done
	}()
	require.Equal(t, catalogEvent{"v2", rev2}, next(t, events))

	rev3, err := s.PutCatalog(ctx, []byte("v3"))
	require.NoError(t, err)
	require.Equal(t, catalogEvent{"v3", rev3}, next(t, events))

	// A write of the same catalog produces no event: the next one seen is
	// the next change.
	_, err = s.PutCatalog(ctx, []byte("v3"))
	require.NoError(t, err)
	rev4, err := s.PutCatalog(ctx, []byte("v4"))
	require.NoError(t, err)
	require.Equal(t, catalogEvent{"v4", rev4}, next(t, events))
}

func next(t *testing.T, ch <-chan catalogEvent) catalogEvent {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(waitFor):
		t.Fatal("no catalog event")
		return catalogEvent{}
	}
}

func TestStatsWritesOnlyChangedShards(t *testing.T) {
	s := etcdtest.Connect(t, etcdtest.Start(t))
	ctx := t.Context()
	written := map[string]string{}

	got, err := s.GetStats(ctx)
	require.NoError(t, err)
	require.Empty(t, got)

	n, err := s.PutStats(ctx, map[string][]byte{"org/a": []byte("a1"), "org/b": []byte("b1")}, written)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	revs := modRevisions(t, s)

	n, err = s.PutStats(ctx, map[string][]byte{"org/a": []byte("a1"), "org/b": []byte("b1")}, written)
	require.NoError(t, err)
	require.Zero(t, n, "nothing changed: nothing written")
	require.Equal(t, revs, modRevisions(t, s))

	n, err = s.PutStats(ctx, map[string][]byte{"org/a": []byte("a2"), "org/b": []byte("b1")}, written)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	after := modRevisions(t, s)
	require.Greater(t, after["org/a"], revs["org/a"], "the changed shard is written")
	require.Equal(t, revs["org/b"], after["org/b"], "the unchanged shard is not")

	got, err = s.GetStats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string][]byte{"org/a": []byte("a2"), "org/b": []byte("b1")}, got)

	// A replica that starts afresh (empty written) rewrites everything once.
	n, err = s.PutStats(ctx, got, map[string]string{})
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

func modRevisions(t *testing.T, s *store.Store) map[string]int64 {
	t.Helper()
	get, err := s.Client().Get(t.Context(), store.StatsPrefix, clientv3.WithPrefix())
	require.NoError(t, err)
	out := map[string]int64{}
	for _, kv := range get.Kvs {
		out[string(kv.Key[len(store.StatsPrefix):])] = kv.ModRevision
	}
	return out
}

// TestMembershipEndsWithItsReplica: a replica is listed while it lives; a
// clean stop removes it at once, and one that dies without a word drops out
// when its lease expires.
func TestMembershipEndsWithItsReplica(t *testing.T) {
	endpoint := etcdtest.Start(t)
	observer := etcdtest.Connect(t, endpoint)
	members := func() map[string]store.Member {
		m, err := observer.Members(t.Context())
		require.NoError(t, err)
		return m
	}

	t.Run("clean stop", func(t *testing.T) {
		s := etcdtest.Connect(t, endpoint)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// A lease far longer than the wait below: only its revocation can
		// remove the key in time.
		require.NoError(t, s.Register(ctx, "clean", store.Member{Addr: "10.0.0.1:9090", Region: "eu-west"}, 600))
		require.Equal(t, store.Member{Addr: "10.0.0.1:9090", Region: "eu-west"}, members()["clean"], "the key says where and in which region the replica runs")
		cancel()
		require.Eventually(t, func() bool { _, ok := members()["clean"]; return !ok }, waitFor, 20*time.Millisecond,
			"a replica that stopped is no longer listed")
	})

	t.Run("crash", func(t *testing.T) {
		s, err := store.Connect(t.Context(), []string{endpoint}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		require.NoError(t, s.Register(ctx, "crashed", store.Member{Addr: "10.0.0.2:9090"}, 2))
		require.Contains(t, members(), "crashed")
		// The connection goes away with no revocation: the lease runs out.
		require.NoError(t, s.Close())
		require.Eventually(t, func() bool { _, ok := members()["crashed"]; return !ok }, waitFor, 20*time.Millisecond,
			"a replica that died drops out when its lease expires")
	})
}

// TestMembershipComesBackAfterItsLeaseIsLost: a replica whose lease ends
// while it lives (a pause past its TTL, an etcd outage, here a revocation by
// another client) registers again under a new lease, and keeps that one
// alive.
func TestMembershipComesBackAfterItsLeaseIsLost(t *testing.T) {
	endpoint := etcdtest.Start(t)
	observer := etcdtest.Connect(t, endpoint)
	s := etcdtest.Connect(t, endpoint)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	require.NoError(t, s.Register(ctx, "paused", store.Member{Addr: "10.0.0.3:9090"}, 2))

	lease := func() clientv3.LeaseID {
		get, err := observer.Client().Get(t.Context(), store.MembersPrefix+"paused")
		require.NoError(t, err)
		if len(get.Kvs) == 0 {
			return clientv3.NoLease
		}
		m, err := store.DecodeMember(get.Kvs[0].Value)
		require.NoError(t, err)
		require.Equal(t, "10.0.0.3:9090", m.Addr)
		return clientv3.LeaseID(get.Kvs[0].Lease)
	}
	first := lease()
	require.NotEqual(t, clientv3.NoLease, first)
	_, err := observer.Client().Revoke(t.Context(), first)
	require.NoError(t, err)

	var second clientv3.LeaseID
	require.Eventually(t, func() bool {
		second = lease()
		return second != clientv3.NoLease && second != first
	}, waitFor, 20*time.Millisecond, "the replica registers again under a new lease")
	// The new lease is kept alive: past several of its 2 s TTLs, still there.
	ttl, err := observer.Client().TimeToLive(t.Context(), second)
	require.NoError(t, err)
	require.Positive(t, ttl.TTL)
	// Polled here, not by require.Never, whose last poll may run after the
	// test ended and its context with it.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		<-tick.C
		require.Equal(t, second, lease(), "the new lease is kept alive")
	}
}
