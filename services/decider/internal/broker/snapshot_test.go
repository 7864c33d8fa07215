package broker

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	b, _ := newBroker(t, snapshotSpecs())
	_, _, err := b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	good := b.Snapshot()
	flip := func(i int) []byte {
		c := append([]byte(nil), good...)
		c[i] ^= 0x40
		return c
	}
	// version is good marked as version v, its checksum right.
	version := func(good []byte, v byte) []byte {
		c := append([]byte(nil), good[:len(good)-4]...)
		c[len(snapshotMagic)] = v
		return binary.LittleEndian.AppendUint32(c, crc32.Checksum(c, castagnoli))
	}
	tests := []struct {
		name string
		blob []byte
		want error
	}{
		{name: "empty", blob: nil, want: ErrSnapshotVersion},
		{name: "not a broker snapshot", blob: []byte("{\"json\":true}"), want: ErrSnapshotVersion},
		{name: "another version", blob: append([]byte("SBRK\x09"), good[5:]...), want: ErrSnapshotVersion},
		// Versions 1 and 2 never shipped: refused, not read.
		{name: "version 1", blob: version(good, 1), want: ErrSnapshotVersion},
		{name: "version 2", blob: version(good, 2), want: ErrSnapshotVersion},
		{name: "a flipped bit", blob: flip(len(good) / 2), want: ErrSnapshotCorrupt},
		{name: "truncated", blob: good[:len(good)-7], want: ErrSnapshotCorrupt},
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
