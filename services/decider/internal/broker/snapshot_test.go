package broker

import (
	"bytes"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
)

// snapshotSpecs covers every rule.
func snapshotSpecs() []Spec {
	return append(hierarchy(),
		Spec{Scope: ScopeTenant, Key: tenant, Unit: UnitUSD, Window: WindowDay, Capacity: 5, ResetAt: 7 * time.Hour},
		Spec{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitTotalTokens, Ramp: &Ramp{MaxIncrease: 0.5, Floor: 100000}},
	)
}

// levels returns every bucket's raw state as of the broker's now.
func levels(t *testing.T, b *Broker) map[string][2]float64 {
	t.Helper()
	out := map[string][2]float64{}
	for _, bk := range b.tab.Load().buckets {
		bk.mu.Lock()
		bk.advance(b.nowNS())
		out[bk.id] = [2]float64{bk.level, bk.prev}
		bk.mu.Unlock()
	}
	return out
}

func TestSnapshotRoundTrip(t *testing.T) {
	b, c := newBroker(t, snapshotSpecs(), func(o *Options) { o.DisableCorrection = false })
	// Some traffic: open reservations, one reconciled (training correction),
	// a learned bucket and a pause on another route.
	var open []*Reservation
	for i := range 5 {
		rq := req(Demand{InputTokens: 100, OutputTokens: 200, USD: 0.5})
		if i == 0 {
			rq.IdempotencyKey = "idem"
		}
		r, ref, err := b.Reserve(t.Context(), rq)
		require.NoError(t, err)
		require.Nil(t, ref)
		open = append(open, r)
	}
	_, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: open[4].ID, Outcome: OutcomeOK,
		Usage:   Usage{InputTokens: 150, OutputTokens: 20, CostUSD: 0.1, Reported: true},
		Headers: []Header{{"x-ratelimit-limit-tokens", "90000"}, {"x-ratelimit-remaining-tokens", "80000"}}})
	require.NoError(t, err)
	open = open[:4]
	other := req(one)
	other.EndpointID = "beta/m1"
	paused, _, err := b.Reserve(t.Context(), other)
	require.NoError(t, err)
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: paused.ID, Outcome: OutcomeRateLimited, Headers: []Header{{"retry-after", "30"}}})
	require.NoError(t, err)
	c.Advance(10 * time.Second)

	blob := b.Snapshot()
	want := levels(t, b)
	in, out, usd, n := b.Factors(model, endpoint)

	// A new owner, built from the same configuration, at the same time.
	nb, err := New(Config{Buckets: snapshotSpecs(), Routes: []Route{{EndpointID: endpoint, Model: model}}}, Options{Now: c.Now, Rand: func() float64 { return 0.5 }})
	require.NoError(t, err)
	require.NoError(t, nb.Restore(blob, c.Now()))
	require.Equal(t, want, levels(t, nb))
	require.Equal(t, 4, nb.Open())
	nin, nout, nusd, nn := nb.Factors(model, endpoint)
	require.Equal(t, []float64{in, out, usd, float64(n)}, []float64{nin, nout, nusd, float64(nn)})
	require.Equal(t, SourceLearned, nb.tab.Load().byID["model_route:alpha/m1:total_tokens:minute:learned"].source)

	// Idempotency survives.
	rq := req(Demand{InputTokens: 100, OutputTokens: 200, USD: 0.5})
	rq.IdempotencyKey = "idem"
	again, _, err := nb.Reserve(t.Context(), rq)
	require.NoError(t, err)
	require.Equal(t, open[0].ID, again.ID)
	require.Equal(t, open[0].Charges, again.Charges)

	// The pause survives.
	_, ref, err := nb.Reserve(t.Context(), other)
	require.NoError(t, err)
	require.NotNil(t, ref)
	require.Equal(t, 20*time.Second+500*time.Millisecond, ref.RetryAfter)

	// Reconciling a restored reservation releases into the new owner's buckets.
	before := level(t, nb, "partner:resell:concurrent_requests")
	st, err := nb.Reconcile(t.Context(), ReconcileRequest{ReservationID: open[1].ID, Outcome: OutcomeOK, Usage: Usage{InputTokens: 100, OutputTokens: 200, CostUSD: 0.5}})
	require.NoError(t, err)
	require.Len(t, st.Released, len(open[1].Charges))
	require.Equal(t, before+1, level(t, nb, "partner:resell:concurrent_requests"))

	// Everything ends: expiry of the rest frees every concurrency slot.
	c.Advance(3 * time.Minute)
	require.Equal(t, 3, nb.Expire(c.Now()))
	require.Equal(t, 50.0, level(t, nb, "partner:resell:concurrent_requests"))
}

func TestRestoreLater(t *testing.T) {
	b, c := newBroker(t, snapshotSpecs())
	for _, ttl := range []time.Duration{time.Minute, 10 * time.Minute} {
		rq := req(Demand{InputTokens: 100})
		rq.TTL = ttl
		_, _, err := b.Reserve(t.Context(), rq)
		require.NoError(t, err)
	}
	blob := b.Snapshot()
	c.Advance(5 * time.Minute) // the failover took five minutes
	nb, _ := newBroker(t, snapshotSpecs(), func(o *Options) { o.Now = c.Now })
	require.NoError(t, nb.Restore(blob, c.Now()))
	require.Equal(t, 1, nb.Open(), "what expired meanwhile is expired at once")
	require.Equal(t, 49.0, level(t, nb, "partner:resell:concurrent_requests"))
	require.Equal(t, 1000.0, level(t, nb, "provider_project:alpha:input_tokens:minute"), "refilled during the failover")
}

func TestRestoreIntoChangedConfig(t *testing.T) {
	b, _ := newBroker(t, snapshotSpecs())
	r, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 600}))
	require.NoError(t, err)
	blob := b.Snapshot()
	specs := hierarchy()[:5] // the project and route buckets are gone
	specs[2].Capacity = 300  // and the tenant's limit is lower
	nb, _ := newBroker(t, specs)
	require.NoError(t, nb.Restore(blob, t0))
	require.Equal(t, 300.0, level(t, nb, "tenant:acme:input_tokens:minute"), "49400 left, clamped to the new limit")
	st, err := nb.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Usage: Usage{InputTokens: 600}})
	require.NoError(t, err)
	require.Len(t, st.Released, 5, "charges on removed buckets are dropped")
}

func TestRestoreErrors(t *testing.T) {
	// A reservation open, one reconciled (a correction, a learned bucket).
	b, _ := newBroker(t, snapshotSpecs(), func(o *Options) { o.DisableCorrection = false })
	rq := req(one)
	rq.IdempotencyKey = "k"
	_, _, err := b.Reserve(t.Context(), rq)
	require.NoError(t, err)
	r, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 100, OutputTokens: 200, USD: 0.5}))
	require.NoError(t, err)
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: r.ID, Outcome: OutcomeOK,
		Usage:   Usage{InputTokens: 150, OutputTokens: 20, CostUSD: 0.1, Reported: true},
		Headers: []Header{{"x-ratelimit-limit-tokens", "90000"}, {"x-ratelimit-remaining-tokens", "80000"}}})
	require.NoError(t, err)
	good := b.Snapshot()
	var m statev1.BrokerSnapshot
	require.NoError(t, proto.Unmarshal(good, &m))
	require.NotEmpty(t, m.Corrections, "the corrections are covered")
	// edit is good with f applied to its message.
	edit := func(f func(m *statev1.BrokerSnapshot)) []byte {
		c := proto.Clone(&m).(*statev1.BrokerSnapshot)
		f(c)
		blob, err := proto.Marshal(c)
		require.NoError(t, err)
		return blob
	}
	var learned *statev1.BrokerBucket
	for _, pb := range m.Buckets {
		if pb.Learned != nil {
			learned = pb
		}
	}
	require.NotNil(t, learned, "a learned bucket is covered")
	li := slices.Index(m.Buckets, learned)
	res := func(m *statev1.BrokerSnapshot) *statev1.BrokerReservation { return m.Reservations[0] }
	tests := []struct {
		name string
		blob []byte
		want error
	}{
		{name: "empty", blob: nil, want: ErrSnapshotVersion},
		{name: "not a broker snapshot", blob: []byte("{\"json\":true}"), want: ErrSnapshotCorrupt},
		{name: "the old binary format", blob: []byte("SBRK\x03\x00\x00\x00\x00"), want: ErrSnapshotCorrupt},
		{name: "truncated", blob: good[:len(good)-7], want: ErrSnapshotCorrupt},
		{name: "trailing bytes", blob: append(append([]byte(nil), good...), 0, 0), want: ErrSnapshotCorrupt},
		{name: "negative granted TTL", blob: edit(func(m *statev1.BrokerSnapshot) { m.GrantedTtlNano = -1 }), want: ErrSnapshotCorrupt},
		{name: "more states than buckets", blob: edit(func(m *statev1.BrokerSnapshot) { m.BucketIds = m.BucketIds[:1] }), want: ErrSnapshotCorrupt},
		{name: "bad bucket source", blob: edit(func(m *statev1.BrokerSnapshot) { m.Buckets[0].Source = 7 }), want: ErrSnapshotCorrupt},
		{name: "non-finite level", blob: edit(func(m *statev1.BrokerSnapshot) { m.Buckets[0].Level = math.NaN() }), want: ErrSnapshotCorrupt},
		{name: "learned bucket without its definition", blob: edit(func(m *statev1.BrokerSnapshot) { m.Buckets[li].Learned = nil }), want: ErrSnapshotCorrupt},
		{name: "learned bucket of another id", blob: edit(func(m *statev1.BrokerSnapshot) { m.Buckets[li].Learned.Key += "x" }), want: ErrSnapshotCorrupt},
		{name: "learned window out of range", blob: edit(func(m *statev1.BrokerSnapshot) { m.Buckets[li].Learned.Window += 256 }), want: ErrSnapshotCorrupt},
		{name: "bad route pause", blob: edit(func(m *statev1.BrokerSnapshot) { m.Routes[0].PauseReason = 99 }), want: ErrSnapshotCorrupt},
		{name: "bad reservation id", blob: edit(func(m *statev1.BrokerSnapshot) { res(m).Id = "r1" }), want: ErrSnapshotCorrupt},
		{name: "bad workload class", blob: edit(func(m *statev1.BrokerSnapshot) { res(m).Identity.Class = 9 }), want: ErrSnapshotCorrupt},
		{name: "negative demand", blob: edit(func(m *statev1.BrokerSnapshot) { res(m).Demand.InputTokens = -1 }), want: ErrSnapshotCorrupt},
		{name: "infinite cost", blob: edit(func(m *statev1.BrokerSnapshot) { res(m).Estimate.Usd = math.Inf(1) }), want: ErrSnapshotCorrupt},
		{name: "charge of no bucket", blob: edit(func(m *statev1.BrokerSnapshot) { res(m).Charges[0].Bucket = uint32(len(m.BucketIds)) }), want: ErrSnapshotCorrupt},
		{name: "negative charge", blob: edit(func(m *statev1.BrokerSnapshot) { res(m).Charges[0].Amount = -1 }), want: ErrSnapshotCorrupt},
		{name: "bad correction", blob: edit(func(m *statev1.BrokerSnapshot) { m.Corrections[0].Input = 0 }), want: ErrSnapshotCorrupt},
		{name: "bad queue time", blob: edit(func(m *statev1.BrokerSnapshot) {
			m.Queue = &statev1.BrokerQueue{VirtualTime: math.Inf(-1)}
		}), want: ErrSnapshotCorrupt},
		{name: "queued request without a key", blob: edit(func(m *statev1.BrokerSnapshot) {
			m.Queue = &statev1.BrokerQueue{Requests: []*statev1.BrokerQueued{{RequestId: "r"}}}
		}), want: ErrSnapshotCorrupt},
		{name: "invalid UTF-8", blob: func() []byte {
			c := append([]byte(nil), good...)
			i := bytes.Index(c, []byte(tenant))
			require.Positive(t, i)
			c[i] = 0xff
			return c
		}(), want: ErrSnapshotCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nb, _ := newBroker(t, snapshotSpecs())
			require.ErrorIs(t, nb.Restore(tt.blob, t0), tt.want)
			require.Equal(t, 0, nb.Open(), "nothing restored")
		})
	}
}

func TestLearningModeLastsTheLongestTTLGranted(t *testing.T) {
	specs := []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitRequests, Window: WindowDay, Capacity: 10}}
	old, _ := newBroker(t, specs)
	_, _, _ = reserveN(t, old, 2, one) // the default TTL, 2 minutes
	blob := old.Snapshot()

	// A new owner after an unclean stop: learning mode lasts the 2 minutes
	// the old owner's reservations live, not MaxTTL (15 minutes).
	b, c := newBroker(t, specs)
	require.NoError(t, b.Restore(blob, c.Now()))
	require.Equal(t, c.Now().Add(2*time.Minute), b.LearningUntil(c.Now()))

	// A longer TTL granted is remembered, and so is the old owner's own
	// learning mode when it ends later.
	rq := req(one)
	rq.TTL = 10 * time.Minute
	_, _, err := b.Reserve(t.Context(), rq)
	require.NoError(t, err)
	b.SetConservative(c.Now().Add(time.Hour))
	next, _ := newBroker(t, specs)
	require.NoError(t, next.Restore(b.Snapshot(), c.Now()))
	require.Equal(t, c.Now().Add(time.Hour), next.LearningUntil(c.Now()))
	b.SetConservative(time.Time{})
	next, _ = newBroker(t, specs)
	require.NoError(t, next.Restore(b.Snapshot(), c.Now()))
	require.Equal(t, c.Now().Add(10*time.Minute), next.LearningUntil(c.Now()))

	// Nothing granted: still at least the default TTL.
	idle, _ := newBroker(t, specs)
	next, _ = newBroker(t, specs)
	require.NoError(t, next.Restore(idle.Snapshot(), c.Now()))
	require.Equal(t, c.Now().Add(2*time.Minute), next.LearningUntil(c.Now()))
}

func TestRestoreReplacesOpenReservations(t *testing.T) {
	specs := []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitConcurrentRequests, Capacity: 3}}
	other, _ := newBroker(t, specs)
	_, _, _ = reserveN(t, other, 1, one)
	// A replica that owned the broker before still holds reservations the
	// owner since has settled: the restored snapshot replaces them.
	b, c := newBroker(t, specs)
	_, _, _ = reserveN(t, b, 2, one)
	require.NoError(t, b.Restore(other.Snapshot(), c.Now()))
	require.Equal(t, 1, b.Open())
	n, _, _ := reserveN(t, b, 5, one)
	require.Equal(t, 2, n)
}
