package grant

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

func signer(t *testing.T, key byte) *Signer {
	t.Helper()
	s, err := New(bytes.Repeat([]byte{key}, keySize))
	require.NoError(t, err)
	return s
}

func TestIssueAndVerify(t *testing.T) {
	s := signer(t, 1)
	g := s.Issue("req-1", "acme", "key-1")
	require.Len(t, g, Size)
	require.True(t, s.Verify(g, "req-1", "acme", "key-1"))
	require.Equal(t, g, s.Issue("req-1", "acme", "key-1"), "deterministic")
	// The tag's bytes are fixed: replicas of every version issue and
	// accept the same grants.
	require.Equal(t, "ae0683e7adfb9ef605c814b5d5b4597a", fmt.Sprintf("%x", g))
	// A request id too long for the pooled buffer to keep verifies too.
	longID := strings.Repeat("r", 2*maxPooledInput)
	require.True(t, s.Verify(s.Issue(longID, "acme", "key-1"), longID, "acme", "key-1"))

	for _, c := range [][3]string{
		{"req-2", "acme", "key-1"}, {"req-1", "globex", "key-1"}, {"req-1", "acme", "key-2"},
		// The same bytes split otherwise.
		{"req-1a", "cme", "key-1"}, {"req-", "1acme", "key-1"}, {"", "", ""},
	} {
		require.False(t, s.Verify(g, c[0], c[1], c[2]), "%v", c)
	}
	require.False(t, signer(t, 2).Verify(g, "req-1", "acme", "key-1"), "another key")
	require.False(t, s.Verify(nil, "req-1", "acme", "key-1"))
	require.False(t, s.Verify(g[:Size-1], "req-1", "acme", "key-1"))
	long := append(append([]byte(nil), g...), 0)
	require.False(t, s.Verify(long, "req-1", "acme", "key-1"))

	_, err := New(make([]byte, 16))
	require.Error(t, err)
}

func TestFilter(t *testing.T) {
	s := signer(t, 1)
	good := &switchboardv1.ActivityRecord{Id: "a", TenantId: "acme", ApiKeyId: "k", Grant: s.Issue("a", "acme", "k")}
	forged := &switchboardv1.ActivityRecord{Id: "b", TenantId: "acme", ApiKeyId: "k", Grant: s.Issue("b", "globex", "k")}
	none := &switchboardv1.ActivityRecord{Id: "c", TenantId: "acme", ApiKeyId: "k"}
	noTenant := &switchboardv1.ActivityRecord{Id: "d", Grant: s.Issue("d", "", "")}
	in := []*switchboardv1.ActivityRecord{forged, good, none, noTenant}
	kept, dropped := s.Filter(in)
	require.Equal(t, []*switchboardv1.ActivityRecord{good}, kept)
	require.Equal(t, 3, dropped)
	require.Nil(t, good.GetGrant(), "not stored")
	require.Equal(t, forged, in[0], "the batch is left as it was")
}

// TestKeyNeverPrinted: the signer formats and logs without its key.
func TestKeyNeverPrinted(t *testing.T) {
	key := bytes.Repeat([]byte{0xab}, keySize)
	s, err := New(key)
	require.NoError(t, err)
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "signer", s)
	out := buf.String() + fmt.Sprint(s) + fmt.Sprintf("%v %+v %s", s, s, s)
	require.NotContains(t, out, string(key))
	require.NotContains(t, out, fmt.Sprintf("%x", key[:8]))
	require.NotContains(t, out, "171 171") // the bytes in decimal
}

// TestEveryReplicaLoadsTheSameKey: replicas starting together on one etcd
// end up with one key, created once.
func TestEveryReplicaLoadsTheSameKey(t *testing.T) {
	e, err := store.StartEmbedded(t.Context(), store.EmbeddedOptions{DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })

	const n = 8
	signers := make([]*Signer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := Load(t.Context(), cli)
			if err == nil {
				signers[i] = s
			}
		})
	}
	wg.Wait()
	g := signers[0].Issue("req", "acme", "k")
	for _, s := range signers {
		require.NotNil(t, s)
		require.True(t, s.Verify(g, "req", "acme", "k"))
	}
	resp, err := cli.Get(t.Context(), KeyPath)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.Equal(t, int64(1), resp.Kvs[0].Version, "written once")
}
