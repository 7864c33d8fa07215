package broker

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// maxReq is a reservation request whose every string is as long as the
// broker allows, unique by i.
func maxReq(i int) ReserveRequest {
	pad := func(prefix string, n int) string {
		s := prefix + strconv.Itoa(i) + "-"
		return s + strings.Repeat("x", n-len(s))
	}
	r := req(one)
	r.RequestID = pad("req", validate.MaxIDLen)
	r.IdempotencyKey = pad("key", validate.MaxKeyLen)
	return r
}

// TestStateStaysWithinItsLimit: open reservations with the longest ids and
// keys the broker takes fill its state up to the limit and no further; the
// next is refused (broker_full, retryable), the snapshot stays within the
// limit and restores, and a reservation that ends makes room again.
func TestStateStaysWithinItsLimit(t *testing.T) {
	const limit = 256 << 10
	specs := []Spec{
		{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowDay, Capacity: 1e9},
		{Scope: ScopeAPIKey, Key: keyID, Unit: UnitConcurrentRequests, Capacity: 1e9},
		{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitTotalTokens, Window: WindowMinute, Capacity: 1e12},
	}
	b, _ := newBroker(t, specs, func(o *Options) { o.MaxStateBytes = limit })
	var open []*Reservation
	var ref *Refusal
	for i := 0; ref == nil; i++ {
		require.Less(t, i, limit, "the broker never refused")
		r, rf, err := b.Reserve(t.Context(), maxReq(i))
		require.NoError(t, err)
		if r != nil {
			open = append(open, r)
		}
		ref = rf
	}
	require.Equal(t, CodeStateFull, ref.Code)
	require.Equal(t, ReasonRetryableCapacity, ref.Reason)
	require.NotEmpty(t, open)
	used, room := b.StateBytes()
	require.LessOrEqual(t, used, room)
	t.Logf("%d reservations of %d bytes at most fill %d of %d bytes of room", len(open), MaxEntryBytes(len(open[0].Charges)), used, room)

	snap := b.Snapshot()
	require.LessOrEqual(t, len(snap), limit)
	require.GreaterOrEqual(t, int64(len(snap)), used*3/4, "the bound is not far above what is written")
	nb, _ := newBroker(t, specs, func(o *Options) { o.MaxStateBytes = limit })
	require.NoError(t, nb.Restore(snap, t0))
	require.Equal(t, len(open), nb.Open())

	_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: open[0].ID, Outcome: OutcomeOK})
	require.NoError(t, err)
	r, rf, err := b.Reserve(t.Context(), maxReq(-1))
	require.NoError(t, err)
	require.Nil(t, rf, "a reservation that ended made room")
	require.NotNil(t, r)
}

// TestLongFieldsAreRefused: the broker bounds what it stores itself, not
// only through the gRPC boundary's checks.
func TestLongFieldsAreRefused(t *testing.T) {
	b, _ := newBroker(t, hierarchy())
	r := req(one)
	r.RequestID = strings.Repeat("r", validate.MaxIDLen+1)
	_, _, err := b.Reserve(t.Context(), r)
	require.ErrorIs(t, err, ErrInvalid)
	r = req(one)
	r.IdempotencyKey = strings.Repeat("k", 900<<10)
	_, _, _, err = b.ReserveWait(t.Context(), r)
	require.ErrorIs(t, err, ErrInvalid)
	require.Zero(t, b.Open())
}

// TestFieldsNotUTF8AreRefused: the snapshot's protobuf strings hold only
// UTF-8, so the broker refuses other strings rather than fail to save.
func TestFieldsNotUTF8AreRefused(t *testing.T) {
	b, _ := newBroker(t, hierarchy())
	r := req(one)
	r.RequestID = "req-\xff"
	_, _, err := b.Reserve(t.Context(), r)
	require.ErrorIs(t, err, ErrInvalid)
	r = req(one)
	r.IdempotencyKey = "\xc3("
	_, _, _, err = b.ReserveWait(t.Context(), r)
	require.ErrorIs(t, err, ErrInvalid)
	require.Zero(t, b.Open())
}

// TestNothingIsAdmittedWhileTheStateIsNotDurable: while the owner cannot
// save its state the broker refuses (broker_not_durable) and admits again
// once it can.
func TestNothingIsAdmittedWhileTheStateIsNotDurable(t *testing.T) {
	b, _ := newBroker(t, hierarchy())
	b.SetDurable(false)
	r, ref, err := b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	require.Nil(t, r)
	require.Equal(t, CodeNotDurable, ref.Code)
	require.Zero(t, b.Open())
	require.EqualValues(t, 1, b.NotDurableRefusals())
	b.SetDurable(true)
	r, ref, err = b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	require.Nil(t, ref)
	require.NotNil(t, r)
	require.EqualValues(t, 1, b.NotDurableRefusals())
}

// TestAwaitDurable: AwaitDurable answers at once while the state is saved,
// holds a caller while it is not, releases it when it is saved again, and
// lets it go (false) when its context ends first.
func TestAwaitDurable(t *testing.T) {
	b, _ := newBroker(t, hierarchy())
	require.True(t, b.AwaitDurable(t.Context()))

	b.SetDurable(false)
	b.SetDurable(false) // a second failed write keeps the same wait
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.False(t, b.AwaitDurable(ctx))

	done := make(chan bool, 1)
	go func() { done <- b.AwaitDurable(t.Context()) }()
	require.Eventually(t, func() bool { return b.DurableWaiters() == 1 }, 10*time.Second, time.Millisecond)
	select {
	case <-done:
		require.FailNow(t, "released while the state is not saved")
	default:
	}
	b.SetDurable(true)
	require.True(t, <-done)
	require.Zero(t, b.DurableWaiters())
	require.True(t, b.AwaitDurable(t.Context()))
}

// TestSizesBoundTheEncoding: what entrySize and queuedSize count for a
// reservation and a queued request whose every string is as long as the
// broker allows and every number at its longest is at least what the
// snapshot's protobuf encoding takes for them, and MaxEntryBytes is that.
func TestSizesBoundTheEncoding(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	id := Identity{TenantID: long(validate.MaxNameLen), APIKeyID: long(validate.MaxNameLen), App: long(validate.MaxNameLen),
		Environment: long(validate.MaxNameLen), Partner: long(validate.MaxNameLen), Class: -1}
	worst := Demand{InputTokens: -1, OutputTokens: -1, USD: math.MaxFloat64, Requests: -1}
	bk := &bucket{}
	const charges = 4
	e := &entry{res: Reservation{ID: newID(0), RequestID: long(validate.MaxIDLen), IdempotencyKey: long(validate.MaxKeyLen),
		Identity: id, Model: long(validate.MaxModelLen), EndpointID: long(validate.MaxModelLen),
		Estimate: worst, Demand: worst, Created: time.Unix(0, -1)}}
	for range charges {
		e.recs = append(e.recs, charge{b: bk, amount: math.MaxFloat64, epoch: -1})
	}
	names := map[*bucket]int{bk: math.MaxUint32}
	got := proto.Size(&statev1.BrokerSnapshot{Reservations: encodeEntries([]*entry{e}, []int64{-1}, names)})
	require.LessOrEqual(t, int64(got), entrySize(e))
	require.Equal(t, entrySize(e), MaxEntryBytes(charges))
	t.Logf("a reservation with %d charges: %d bytes encoded, %d counted", charges, got, entrySize(e))

	qe := &qentry{req: ReserveRequest{RequestID: long(validate.MaxIDLen), IdempotencyKey: long(validate.MaxKeyLen), Identity: id,
		Model: long(validate.MaxModelLen), EndpointID: long(validate.MaxModelLen), Demand: worst,
		TTL: -1, MaxWait: -1, Attempt: -1, PreviousFailure: -1},
		fallback: long(validate.MaxModelLen), enq: -1, deadline: -1,
		decision: QueueDecision{ID: long(64), Position: -1, EstimatedWait: -1}}
	sq := snapQueue{vt: math.MaxFloat64,
		flows: []snapFlow{{key: flowKey{class: -1, tenant: long(validate.MaxNameLen)}, vfin: math.MaxFloat64}},
		entries: []snapQueued{{req: qe.req, class: -1, enq: qe.enq, deadline: qe.deadline, fallback: qe.fallback,
			decision: qe.decision}}}
	got = proto.Size(&statev1.BrokerSnapshot{Queue: encodeQueue(sq)})
	require.LessOrEqual(t, int64(got), queueBaseSize+flowSize(sq.flows[0])+queuedSize(qe))
}
