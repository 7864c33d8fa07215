package dispatch

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// pausedThenBudget answers like the broker for a request whose only
// endpoint keeps failing: each retry is first refused for the route's
// pause, then admitted once asked again, and the third retry is past the
// budget.
func pausedThenBudget(pause time.Duration) func(*switchboardv1.ReserveRequest) *switchboardv1.Refusal {
	asked := map[int32]bool{}
	return func(in *switchboardv1.ReserveRequest) *switchboardv1.Refusal {
		a := in.GetAttempt()
		switch {
		case a >= 4:
			return &switchboardv1.Refusal{Reason: switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST,
				Code: codeRetryBudget, Message: "the request used its retries"}
		case a >= 2 && !asked[a]:
			asked[a] = true
			return &switchboardv1.Refusal{Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD,
				Code: codeProviderPaused, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_MODEL_ROUTE,
				RetryAfter: durationpb.New(pause), Message: "provider capacity: the provider asked to pause this route"}
		}
		return nil
	}
}

func TestRetrySameEndpointAfterItsPause(t *testing.T) {
	ups, eps := upstreams(t, 1)
	ups[0].SetMode(fakeupstream.Unavailable)
	rec, b := &recorder{}, newBroker()
	b.answer = pausedThenBudget(20 * time.Millisecond)
	d := New(Options{Client: &http.Client{}, Getenv: func(string) string { return secret }, Reporter: rec,
		Broker: b, ReserveTimeout: time.Minute, FirstTokenTimeout: time.Second, MaxAttempts: 8, RetryWait: time.Minute})
	w := httptest.NewRecorder()
	err := d.Serve(t.Context(), w, admitted(t, plainBody), eps[:1])
	var f *Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, http.StatusServiceUnavailable, f.Status, f.Message)
	require.Len(t, ups[0].Requests(), 3, "the first call and two retries, each after the endpoint's pause")
	require.Equal(t, "2", w.Header().Get(retryHeader))

	var seen []int32
	for _, r := range b.reserved() {
		seen = append(seen, r.GetAttempt())
		require.Equal(t, switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD, r.GetPreviousFailure())
		require.Equal(t, "gen-1|a/m|"+itoa(r.GetAttempt()), r.GetIdempotencyKey(), "a retry of an endpoint called before has a key of its own")
	}
	require.Equal(t, []int32{2, 2, 3, 3, 4}, seen, "each retry asked when refused for the pause, and again once it passed; the third past the budget ends it")
	for _, rc := range b.released() {
		require.Equal(t, switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD, rc.GetFailure())
	}
}

func TestRetrySameGivesUpPastItsWait(t *testing.T) {
	ups, eps := upstreams(t, 1)
	ups[0].SetMode(fakeupstream.RateLimited)
	rec, b := &recorder{}, newBroker()
	b.answer = pausedThenBudget(time.Hour)
	d := New(Options{Client: &http.Client{}, Getenv: func(string) string { return secret }, Reporter: rec,
		Broker: b, ReserveTimeout: time.Minute, FirstTokenTimeout: time.Second, RetryWait: time.Second})
	w := httptest.NewRecorder()
	err := d.Serve(t.Context(), w, admitted(t, plainBody), eps[:1])
	var f *Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, http.StatusTooManyRequests, f.Status)
	require.Len(t, ups[0].Requests(), 1, "a pause longer than the request may wait is not waited for")
	require.Greater(t, f.RetryAfter, 59*time.Minute, "Retry-After says when the endpoint is back: the broker's pause, later than the provider's 7s")
	require.Equal(t, "0", w.Header().Get(retryHeader))
}

func TestNoRetryAfterAPolicyRefusal(t *testing.T) {
	ups, eps := upstreams(t, 2)
	ups[0].SetMode(fakeupstream.SpendLimited)
	rec, b := &recorder{}, newBroker()
	b.answer = pausedThenBudget(time.Millisecond)
	d := New(Options{Client: &http.Client{}, Getenv: func(string) string { return secret }, Reporter: rec,
		Broker: b, ReserveTimeout: time.Minute, FirstTokenTimeout: time.Second, RetryWait: time.Minute})
	w := httptest.NewRecorder()
	require.NoError(t, d.Serve(t.Context(), w, admitted(t, plainBody), eps))
	require.Equal(t, "b", w.Header().Get("X-Switchboard-Provider"), "another provider serves")
	require.Len(t, ups[0].Requests(), 1, "the endpoint whose account refused is not called again")
	rel := b.released()
	require.Equal(t, switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY, rel[0].GetFailure())
	require.Equal(t, "insufficient_quota", rel[0].GetProviderErrorCode())

	// With no other endpoint, the request ends at once, without waiting.
	ups2, eps2 := upstreams(t, 1)
	ups2[0].SetMode(fakeupstream.SpendLimited)
	w = httptest.NewRecorder()
	err := d.Serve(t.Context(), w, admitted(t, plainBody), eps2)
	var f *Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, http.StatusBadGateway, f.Status, "the provider's account, not a limit the client could wait out")
	require.Zero(t, f.RetryAfter)
	require.Len(t, ups2[0].Requests(), 1)
}

func itoa(n int32) string { return string(rune('0' + n)) }

// The upstream HTTP client never stacks a retry of its own on the edge's:
// a provider that closes the connection after reading the request (on a
// connection kept alive from an earlier call, where Go's transport would
// resend an idempotent request) was sent the request once.
func TestUpstreamClientDoesNotRetry(t *testing.T) {
	ups, eps := upstreams(t, 1)
	rec := &recorder{}
	d := newDispatcher(rec, nil)
	require.NoError(t, d.Serve(t.Context(), httptest.NewRecorder(), newCall(t, plainBody), eps))
	require.Len(t, ups[0].Requests(), 1)
	ups[0].SetMode(fakeupstream.CloseWithoutAnswer)
	err := d.Serve(t.Context(), httptest.NewRecorder(), newCall(t, plainBody), eps)
	var f *Failure
	require.ErrorAs(t, err, &f)
	require.Len(t, ups[0].Requests(), 2, "the failed call reached the provider once")
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, rec.all()[1].GetOutcome(), rec.all()[1].GetError())
}
