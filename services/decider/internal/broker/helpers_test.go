package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

// t0 is a Tuesday noon UTC, on a minute boundary so ramp periods line up.
var t0 = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

// clock is a fake clock that only moves when told to.
type clock = fakeclock.Clock

const (
	tenant   = "acme"
	keyID    = "key-0123456789ab"
	endpoint = "alpha/m1"
	model    = "m1"
)

var who = Identity{TenantID: tenant, APIKeyID: keyID, App: "chat", Environment: "prod", Partner: "resell", Class: ClassInteractive}

// newBroker builds a broker on a fake clock at t0 (or start, when given).
func newBroker(t testing.TB, specs []Spec, opts ...func(*Options)) (*Broker, *clock) {
	t.Helper()
	c := fakeclock.New(t0)
	o := Options{Now: c.Now, DisableCorrection: true, Rand: func() float64 { return 0.5 }}
	for _, f := range opts {
		f(&o)
	}
	b, err := New(Config{Buckets: specs, Routes: []Route{{EndpointID: endpoint, Model: model}}}, o)
	require.NoError(t, err)
	return b, c
}

func req(d Demand) ReserveRequest {
	return ReserveRequest{RequestID: "req", Identity: who, Model: model, EndpointID: endpoint, Demand: d}
}

// level returns a bucket's level as of the broker's now: available units,
// or what a ramp's current period admitted.
func level(t testing.TB, b *Broker, id string) float64 {
	t.Helper()
	bk := b.tab.Load().byID[id]
	require.NotNil(t, bk, "no bucket %s", id)
	bk.mu.Lock()
	defer bk.mu.Unlock()
	bk.advance(b.nowNS())
	return bk.level
}

// reserveN tries n reservations of d and returns how many were admitted and
// the last refusal.
func reserveN(t *testing.T, b *Broker, n int, d Demand) (int, *Refusal, []*Reservation) {
	t.Helper()
	var admitted int
	var last *Refusal
	var rs []*Reservation
	for range n {
		r, ref, err := b.Reserve(t.Context(), req(d))
		require.NoError(t, err)
		if r != nil {
			admitted++
			rs = append(rs, r)
		} else {
			last = ref
		}
	}
	return admitted, last, rs
}

var one = Demand{Requests: 1}
