package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

const limitedCatalog = `
models:
  - id: vendor/model
    endpoints:
      - provider: alpha
        base_url: http://127.0.0.1:1/v1
        price: {input: 0.2, output: 0.8}
        limits: [{unit: requests, per: minute, capacity: 2}]
      - provider: beta
        base_url: http://127.0.0.1:2/v1
        price: {input: 0.3, output: 1.0}
tenants:
  - id: acme
    api_keys_sha256: [@KEY@]
    limits:
      - {unit: requests, per: day, capacity: 5}
`

func writeLimited(t testing.TB, dir string, tenantPerDay ...string) string {
	t.Helper()
	y := limitedCatalog
	if len(tenantPerDay) > 0 {
		y = strings.Replace(y, "per: day, capacity: 5}", "per: day, capacity: "+tenantPerDay[0]+"}", 1)
	}
	return writeKeyed(t, dir, y)
}

// writeKeyed writes the catalog y, with demoKey's hash for @KEY@ and the
// test's callers, as dir/catalog.yaml.
func writeKeyed(t testing.TB, dir, y string) string {
	t.Helper()
	p := filepath.Join(dir, "catalog.yaml")
	y = strings.ReplaceAll(y, "@KEY@", catalog.HashKey(demoKey))
	require.NoError(t, os.WriteFile(p, []byte(y+testCallers()), 0o600))
	return p
}

// noQueue makes the catalog at p's interactive class refuse at once
// rather than wait in its queue: a test whose deciders run on a stopped
// clock needs it, as a queue's deadline is on that clock and a request
// waiting there is never answered.
func noQueue(t testing.TB, p string) string {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("workload_classes:\n  interactive: {max_wait: 0s}\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return p
}

// rpcTimeout bounds each call a test makes, so a call the decider never
// answers fails that test with the call's name instead of hanging the
// package until its timeout.
const rpcTimeout = 20 * time.Second

// decideReserve is Decide with a reservation for request n, asked again
// while the answer is the refusal of an owner whose state is not saved
// yet (a snapshot write slow on a loaded machine), which says nothing of
// the limits a test checks.
func decideReserve(t testing.TB, c switchboardv1.DeciderClient, n int) *switchboardv1.DecideResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), rpcTimeout)
	defer cancel()
	for {
		resp, err := c.Decide(ctx, decideRequest(n))
		require.NoError(t, err, "Decide of request %d", n)
		if resp.GetRefusal().GetCode() != broker.CodeNotDurable {
			return resp
		}
		select {
		case <-ctx.Done():
			require.FailNow(t, "the owner's state was not saved in time", "Decide of request %d", n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func decideRequest(n int) *switchboardv1.DecideRequest {
	return &switchboardv1.DecideRequest{
		Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(demoKey)}, Model: "vendor/model",
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 100, MaxOutputTokens: 10}, Reserve: true,
		IdempotencyKey: "req-" + string(rune('a'+n)),
	}
}

func TestDecideReservesAndSkipsFullEndpoints(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A stopped clock: alpha's 2 a minute never refill during the test.
	clk := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	d, c := startDecider(t, Config{Catalog: noQueue(t, writeLimited(t, dir)), DataDir: dir, Now: clk.Now})
	defer d.Close()

	// alpha (cheapest) takes 2 requests a minute; the third goes to beta,
	// not back to the client.
	var got []string
	for i := range 4 {
		resp := decideReserve(t, c, i)
		require.Nil(t, resp.Refusal)
		require.NotNil(t, resp.Reservation)
		got = append(got, resp.Endpoint.Provider)
	}
	require.Equal(t, []string{"alpha", "alpha", "beta", "beta"}, got)

	// An idempotent retry returns the same reservation without charging.
	again := decideReserve(t, c, 3)
	require.Equal(t, "beta", again.Endpoint.Provider)

	// The tenant's own limit (5 a day) refuses the client, with metadata.
	resp := decideReserve(t, c, 4)
	require.NotNil(t, resp.Reservation)
	resp = decideReserve(t, c, 5)
	require.Nil(t, resp.Endpoint)
	require.NotNil(t, resp.Refusal)
	require.Equal(t, switchboardv1.LimitScope_LIMIT_SCOPE_TENANT, resp.Refusal.Scope)
	require.Equal(t, float64(5), resp.Refusal.Limit)
	require.Equal(t, float64(0), resp.Refusal.Remaining)
	require.NotNil(t, resp.Refusal.ResetTime)

	// Reconcile through the Report stream's call reports.
	stream, err := c.Report(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: "e"}}}))
	first := decideReserve(t, c, 0) // idempotent: the first reservation
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{Reports: []*switchboardv1.CallReport{{
		EndpointId: first.Endpoint.Id, Outcome: switchboardv1.Outcome_OUTCOME_OK, ReservationId: first.Reservation.ReservationId,
		Usage: &switchboardv1.Usage{InputTokens: 90, OutputTokens: 5, Reported: true},
	}}}}}))
	_, err = stream.Recv()
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := c.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{ReservationId: first.Reservation.ReservationId})
		return err != nil // already reconciled by the report
	}, 5*time.Second, 20*time.Millisecond)
}

// TestNotDurableRefusedAtOnceWithoutQueue: while the owner's state is not
// saved, a Decide of a class that does not queue is refused at once with
// broker_not_durable, and admitted once the state is saved. This is what
// the tests on a stopped clock rely on (noQueue, decideReserve): with the
// default interactive queue, that refusal (retry after 1 s) queues the
// request for the endpoint that refused it first, whose capacity a stopped
// clock never brings back, and the queue's deadline, on the same clock,
// never comes — the Decide that was never answered.
func TestNotDurableRefusedAtOnceWithoutQueue(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	// Snapshots hourly: none marks the state durable during the test.
	d, c := startDecider(t, Config{Catalog: noQueue(t, writeLimited(t, dir)), DataDir: dir, Now: clk.Now, BrokerSnapshotInterval: time.Hour})
	defer d.Close()
	require.Equal(t, "alpha", decideReserve(t, c, 0).Endpoint.Provider)
	require.Equal(t, "alpha", decideReserve(t, c, 1).Endpoint.Provider)

	d.broker.SetDurable(false) // as a failed snapshot write leaves it
	ctx, cancel := context.WithTimeout(t.Context(), rpcTimeout)
	defer cancel()
	resp, err := c.Decide(ctx, decideRequest(2))
	require.NoError(t, err)
	require.Nil(t, resp.Endpoint)
	require.Nil(t, resp.Queue, "not queued")
	require.Equal(t, broker.CodeNotDurable, resp.GetRefusal().GetCode(), "%v", resp.GetRefusal())

	d.broker.SetDurable(true)
	require.Equal(t, "beta", decideReserve(t, c, 2).Endpoint.Provider, "alpha is full")
}

// TestNotDurableQueuedWalksAgainOnceSaved: a request refused by every
// endpoint while the owner's state is not saved (broker_not_durable, the
// state's refusal, not an endpoint's) waits in its class's queue for the
// state to be saved, then is admitted on whichever endpoint has room —
// beta here — rather than waiting on alpha, the first that refused it,
// whose 2 a minute are used up (startAlphaFull).
func TestNotDurableQueuedWalksAgainOnceSaved(t *testing.T) {
	t.Parallel()
	d, c, _ := startAlphaFull(t)
	defer d.Close()

	d.broker.SetDurable(false) // as a failed snapshot write leaves it
	done := make(chan answer, 1)
	go func() { done <- decide(t, c, 2) }()
	// The request waits: for the state (or, as it did, in alpha's queue).
	require.Eventually(t, func() bool {
		return d.broker.DurableWaiters() > 0 || d.broker.QueueStats().Queued > 0
	}, rpcTimeout, 5*time.Millisecond, "the Decide waits")
	d.broker.SetDurable(true) // the next snapshot write succeeded

	admittedOnBeta(t, <-done)
}

// startAlphaFull starts a decider with the limited catalog and its default
// interactive queue on a stopped clock (clk), alpha's 2 a minute used up
// by requests 0 and 1: alpha never refills, and a queue deadline on that
// clock never comes. It snapshots hourly, so only the test marks its state
// durable again once it set it not durable.
func startAlphaFull(t *testing.T) (*Decider, switchboardv1.DeciderClient, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	d, c := startDecider(t, Config{Catalog: writeLimited(t, dir), DataDir: dir, Now: clk.Now, BrokerSnapshotInterval: time.Hour})
	require.Equal(t, "alpha", decideReserve(t, c, 0).Endpoint.Provider)
	require.Equal(t, "alpha", decideReserve(t, c, 1).Endpoint.Provider)
	return d, c, clk
}

// answer is a Decide's answer.
type answer struct {
	resp *switchboardv1.DecideResponse
	err  error
}

// decide is Decide with a reservation for request n, once, within
// rpcTimeout.
func decide(t *testing.T, c switchboardv1.DeciderClient, n int) answer {
	ctx, cancel := context.WithTimeout(t.Context(), rpcTimeout)
	defer cancel()
	resp, err := c.Decide(ctx, decideRequest(n))
	return answer{resp, err}
}

// admittedOnBeta checks that a was admitted on beta: alpha is full, beta
// has room.
func admittedOnBeta(t *testing.T, a answer) {
	t.Helper()
	require.NoError(t, a.err)
	require.Nil(t, a.resp.GetRefusal(), "%v", a.resp.GetRefusal())
	require.Equal(t, "beta", a.resp.GetEndpoint().GetProvider(), "alpha is full, beta has room")
	require.NotNil(t, a.resp.GetReservation())
}

// TestNotDurableForwardedWalksAgainOnceSaved is
// TestNotDurableQueuedWalksAgainOnceSaved through a replica that does not
// own the broker: it forwards each reservation to the owner, and walks
// every endpoint again after the refusal's retry-after rather than
// queueing on alpha there.
func TestNotDurableForwardedWalksAgainOnceSaved(t *testing.T) {
	t.Parallel()
	a, _, clk := startAlphaFull(t)
	defer a.Close()
	b, cb := startDecider(t, Config{Etcd: []string{a.EtcdEndpoint()}, DataDir: t.TempDir(), Now: clk.Now, BrokerSnapshotInterval: time.Hour})
	defer b.Close()
	require.True(t, a.adm.Owner())
	require.False(t, b.adm.Owner())

	a.broker.SetDurable(false)
	refused := a.broker.NotDurableRefusals()
	done := make(chan answer, 1)
	go func() { done <- decide(t, cb, 2) }()
	// Both endpoints refused the first walk.
	require.Eventually(t, func() bool { return a.broker.NotDurableRefusals() >= refused+2 }, rpcTimeout, 5*time.Millisecond)
	a.broker.SetDurable(true)
	admittedOnBeta(t, <-done)
}

// TestFailoverDoesNotOverAdmit runs two replicas on one etcd: the owner
// grants, crashes (no clean stop), the other takes over from the snapshot in
// learning mode and never admits beyond the capacity.
func TestFailoverDoesNotOverAdmit(t *testing.T) {
	t.Parallel()
	// Both replicas on a clock that stands still but for the microseconds
	// the test moves it: alpha's 2 a minute never refill, however slowly
	// the machine runs. Nothing queues (noQueue): a queue's deadline on
	// that clock would never come.
	clk := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	a, ca := startDecider(t, Config{Catalog: noQueue(t, writeLimited(t, dir, "100")), DataDir: dir, Now: clk.Now})
	defer a.Close()
	b, cb := startDecider(t, Config{Etcd: []string{a.EtcdEndpoint()}, DataDir: t.TempDir(), Now: clk.Now})
	defer b.Close()
	require.True(t, a.adm.Owner())
	require.False(t, b.adm.Owner())

	// Through the non-owner: forwarded to the owner.
	r1 := decideReserve(t, cb, 0)
	require.Equal(t, "alpha", r1.Endpoint.Provider)
	r2 := decideReserve(t, ca, 1)
	require.Equal(t, "alpha", r2.Endpoint.Provider)
	waitBrokerSaved(t, a, func() { clk.Advance(time.Microsecond) })

	// The owner dies without a clean stop: its election session ends but no
	// final snapshot or clean marker is written.
	a.adm.Abandon()

	require.Eventually(t, b.adm.Owner, 20*time.Second, 50*time.Millisecond, "the other replica takes over")
	// alpha's 2 per minute were both granted before the crash: still full.
	r3 := decideReserve(t, cb, 2)
	require.Nil(t, r3.Refusal)
	require.Equal(t, "beta", r3.Endpoint.Provider, "restored state: alpha is full")

	// Learning mode: the new owner keeps half of each bucket free until the
	// old owner's reservations must have expired, so the tenant's 100 a day
	// now admits only up to 50 in total.
	admitted := 3
	for i := 3; i < 120; i++ {
		if r := decideReserve(t, cb, i); r.Refusal == nil {
			admitted++
		}
	}
	require.Equal(t, 50, admitted)
}

// waitBrokerSaved waits until the broker state d holds now is saved in
// etcd: two saves after now, since the first may have been taken just before.
// The owner saves only a state that changed; the state records its time, so
// tick, called before each poll, moves a stopped clock on to make it change.
func waitBrokerSaved(t *testing.T, d *Decider, tick func()) {
	t.Helper()
	v0, err := d.BrokerSnapshotVersion(t.Context())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		tick()
		v, err := d.BrokerSnapshotVersion(t.Context())
		return err == nil && v >= v0+2
	}, 20*time.Second, 20*time.Millisecond, "the broker owner saves its state")
}

// TestRefusedReplicaCredentialIsNotTheCallers: a replica whose own
// credential the owner does not accept (a --token-file missing from the
// catalog's callers) cannot forward. The caller, whose credential and API
// key the replica did accept, hears UNAVAILABLE naming the replica's
// credential — never UNAUTHENTICATED, which an edge takes for its own
// credential or its client's API key being refused.
func TestRefusedReplicaCredentialIsNotTheCallers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := startDecider(t, Config{Catalog: writeLimited(t, dir, "100"), DataDir: dir})
	defer a.Close()
	b, cb := startDecider(t, Config{Etcd: []string{a.EtcdEndpoint()}, DataDir: t.TempDir(), TokenFile: writeToken(t, "not-a-caller")})
	defer b.Close()
	require.True(t, a.adm.Owner())

	_, err := cb.Decide(t.Context(), decideRequest(0))
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "replica's credential")
}

// TestLargerBrokerStateIsSaved: --broker-state-bytes raises how many
// reservations may be open at once; the embedded etcd and the client are
// configured to take the larger snapshot, which is saved whole.
//
// Not parallel: its 2 MiB snapshot writes must not queue behind the
// package's other deciders for the 30 s the test waits.
func TestLargerBrokerStateIsSaved(t *testing.T) {
	dir := t.TempDir()
	d, _ := startDecider(t, Config{Catalog: writeLimited(t, dir, "1000000"), DataDir: dir, BrokerStateBytes: 4 << 20})
	defer d.Close()
	require.True(t, d.adm.Owner())
	long := strings.Repeat("x", 100)
	for i := 0; ; i++ {
		used, _ := d.broker.StateBytes()
		if used > 2<<20 {
			break
		}
		require.Less(t, i, 100_000, "the state never grew past 2 MiB")
		resp, err := d.adm.Reserve(t.Context(), &switchboardv1.ReserveRequest{
			RequestId: fmt.Sprintf("%s-%d", long, i), IdempotencyKey: fmt.Sprintf("%s%s-%d", long, long, i),
			Identity: &switchboardv1.Identity{TenantId: "acme"}, Model: "vendor/model", EndpointId: "beta/vendor/model",
			Demand: &switchboardv1.Demand{InputTokens: 10, OutputTokens: 10, Requests: 1}, Ttl: durationpb.New(10 * time.Minute),
		})
		require.NoError(t, err)
		require.True(t, resp.GetAdmitted(), "reservation %d: %v", i, resp.GetRefusal())
	}
	state := len(d.broker.Snapshot())
	t.Logf("%d bytes of state", state)
	require.Greater(t, state, 3<<19, "more than etcd's default request limit")
	require.Eventually(t, func() bool {
		get, err := d.store.Client().Get(t.Context(), admission.SnapshotKey)
		return err == nil && len(get.Kvs) == 1 && len(get.Kvs[0].Value) > state-1024
	}, 30*time.Second, 50*time.Millisecond, "the whole state is saved")
	// Refused never; a write that ran out of its time on a loaded machine
	// is tried again, and the whole state was saved (above).
	st := d.adm.Snapshots()
	require.Zero(t, st.Failures-st.Slow, "snapshot writes refused")
}
