package broker

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

// attempt is a Reserve of the logical request "req" on ep, as its n-th attempt.
func attempt(ep string, n int, key string) ReserveRequest {
	r := req(one)
	r.EndpointID, r.Attempt, r.IdempotencyKey = ep, n, key
	return r
}

func TestRetryBudget(t *testing.T) {
	t.Run("the default budget is two retries, counted per attempt number", func(t *testing.T) {
		b, _ := newBroker(t, nil)
		for n := 1; n <= 3; n++ {
			res, ref, err := b.Reserve(t.Context(), attempt(endpoint, n, ""))
			require.NoError(t, err)
			require.Nil(t, ref, "attempt %d", n)
			require.NotNil(t, res)
		}
		_, ref, err := b.Reserve(t.Context(), attempt("beta/m1", 4, ""))
		require.NoError(t, err)
		require.NotNil(t, ref, "a third retry is past the budget, on any endpoint")
		require.Equal(t, ReasonNonRetryableRequest, ref.Reason)
		require.Equal(t, CodeRetryBudget, ref.Code)
		require.Contains(t, ref.Message, "used its retries (2")
		require.Equal(t, codeOf(ref), "retry_budget", "the code reaches the caller")

		other := attempt(endpoint, 2, "")
		other.RequestID = "another"
		_, ref, err = b.Reserve(t.Context(), other)
		require.NoError(t, err)
		require.Nil(t, ref, "another logical request has its own budget")
		other.Identity.TenantID = "other-tenant"
		other.RequestID = "req"
		_, ref, err = b.Reserve(t.Context(), other)
		require.NoError(t, err)
		require.Nil(t, ref, "the same request id of another tenant has its own budget")
	})

	t.Run("a replayed Reserve does not spend the budget twice", func(t *testing.T) {
		b, _ := newBroker(t, nil)
		first, _, err := b.Reserve(t.Context(), attempt(endpoint, 2, "req|alpha|2"))
		require.NoError(t, err)
		again, ref, err := b.Reserve(t.Context(), attempt(endpoint, 2, "req|alpha|2"))
		require.NoError(t, err)
		require.Nil(t, ref)
		require.Equal(t, first.ID, again.ID, "the idempotent replay returns the same reservation")
		// The same attempt number again without a key (a retried RPC, or the
		// attempt moving on to the next endpoint) is not counted again either.
		_, ref, err = b.Reserve(t.Context(), attempt("beta/m1", 2, ""))
		require.NoError(t, err)
		require.Nil(t, ref)
		_, ref, err = b.Reserve(t.Context(), attempt(endpoint, 3, ""))
		require.NoError(t, err)
		require.Nil(t, ref, "attempt 3 is the second retry")
		_, ref, err = b.Reserve(t.Context(), attempt(endpoint, 4, ""))
		require.NoError(t, err)
		require.NotNil(t, ref)
		require.Equal(t, CodeRetryBudget, ref.Code)
	})

	t.Run("a refused attempt does not spend the budget", func(t *testing.T) {
		b, c := newBroker(t, []Spec{{Scope: ScopeModelRoute, Key: endpoint, Unit: UnitRequests, Window: WindowMinute, Capacity: 1}})
		_, ref, err := b.Reserve(t.Context(), attempt(endpoint, 1, ""))
		require.NoError(t, err)
		require.Nil(t, ref)
		for n := 2; n <= 5; n++ {
			_, ref, err = b.Reserve(t.Context(), attempt(endpoint, n, ""))
			require.NoError(t, err)
			require.NotNil(t, ref)
			require.Equal(t, ReasonRetryableCapacity, ref.Reason, "refused by the route's capacity, attempt %d", n)
		}
		c.Advance(time.Minute)
		_, ref, err = b.Reserve(t.Context(), attempt(endpoint, 6, ""))
		require.NoError(t, err)
		require.Nil(t, ref, "no refused attempt counted")
	})

	t.Run("budgets per class", func(t *testing.T) {
		c := fakeclock.New(t0)
		b, err := New(Config{Routes: []Route{{EndpointID: endpoint, Model: model}}, Classes: []ClassContract{
			{Class: ClassInteractive, RetryBudget: -1},
			{Class: ClassBatch, RetryBudget: 4},
			{Class: ClassBackground},
		}}, Options{Now: c.Now, DisableCorrection: true, Rand: func() float64 { return 0.5 }})
		require.NoError(t, err)
		retries := func(cls WorkloadClass) int {
			n := 0
			for a := 2; a < 20; a++ {
				r := attempt(endpoint, a, "")
				r.RequestID = fmt.Sprint("class-", int(cls))
				r.Identity.Class = cls
				_, ref, err := b.Reserve(t.Context(), r)
				require.NoError(t, err)
				if ref != nil {
					require.Equal(t, CodeRetryBudget, ref.Code)
					require.Equal(t, cls, ref.Class)
					return n
				}
				n++
			}
			return n
		}
		require.Equal(t, 0, retries(ClassInteractive), "a negative budget: no retry")
		require.Equal(t, 0, retries(ClassUnspecified), "unspecified is interactive")
		require.Equal(t, 4, retries(ClassBatch))
		require.Equal(t, DefaultRetryBudget, retries(ClassBackground), "a budget of 0 is the default")
		require.Equal(t, DefaultRetryBudget, retries(ClassPartner), "no contract: the default")

		require.NoError(t, b.Reconfigure(Config{Routes: []Route{{EndpointID: endpoint, Model: model}},
			Classes: []ClassContract{{Class: ClassInteractive, RetryBudget: 1}}}))
		r := attempt(endpoint, 2, "")
		r.RequestID = "after"
		_, ref, err := b.Reserve(t.Context(), r)
		require.NoError(t, err)
		require.Nil(t, ref, "a catalog change replaces the budgets")
	})

	t.Run("a retry after a failure of the request itself is refused everywhere", func(t *testing.T) {
		b, _ := newBroker(t, nil)
		r := attempt("beta/m1", 2, "")
		r.PreviousFailure = ReasonNonRetryableRequest
		_, ref, err := b.Reserve(t.Context(), r)
		require.NoError(t, err)
		require.NotNil(t, ref)
		require.Equal(t, ReasonNonRetryableRequest, ref.Reason)
		require.Equal(t, CodeNonRetryable, ref.Code)
		r.PreviousFailure = ReasonNonRetryablePolicy
		_, ref, err = b.Reserve(t.Context(), r)
		require.NoError(t, err)
		require.Nil(t, ref, "a provider's policy refusal does not stop another endpoint")
	})

	t.Run("the state of a logical request expires", func(t *testing.T) {
		b, c := newBroker(t, nil)
		for i := range 100 {
			r := attempt(endpoint, 2, "")
			r.RequestID = string(rune('a'+i%26)) + string(rune('a'+i/26))
			_, ref, err := b.Reserve(t.Context(), r)
			require.NoError(t, err)
			require.Nil(t, ref)
		}
		_, ref, err := b.Reserve(t.Context(), attempt(endpoint, 1, ""))
		require.NoError(t, err)
		require.Nil(t, ref)
		require.Equal(t, 100, b.RetryStates(), "first attempts leave no state")
		c.Advance(b.MaxTTL() - time.Millisecond)
		b.Expire(c.Now())
		require.Equal(t, 100, b.RetryStates())
		c.Advance(time.Millisecond)
		b.Expire(c.Now())
		require.Zero(t, b.RetryStates())
	})
}

// codeOf is the refusal's code as the Reserve RPC answers it.
func codeOf(ref *Refusal) string { return ref.Proto().GetCode() }

func TestClassifiedPause(t *testing.T) {
	reconcile := func(t *testing.T, b *Broker, rq ReserveRequest, o Outcome, f RefusalReason, hs ...Header) *Settlement {
		t.Helper()
		res, ref, err := b.Reserve(t.Context(), rq)
		require.NoError(t, err)
		require.Nil(t, ref)
		st, err := b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Outcome: o, Failure: f, Headers: hs, ProviderErrorCode: "x"})
		require.NoError(t, err)
		return st
	}

	t.Run("a provider's policy refusal pauses its route for MaxPause, and only its route", func(t *testing.T) {
		b, c := newBroker(t, nil)
		st := reconcile(t, b, req(one), OutcomeRateLimited, ReasonNonRetryablePolicy)
		require.Equal(t, t0.Add(10*time.Minute+500*time.Millisecond), st.PausedUntil, "MaxPause plus jitter (capped at 1s)")
		_, ref, err := b.Reserve(t.Context(), attempt(endpoint, 2, ""))
		require.NoError(t, err)
		require.NotNil(t, ref)
		require.Equal(t, ReasonNonRetryablePolicy, ref.Reason)
		require.Equal(t, CodeProviderPaused, ref.Code)
		require.Equal(t, ScopeModelRoute, ref.Scope)
		_, ref, err = b.Reserve(t.Context(), attempt("beta/m1", 2, ""))
		require.NoError(t, err)
		require.Nil(t, ref, "another endpoint serves")
		c.Set(st.PausedUntil)
		_, ref, err = b.Reserve(t.Context(), attempt(endpoint, 3, ""))
		require.NoError(t, err)
		require.Nil(t, ref)
	})

	t.Run("a policy refusal with a known reset pauses until it", func(t *testing.T) {
		b, _ := newBroker(t, nil)
		st := reconcile(t, b, req(one), OutcomeRateLimited, ReasonNonRetryablePolicy,
			Header{"x-ratelimit-remaining-requests", "0"}, Header{"x-ratelimit-reset-requests", "3m"})
		require.Equal(t, t0.Add(3*time.Minute+500*time.Millisecond), st.PausedUntil, "the reset plus jitter")
	})

	t.Run("a failure of the request does not pause the route", func(t *testing.T) {
		b, _ := newBroker(t, nil)
		st := reconcile(t, b, req(one), OutcomeClientError, ReasonNonRetryableRequest)
		require.True(t, st.PausedUntil.IsZero())
	})

	t.Run("overload without Retry-After backs off exponentially, with 429s", func(t *testing.T) {
		b, c := newBroker(t, nil)
		want := []time.Duration{time.Second + 50*time.Millisecond, 2*time.Second + 100*time.Millisecond, 4*time.Second + 200*time.Millisecond}
		outcomes := []Outcome{OutcomeUpstreamError, OutcomeRateLimited, OutcomeConnectError}
		failures := []RefusalReason{ReasonRetryableOverload, ReasonRetryableCapacity, ReasonRetryableOverload}
		for i, w := range want {
			st := reconcile(t, b, req(one), outcomes[i], failures[i])
			require.Equal(t, c.Now().Add(w), st.PausedUntil, "failure %d", i+1)
			_, ref, err := b.Reserve(t.Context(), req(one))
			require.NoError(t, err)
			require.Equal(t, failures[i], ref.Reason)
			c.Set(st.PausedUntil)
		}
		reconcile(t, b, req(one), OutcomeOK, ReasonUnspecified)
		st := reconcile(t, b, req(one), OutcomeUpstreamError, ReasonRetryableOverload)
		require.Equal(t, c.Now().Add(want[0]), st.PausedUntil, "a success resets the back-off")
	})

	t.Run("an unclassified 5xx without headers does not pause, as before", func(t *testing.T) {
		b, _ := newBroker(t, nil)
		st := reconcile(t, b, req(one), OutcomeUpstreamError, ReasonUnspecified)
		require.True(t, st.PausedUntil.IsZero())
	})

	t.Run("the back-off is capped and its jitter bounded", func(t *testing.T) {
		for _, r := range []float64{0, 0.999999} {
			b, c := newBroker(t, nil, func(o *Options) { o.Rand = func() float64 { return r } })
			for n := 1; n <= 8; n++ {
				at := c.Now()
				st := reconcile(t, b, req(one), OutcomeUpstreamError, ReasonRetryableOverload)
				base := min(time.Second<<(n-1), 30*time.Second)
				pause := st.PausedUntil.Sub(at)
				require.GreaterOrEqual(t, pause, base, "overload %d in a row", n)
				require.LessOrEqual(t, pause, base+min(time.Second, base/10))
				c.Set(st.PausedUntil)
			}
		}
	})

	// Retry-After is a lower bound honoured to the second: a Reserve a
	// millisecond before it is refused, one after it and its jitter admitted.
	for _, tt := range []struct {
		name    string
		outcome Outcome
		failure RefusalReason
		header  Header
		wait    time.Duration
	}{
		{"529 with Retry-After", OutcomeUpstreamError, ReasonRetryableOverload, Header{"retry-after", "7"}, 7 * time.Second},
		{"503 with an HTTP-date Retry-After", OutcomeUpstreamError, ReasonRetryableOverload, Header{"retry-after", t0.Add(12 * time.Second).Format(http.TimeFormat)}, 12 * time.Second},
		{"429 with Retry-After", OutcomeRateLimited, ReasonRetryableCapacity, Header{"retry-after", "3"}, 3 * time.Second},
	} {
		for _, r := range []float64{0, 0.5, 0.999999} {
			t.Run(tt.name, func(t *testing.T) {
				b, c := newBroker(t, nil, func(o *Options) { o.Rand = func() float64 { return r } })
				st := reconcile(t, b, req(one), tt.outcome, tt.failure, tt.header)
				jitter := st.PausedUntil.Sub(t0) - tt.wait
				require.GreaterOrEqual(t, jitter, time.Duration(0), "Retry-After is a lower bound")
				require.LessOrEqual(t, jitter, min(time.Second, tt.wait/10), "jitter within min(MaxJitter, 10%%)")
				c.Set(t0.Add(tt.wait - time.Millisecond))
				_, ref, err := b.Reserve(t.Context(), req(one))
				require.NoError(t, err)
				require.NotNil(t, ref, "refused a millisecond before Retry-After")
				require.Equal(t, tt.failure, ref.Reason)
				require.Equal(t, CodeProviderPaused, ref.Code)
				require.Equal(t, st.PausedUntil, ref.Reset)
				c.Set(t0.Add(tt.wait + jitter))
				_, ref, err = b.Reserve(t.Context(), req(one))
				require.NoError(t, err)
				require.Nil(t, ref, "admitted once Retry-After and its jitter passed")
			})
		}
	}
}

func TestRetryDeadline(t *testing.T) {
	b, _ := newBroker(t, nil)
	res, _, err := b.Reserve(t.Context(), req(one))
	require.NoError(t, err)
	_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Outcome: OutcomeUpstreamError,
		Failure: ReasonRetryableOverload, Headers: []Header{{"retry-after", "20"}}})
	require.NoError(t, err)

	short, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, ref, err := b.Reserve(short, attempt(endpoint, 2, ""))
	require.NoError(t, err)
	require.NotNil(t, ref)
	require.Equal(t, ReasonDeadline, ref.Reason, "5s left, paused for 20s: refused at once")
	require.Equal(t, CodeDeadline, ref.Code)
	require.Equal(t, 20*time.Second+500*time.Millisecond, ref.RetryAfter, "still says when the route is back")
	require.Contains(t, ref.Message, "longer than the request's deadline")

	_, ref, err = b.Reserve(short, attempt(endpoint, 1, ""))
	require.NoError(t, err)
	require.Equal(t, CodeProviderPaused, ref.Code, "a first attempt's deadline is the decision's, not the request's")
	long, cancel2 := context.WithTimeout(t.Context(), time.Minute)
	defer cancel2()
	_, ref, err = b.Reserve(long, attempt(endpoint, 2, ""))
	require.NoError(t, err)
	require.Equal(t, CodeProviderPaused, ref.Code, "a caller that can wait is told to wait")
	_, ref, err = b.Reserve(t.Context(), attempt(endpoint, 2, ""))
	require.NoError(t, err)
	require.Equal(t, CodeProviderPaused, ref.Code, "no deadline, nothing to compare")
	_, ref, err = b.Reserve(short, attempt("beta/m1", 2, ""))
	require.NoError(t, err)
	require.Nil(t, ref, "another route is not paused")
}

func TestRetryFieldsFromProto(t *testing.T) {
	r := ReserveRequestFromProto(&switchboardv1.ReserveRequest{Attempt: 3,
		PreviousFailure: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD})
	require.Equal(t, 3, r.Attempt)
	require.Equal(t, ReasonRetryableOverload, r.PreviousFailure)
	rc := ReconcileRequestFromProto(&switchboardv1.ReconcileRequest{
		Failure: switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY, ProviderErrorCode: "insufficient_quota"})
	require.Equal(t, ReasonNonRetryablePolicy, rc.Failure)
	require.Equal(t, "insufficient_quota", rc.ProviderErrorCode)
}
