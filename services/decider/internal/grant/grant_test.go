package grant

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-ai/switchboard/pkg/offline"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

func signer(t *testing.T, key byte) *Signer {
	t.Helper()
	s, err := New(bytes.Repeat([]byte{key}, keySize))
	require.NoError(t, err)
	return s
}

// testCaps are the caps the grant tests issue with.
var testCaps = &switchboardv1.DecisionCaps{MaxInputTokens: 200_000, MaxOutputTokens: 8192, MaxCostUsd: 0.5, MaxAttemptsCostUsd: 1.25}

func TestIssueAndVerify(t *testing.T) {
	s := signer(t, 1)
	g := s.Issue("req-1", "acme", "key-1", testCaps)
	require.Len(t, g, Size)
	require.True(t, s.Verify(g, "req-1", "acme", "key-1", testCaps))
	require.True(t, s.Verify(g, "req-1", "acme", "key-1", proto.CloneOf(testCaps)), "by value, not by pointer")
	require.Equal(t, g, s.Issue("req-1", "acme", "key-1", testCaps), "deterministic")
	// The tag's bytes are fixed: replicas of every version issue and
	// accept the same grants.
	require.Equal(t, "e64da0929ff251d970f9c64382bb51ff", fmt.Sprintf("%x", g))
	// A request id too long for the pooled buffer to keep verifies too.
	longID := strings.Repeat("r", 2*maxPooledInput)
	require.True(t, s.Verify(s.Issue(longID, "acme", "key-1", testCaps), longID, "acme", "key-1", testCaps))

	for _, c := range [][3]string{
		{"req-2", "acme", "key-1"}, {"req-1", "globex", "key-1"}, {"req-1", "acme", "key-2"},
		// The same bytes split otherwise.
		{"req-1a", "cme", "key-1"}, {"req-", "1acme", "key-1"}, {"", "", ""},
	} {
		require.False(t, s.Verify(g, c[0], c[1], c[2], testCaps), "%v", c)
	}
	// Any cap changed, the grant does not verify.
	for _, change := range []func(*switchboardv1.DecisionCaps){
		func(c *switchboardv1.DecisionCaps) { c.MaxInputTokens++ },
		func(c *switchboardv1.DecisionCaps) { c.MaxOutputTokens = 1_000_000_000 },
		func(c *switchboardv1.DecisionCaps) { c.MaxCostUsd = 999 },
		func(c *switchboardv1.DecisionCaps) { c.MaxAttemptsCostUsd *= 2 },
	} {
		c := proto.CloneOf(testCaps)
		change(c)
		require.False(t, s.Verify(g, "req-1", "acme", "key-1", c), "%v", c)
	}
	require.False(t, s.Verify(g, "req-1", "acme", "key-1", nil))
	require.False(t, signer(t, 2).Verify(g, "req-1", "acme", "key-1", testCaps), "another key")
	require.False(t, s.Verify(nil, "req-1", "acme", "key-1", testCaps))
	require.False(t, s.Verify(g[:Size-1], "req-1", "acme", "key-1", testCaps))
	long := append(append([]byte(nil), g...), 0)
	require.False(t, s.Verify(long, "req-1", "acme", "key-1", testCaps))

	_, err := New(make([]byte, 16))
	require.Error(t, err)
}

// TestFirstFormatGrantsDoNotVerify: a grant of the first format (no caps,
// domain "switchboard activity grant v1") never verifies, whatever caps a
// record carries with it, so a record of a decision that bound no caps is
// never stored unbounded.
func TestFirstFormatGrantsDoNotVerify(t *testing.T) {
	key := bytes.Repeat([]byte{1}, keySize)
	h := hmac.New(sha256.New, key)
	in := []byte("switchboard activity grant v1")
	for _, f := range []string{"req-1", "acme", "key-1"} {
		in = binary.AppendUvarint(in, uint64(len(f)))
		in = append(in, f...)
	}
	h.Write(in)
	v1 := h.Sum(nil)[:Size]
	require.Equal(t, "ae0683e7adfb9ef605c814b5d5b4597a", fmt.Sprintf("%x", v1), "the first format's grant, as its replicas issued it")
	s := signer(t, 1)
	for _, c := range []*switchboardv1.DecisionCaps{nil, {}, testCaps} {
		require.False(t, s.Verify(v1, "req-1", "acme", "key-1", c), "%v", c)
	}
}

func TestFilter(t *testing.T) {
	s := signer(t, 1)
	rec := func(id, tenant, keyID string, grantTenant string) *switchboardv1.ActivityRecord {
		return &switchboardv1.ActivityRecord{Id: id, TenantId: tenant, ApiKeyId: keyID, Caps: testCaps,
			Grant: s.Issue(id, grantTenant, keyID, testCaps), Usage: &switchboardv1.Usage{InputTokens: 10, OutputTokens: 5, CostUsd: 0.01}, CostUsd: 0.01}
	}
	good := rec("a", "acme", "k", "acme")
	forged := rec("b", "acme", "k", "globex")
	none := &switchboardv1.ActivityRecord{Id: "c", TenantId: "acme", ApiKeyId: "k"}
	noTenant := rec("d", "", "", "")
	raised := rec("e", "acme", "k", "acme")
	raised.Caps = &switchboardv1.DecisionCaps{MaxInputTokens: 1 << 40, MaxOutputTokens: 1 << 40, MaxCostUsd: 1e5, MaxAttemptsCostUsd: 1e5}
	over := rec("f", "acme", "k", "acme")
	over.CostUsd, over.Usage.CostUsd = 999, 999
	in := []*switchboardv1.ActivityRecord{forged, good, none, noTenant, raised, over}
	kept, refused := s.Filter(in)
	require.Equal(t, []*switchboardv1.ActivityRecord{good}, kept)
	require.Equal(t, Refused{Ungranted: 4, OverCaps: 1, Why: refused.Why}, refused)
	require.Equal(t, 5, refused.Total())
	require.ErrorContains(t, refused.Why, "cost_usd beyond the decision's cap of 0.5 USD")
	require.Nil(t, good.GetGrant(), "not stored")
	require.Nil(t, good.GetCaps(), "not stored")
	require.Equal(t, forged, in[0], "the batch is left as it was")
}

// TestFilterOffline: a record of a call served offline carries the grant
// of the earlier decision it was served by, and is kept when it names that
// decision's request and was made after it, within offline.MaxGrace.
func TestFilterOffline(t *testing.T) {
	s := signer(t, 1)
	t0 := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	id := func(at time.Time) string { return fmt.Sprintf("gen-%012xabcdefghijklmnop", at.UnixMilli()) }
	decided := id(t0)
	rec := func(at time.Time, grantFor string) *switchboardv1.ActivityRecord {
		return &switchboardv1.ActivityRecord{Id: id(at), GrantRequestId: grantFor, TenantId: "acme", ApiKeyId: "k", Caps: testCaps,
			Grant: s.Issue(decided, "acme", "k", testCaps), Usage: &switchboardv1.Usage{InputTokens: 10, OutputTokens: 5, CostUsd: 0.01}, CostUsd: 0.01}
	}
	served := rec(t0.Add(time.Minute), decided)
	unnamed := rec(t0.Add(time.Minute), "")
	late := rec(t0.Add(offline.MaxGrace+time.Second), decided)
	early := rec(t0.Add(-time.Second), decided)
	other := rec(t0.Add(time.Minute), id(t0.Add(time.Second)))
	kept, refused := s.Filter([]*switchboardv1.ActivityRecord{unnamed, late, served, early, other})
	require.Equal(t, []*switchboardv1.ActivityRecord{served}, kept)
	require.Equal(t, 4, refused.Ungranted)
	require.Empty(t, served.GetGrantRequestId(), "not stored")
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
	g := signers[0].Issue("req", "acme", "k", testCaps)
	for _, s := range signers {
		require.NotNil(t, s)
		require.True(t, s.Verify(g, "req", "acme", "k", testCaps))
	}
	resp, err := cli.Get(t.Context(), KeyPath)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.Equal(t, int64(1), resp.Kvs[0].Version, "written once")
}
