package app

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/etcdtest"
)

// queueCatalog is a tenant of one request at a time whose interactive
// requests wait up to a minute for it.
const queueCatalog = `
workload_classes:
  interactive: {max_wait: 1m, max_depth: 8}
models:
  - id: vendor/model
    endpoints:
      - provider: alpha
        base_url: http://127.0.0.1:1/v1
        price: {input: 0.2, output: 0.8}
tenants:
  - id: acme
    api_keys_sha256: [@KEY@]
    limits:
      - {unit: concurrent_requests, capacity: 1}
`

func queueReserve(id string, maxWait time.Duration) *switchboardv1.ReserveRequest {
	return &switchboardv1.ReserveRequest{
		RequestId: id, IdempotencyKey: id,
		Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(demoKey)}, Model: "vendor/model", EndpointId: "alpha/vendor/model",
		Demand: &switchboardv1.Demand{InputTokens: 10, OutputTokens: 10, Requests: 1}, Ttl: durationpb.New(10 * time.Minute),
		MaxWait: durationpb.New(maxWait),
	}
}

// TestStopHandsOverBeforeTheDrain stops the broker's owner, with the
// product's shutdown timeout, while a request waits in its queue. The owner
// must hand over before its server drains: the other replica becomes the
// owner while the old one is still stopping (its server holds the waiting
// call), the waiting request moves to the new owner's queue, and the new
// owner admits it — exactly once, with the reservation granted before the
// stop carried over in the final snapshot — before the old owner's Close
// returns.
func TestStopHandsOverBeforeTheDrain(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	dir := t.TempDir()
	a, ca := startDecider(t, Config{Etcd: []string{ep}, Catalog: writeKeyed(t, dir, queueCatalog), DataDir: dir,
		ShutdownTimeout: DefaultConfig().ShutdownTimeout})
	defer a.Close()
	b, cb := startDecider(t, Config{Etcd: []string{ep}, DataDir: t.TempDir()})
	defer b.Close()
	require.True(t, a.adm.Owner())
	require.False(t, b.adm.Owner())

	first, err := ca.Reserve(t.Context(), queueReserve("first", -1))
	require.NoError(t, err)
	require.True(t, first.GetAdmitted(), "%v", first.GetRefusal())

	type result struct {
		resp *switchboardv1.ReserveResponse
		err  error
	}
	waiting := make(chan result, 1)
	go func() {
		resp, err := ca.Reserve(t.Context(), queueReserve("second", 0))
		waiting <- result{resp, err}
	}()
	require.Eventually(t, func() bool { return len(a.broker.QueueDepths()) == 1 }, 20*time.Second, 10*time.Millisecond,
		"the second request waits in the owner's queue")

	closed := make(chan struct{})
	go func() {
		a.Close() // as SIGTERM does
		close(closed)
	}()

	// The new owner takes over, and the waiting request waits in its queue
	// now, while the old owner still stops: its server holds the call.
	require.Eventually(t, func() bool { return b.adm.Owner() && len(b.broker.QueueDepths()) == 1 }, 20*time.Second, 10*time.Millisecond,
		"the other replica owns the broker and the request waits there")
	select {
	case r := <-waiting:
		t.Fatalf("the waiting request ended during the handover: %v %v", r.resp, r.err)
	case <-closed:
		t.Fatal("the old owner stopped before the new one took over")
	default:
	}

	// The reservation granted before the stop is on the new owner; its end
	// frees the slot for the waiting request.
	_, err = cb.Reconcile(t.Context(), &switchboardv1.ReconcileRequest{
		ReservationId: first.GetReservation().GetReservationId(), Outcome: switchboardv1.Outcome_OUTCOME_OK,
	})
	require.NoError(t, err)
	r := <-waiting
	require.NoError(t, r.err)
	require.True(t, r.resp.GetAdmitted(), "%v", r.resp.GetRefusal())
	<-closed

	// Admitted once: the one slot is held.
	third, err := cb.Reserve(t.Context(), queueReserve("third", -1))
	require.NoError(t, err)
	require.False(t, third.GetAdmitted())
}
