package standby_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/standby"
)

// clock is a clock moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func answer(tenant string, cls switchboardv1.WorkloadClass, endpoint string) *switchboardv1.DecideResponse {
	return &switchboardv1.DecideResponse{
		RequestId:   "gen-0001",
		Endpoint:    &switchboardv1.Endpoint{Id: endpoint},
		Fallbacks:   []*switchboardv1.Endpoint{{Id: endpoint + "-2"}},
		Identity:    &switchboardv1.Identity{TenantId: tenant, WorkloadClass: cls},
		Decision:    &switchboardv1.Decision{Summary: "cheapest", Reason: switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING},
		Reservation: &switchboardv1.Reservation{ReservationId: "r1"},
		Grant:       []byte("grant"),
	}
}

const interactive = switchboardv1.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE

func newStandby(c *clock, o standby.Options) *standby.Standby {
	o.Now = c.now
	if o.Grace == 0 {
		o.Grace = time.Minute
	}
	if o.Classes == nil {
		o.Classes = map[switchboardv1.WorkloadClass]float64{interactive: 600}
	}
	return standby.New(o)
}

func TestServeWithinGrace(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)}
	s := newStandby(c, standby.Options{})
	orig := answer("acme", interactive, "ep-a")
	s.Remember("k1", orig)

	c.t = c.t.Add(59 * time.Second)
	got, err := s.Serve("k1", "gen-0002")
	require.NoError(t, err)
	require.Equal(t, "gen-0002", got.Resp.GetRequestId())
	require.Equal(t, "gen-0001", got.GrantRequestID)
	require.Equal(t, 59*time.Second, got.Age)
	require.Equal(t, "ep-a", got.Resp.GetEndpoint().GetId())
	require.Equal(t, "ep-a-2", got.Resp.GetFallbacks()[0].GetId())
	require.Equal(t, switchboardv1.RouteReason_ROUTE_REASON_OFFLINE, got.Resp.GetDecision().GetReason())
	require.Equal(t, "offline: cheapest", got.Resp.GetDecision().GetSummary())
	require.Nil(t, got.Resp.GetReservation(), "nothing is reserved offline")
	require.Equal(t, []byte("grant"), got.Resp.GetGrant())
	require.Equal(t, "r1", orig.GetReservation().GetReservationId(), "the remembered answer is left as it was")

	_, err = s.Serve("k2", "gen-0003")
	require.ErrorIs(t, err, standby.ErrNoAnswer, "another key")

	c.t = c.t.Add(time.Second + time.Millisecond)
	_, err = s.Serve("k1", "gen-0004")
	require.ErrorIs(t, err, standby.ErrNoAnswer, "past the grace")

	s.Remember("k1", answer("acme", interactive, "ep-b"))
	got, err = s.Serve("k1", "gen-0005")
	require.NoError(t, err)
	require.Equal(t, "ep-b", got.Resp.GetEndpoint().GetId(), "a newer answer replaces the old")
}

func TestRememberOnlyRoutingAnswers(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	s := newStandby(c, standby.Options{})
	refused := answer("acme", interactive, "ep-a")
	refused.Refusal = &switchboardv1.Refusal{Code: "tenant_limit"}
	noGrant := answer("acme", interactive, "ep-a")
	noGrant.Grant = nil
	noEndpoint := answer("acme", interactive, "ep-a")
	noEndpoint.Endpoint = nil
	for _, r := range []*switchboardv1.DecideResponse{refused, noGrant, noEndpoint} {
		s.Remember("k", r)
		_, err := s.Serve("k", "gen-2")
		require.ErrorIs(t, err, standby.ErrNoAnswer)
	}
}

func TestOffFailsClosed(t *testing.T) {
	s := standby.New(standby.Options{Classes: map[switchboardv1.WorkloadClass]float64{interactive: 600}})
	s.Remember("k", answer("acme", interactive, "ep-a"))
	_, err := s.Serve("k", "gen-2")
	require.ErrorIs(t, err, standby.ErrNoAnswer)
}

func TestClassClosed(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	s := newStandby(c, standby.Options{})
	s.Remember("k", answer("acme", switchboardv1.WorkloadClass_WORKLOAD_CLASS_PARTNER, "ep-a"))
	_, err := s.Serve("k", "gen-2")
	require.ErrorIs(t, err, standby.ErrClassClosed)
}

func TestLocalShare(t *testing.T) {
	tests := []struct {
		name        string
		opts        standby.Options
		admitted    int
		scope       string
		refillAfter time.Duration
	}{
		// 60 a minute across 4 edges: 15 now, one more every 4 s.
		{name: "tenant", opts: standby.Options{Share: 4, Classes: map[switchboardv1.WorkloadClass]float64{interactive: 60}},
			admitted: 15, scope: "tenant", refillAfter: 4 * time.Second},
		{name: "endpoint", opts: standby.Options{Share: 2, EndpointRPM: 12}, admitted: 6, scope: "endpoint", refillAfter: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			s := newStandby(c, tt.opts)
			s.Remember("k", answer("acme", interactive, "ep-a"))
			for i := range tt.admitted {
				_, err := s.Serve("k", "gen-x")
				require.NoError(t, err, "call %d", i)
			}
			_, err := s.Serve("k", "gen-x")
			var le *standby.LimitError
			require.True(t, errors.As(err, &le), "%v", err)
			require.Equal(t, tt.scope, le.Scope)
			require.Equal(t, tt.refillAfter, le.RetryAfter.Round(time.Millisecond))
			require.Contains(t, le.Error(), "offline share of the "+tt.scope+"'s requests per minute is spent")

			c.t = c.t.Add(tt.refillAfter)
			_, err = s.Serve("k", "gen-x")
			require.NoError(t, err, "one more after the refill")
			_, err = s.Serve("k", "gen-x")
			require.Error(t, err)
		})
	}
}

func TestAnswersBounded(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	s := newStandby(c, standby.Options{MaxAnswers: 2})
	s.Remember("a", answer("acme", interactive, "ep-a"))
	c.t = c.t.Add(2 * time.Minute)
	s.Remember("b", answer("acme", interactive, "ep-b"))
	s.Remember("c", answer("acme", interactive, "ep-c"))
	for _, k := range []string{"b", "c"} {
		_, err := s.Serve(k, "gen-x")
		require.NoError(t, err, "the expired answer made room: %s", k)
	}
	s.Remember("d", answer("acme", interactive, "ep-d"))
	kept := 0
	for _, k := range []string{"b", "c", "d"} {
		if _, err := s.Serve(k, "gen-x"); err == nil {
			kept++
		}
	}
	require.Equal(t, 2, kept)
}

func TestNoEndpointLimit(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	s := newStandby(c, standby.Options{Classes: map[switchboardv1.WorkloadClass]float64{interactive: 1000}})
	s.Remember("k", answer("acme", interactive, "ep-a"))
	for i := range 1000 {
		_, err := s.Serve("k", "gen-x")
		require.NoError(t, err, "call %d: only the tenant's share limits", i)
	}
	_, err := s.Serve("k", "gen-x")
	var le *standby.LimitError
	require.ErrorAs(t, err, &le)
	require.Equal(t, "tenant", le.Scope)
}

// TestShareExactUnderConcurrency: callers at once never get more than the
// share between them.
func TestShareExactUnderConcurrency(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	s := newStandby(c, standby.Options{Share: 2, Classes: map[switchboardv1.WorkloadClass]float64{interactive: 100}})
	s.Remember("k", answer("acme", interactive, "ep-a"))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := s.Serve("k", "gen-x"); err == nil {
					admitted.Add(1)
				}
				s.Remember("k", answer("acme", interactive, "ep-a"))
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(50), admitted.Load(), "half of 100 a minute, with the clock standing still")
}
