package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
)

// snapshotStored reports whether the broker's owner saved a snapshot.
func snapshotStored(t testing.TB, d *Decider) bool {
	get, err := d.store.Client().Get(t.Context(), admission.SnapshotKey)
	require.NoError(t, err)
	return len(get.Kvs) == 1
}

// lockedBuffer is a log sink safe to read while the decider writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// field returns the value of key in the first JSON log line whose msg is msg.
func (l *lockedBuffer) field(msg, key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			s, _ := m[key].(string)
			return s
		}
	}
	return ""
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runDecider runs the decider as main does, until the returned stop is
// called (as SIGTERM cancels main's context); stop waits for Run to return.
func runDecider(t *testing.T, args ...string) (switchboardv1.DeciderClient, *lockedBuffer, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &lockedBuffer{}
	done := make(chan error, 1)
	args = append([]string{"--token-file", writeToken(t, testReplicaToken)}, args...)
	go func() { done <- Run(ctx, args, logs) }()
	var addr string
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			require.NoError(t, err, logs.String())
			t.Fatal("the decider stopped")
		default:
		}
		addr = logs.field("decider serving", "addr")
		return addr != ""
	}, 60*time.Second, 10*time.Millisecond)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer.Token(testEdgeToken)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return switchboardv1.NewDeciderClient(conn), logs, stop
}

// TestCleanStopHandsOverAtFullCapacity stops a decider the way SIGTERM does
// and starts the next one on the same data: the final snapshot and the clean
// marker must be written, so the next owner starts at once, at full
// capacity, without learning mode.
func TestCleanStopHandsOverAtFullCapacity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"--listen", "127.0.0.1:0", "--etcd-listen", "127.0.0.1:0", "--data-dir", dir, "--drain-delay", "0",
		"--exploration", "-1", "--id", "test", "--probe-interval", "0"}
	c, _, stop := runDecider(t, append(args, "--catalog", writeLimited(t, dir, "4"))...)
	require.NotNil(t, decideReserve(t, c, 0).Reservation)
	stop()

	start := time.Now()
	c, logs, _ := runDecider(t, args...)
	first := decideReserve(t, c, 1)
	t.Logf("clean stop: %v from restart to the first admitted Reserve", time.Since(start))
	require.NotNil(t, first.Reservation)
	// 1 of the tenant's 4 a day was used before the stop: 3 left, all
	// admitted. In learning mode only 1 more would be.
	require.NotNil(t, decideReserve(t, c, 2).Reservation)
	require.NotNil(t, decideReserve(t, c, 3).Reservation)
	require.NotNil(t, decideReserve(t, c, 4).Refusal)
	require.NotContains(t, logs.String(), "learning mode")
	require.False(t, strings.Contains(logs.String(), "ownership lost"))
}

// firstAdmission retries a reserving Decide until one is admitted and
// returns how long that took from start.
func firstAdmission(t testing.TB, c switchboardv1.DeciderClient, start time.Time, n int) time.Duration {
	t.Helper()
	var took time.Duration
	require.Eventually(t, func() bool {
		resp, err := c.Decide(t.Context(), decideRequest(n))
		took = time.Since(start)
		return err == nil && resp.GetReservation() != nil
	}, 30*time.Second, 5*time.Millisecond)
	return took
}

// BenchmarkRestartToFirstAdmission measures the time from starting a
// decider on the data of one that stopped to its first admitted Reserve:
// after a clean stop (clean-s: immediate, the old owner resigned) and after
// a crash (crash-s: bounded by the old election session's TTL, 3 s).
// Figures, not assertions: make bench, or
// go test -run '^$' -bench FirstAdmission ./services/decider/app/
func BenchmarkRestartToFirstAdmission(b *testing.B) {
	benchFirstAdmission(b, func(crash bool) time.Duration {
		dir := b.TempDir()
		d, c := startDecider(b, Config{Catalog: writeLimited(b, dir, "100"), DataDir: dir, BrokerSessionTTL: 3 * time.Second})
		require.NotNil(b, decideReserve(b, c, 0).Reservation)
		require.Eventually(b, func() bool { return snapshotStored(b, d) }, 10*time.Second, 10*time.Millisecond)
		if crash {
			d.Kill()
		} else {
			d.Close()
		}
		start := time.Now()
		d, c = startDecider(b, Config{DataDir: dir, BrokerSessionTTL: 3 * time.Second})
		defer d.Close()
		return firstAdmission(b, c, start, 1)
	})
}

// BenchmarkFailoverToFirstAdmission measures how long the surviving
// replica of two on one etcd takes to admit after the owner stopped cleanly
// (clean-s) or crashed (crash-s), no restart involved. Figures, not
// assertions: make bench, or
// go test -run '^$' -bench FirstAdmission ./services/decider/app/
func BenchmarkFailoverToFirstAdmission(b *testing.B) {
	benchFirstAdmission(b, func(crash bool) time.Duration {
		dir := b.TempDir()
		a, ca := startDecider(b, Config{Catalog: writeLimited(b, dir, "100"), DataDir: dir, BrokerSessionTTL: 3 * time.Second})
		defer a.Close()
		s, cs := startDecider(b, Config{Etcd: []string{a.EtcdEndpoint()}, DataDir: b.TempDir(), BrokerSessionTTL: 3 * time.Second})
		defer s.Close()
		require.True(b, a.adm.Owner())
		require.NotNil(b, decideReserve(b, ca, 0).Reservation)
		start := time.Now()
		if crash {
			a.adm.Abandon() // the owner's process is gone; etcd (embedded in it here) lives on
		} else {
			a.adm.Close()
		}
		return firstAdmission(b, cs, start, 1)
	})
}

// benchFirstAdmission runs one handover after a clean stop and one after a
// crash per iteration, and reports the mean time each took to the first
// admission (run's result) as clean-s and crash-s.
func benchFirstAdmission(b *testing.B, run func(crash bool) time.Duration) {
	var clean, crashed time.Duration
	n := 0
	for b.Loop() {
		n++
		clean += run(false)
		crashed += run(true)
	}
	b.ReportMetric(clean.Seconds()/float64(n), "clean-s")
	b.ReportMetric(crashed.Seconds()/float64(n), "crash-s")
}

// sendActivity sends one activity batch on a Report stream of c and waits
// for its acknowledgement.
func sendActivity(t *testing.T, c switchboardv1.DeciderClient, seq uint64, records ...*switchboardv1.ActivityRecord) {
	t.Helper()
	stream, err := c.Report(t.Context())
	require.NoError(t, err)
	defer func() { _ = stream.CloseSend() }()
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: "edge-1"}}}))
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: &switchboardv1.ActivityBatch{Records: records, Sequence: seq}}}))
	for {
		m, err := stream.Recv()
		require.NoError(t, err)
		if m.GetAck().GetActivitySequence() == seq {
			return
		}
	}
}

// hedgeRecord is an edge's record of a hedged request decided by d.
// testCaps are the caps of the decisions the tests grant records for
// themselves: wider than any of their bills.
var testCaps = &switchboardv1.DecisionCaps{MaxInputTokens: 1 << 20, MaxOutputTokens: 1 << 20, MaxCostUsd: 100, MaxAttemptsCostUsd: 100}

func hedgeRecord(d *Decider, id string, loserUSD float64) *switchboardv1.ActivityRecord {
	return &switchboardv1.ActivityRecord{Id: id, CreateTime: timestamppb.Now(), TenantId: "acme", Model: "vendor/model",
		Hedge: &switchboardv1.HedgeInfo{Used: true, LoserCostUsd: loserUSD}, Caps: testCaps, Grant: d.grants.Issue(id, "acme", "", testCaps)}
}

// TestHedgeBudgetLivesWithTheOwner: the hedge budget is charged on the owner
// of the broker, settled there whichever replica received the activity, and
// restored, pending charges included, by the replica that takes over.
func TestHedgeBudgetLivesWithTheOwner(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := startDecider(t, Config{Catalog: writeLimited(t, dir, "100"), DataDir: dir, HedgeBudgetUSD: 5, HedgeBudgetBurst: unpaced})
	defer a.Close()
	b, cb := startDecider(t, Config{Etcd: []string{a.EtcdEndpoint()}, DataDir: t.TempDir(), HedgeBudgetUSD: 5, HedgeBudgetBurst: unpaced})
	defer b.Close()
	require.True(t, a.adm.Owner())

	acquire := func(id string, usd float64) {
		resp, err := cb.AcquireHedge(t.Context(), &switchboardv1.AcquireHedgeRequest{RequestId: id, EstimatedCostUsd: usd})
		require.NoError(t, err)
		require.True(t, resp.Granted, "%v", resp)
	}
	spent := func(d *Decider) float64 { s, _, _, _ := d.HedgeBudget(); return s }

	// Charged on the owner; the activity reaches the other replica, and the
	// settlement must still replace the owner's estimate.
	acquire("h1", 1)
	require.InDelta(t, 1, spent(a), 1e-9)
	sendActivity(t, cb, 1, hedgeRecord(b, "h1", 0.1))
	require.Eventually(t, func() bool { return math.Abs(spent(a)-0.1) < 1e-9 }, 10*time.Second, 10*time.Millisecond,
		"settled on the owner: spent %v", spent(a))

	// Another charge, saved with the broker's snapshot; then the owner crashes.
	acquire("h2", 2)
	require.Eventually(t, func() bool {
		get, err := b.store.Client().Get(t.Context(), admission.BudgetKey)
		require.NoError(t, err)
		var st statev1.HedgeBudgetState
		if len(get.Kvs) != 1 || proto.Unmarshal(get.Kvs[0].Value, &st) != nil {
			return false
		}
		_, ok := st.GetPendingUsd()["h2"]
		return ok
	}, 10*time.Second, 10*time.Millisecond)
	a.adm.Abandon()
	require.Eventually(t, b.adm.Owner, 20*time.Second, 10*time.Millisecond)
	require.InDelta(t, 2.1, spent(b), 1e-9, "restored at takeover")
	// The pending charge came along: its settlement applies on the new owner.
	sendActivity(t, cb, 2, hedgeRecord(b, "h2", 0.5))
	require.Eventually(t, func() bool { return math.Abs(spent(b)-0.6) < 1e-9 }, 10*time.Second, 10*time.Millisecond,
		"settled on the new owner: spent %v", spent(b))
}

// TestDeciderAdmitsAgainAfterLosingItsSession: the only decider's election
// session ends (as after a pause longer than its TTL); it must take the
// broker back by itself and admit again, without a restart.
func TestDeciderAdmitsAgainAfterLosingItsSession(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, c := startDecider(t, Config{Catalog: writeLimited(t, dir, "100"), DataDir: dir})
	defer d.Close()
	require.NotNil(t, decideReserve(t, c, 0).Reservation)

	cli := d.store.Client()
	owner, err := cli.Get(t.Context(), admission.ElectionPrefix, append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
	require.NoError(t, err)
	require.Len(t, owner.Kvs, 1)
	_, err = cli.Revoke(t.Context(), clientv3.LeaseID(owner.Kvs[0].Lease))
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		get, err := cli.Get(t.Context(), admission.ElectionPrefix, append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
		require.NoError(t, err)
		return len(get.Kvs) == 1 && get.Kvs[0].CreateRevision > owner.Kvs[0].CreateRevision
	}, 20*time.Second, 10*time.Millisecond, "campaigns again")
	firstAdmission(t, c, time.Now(), 1)
}
