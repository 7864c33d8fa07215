package dispatch

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// chargeDispatcher is a dispatcher over the fake broker that neither
// pauses nor counts retries.
func chargeDispatcher(rec *recorder, b *broker) *Dispatcher {
	return New(Options{Client: &http.Client{}, Getenv: func(string) string { return secret }, Reporter: rec,
		Broker: b, Ledger: chargeLedger{b}, ReserveTimeout: time.Minute, FirstTokenTimeout: time.Second, MaxAttempts: 4, RetryWait: -1})
}

// chargeLedger is a Ledger that delivers reconciliations to the fake
// broker, as the Report stream does.
type chargeLedger struct{ b *broker }

func (chargeLedger) Hold(string)                                    {}
func (chargeLedger) Applied(*switchboardv1.ReconcileRequest, int64) {}
func (l chargeLedger) Reconcile(r *switchboardv1.ReconcileRequest) {
	_, _ = l.b.Reconcile(context.Background(), r)
}

// deferredAndCharged counts the broker's reconciles by endpoint id (the
// fake broker's reservation ids end with it; Decide's is on a/m): those
// deferred, and the others (a charge of a deferred failure, or a failure
// reconciled at once).
func deferredAndCharged(b *broker) (deferred, charged map[string]int) {
	deferred, charged = map[string]int{}, map[string]int{}
	for _, rc := range b.released() {
		ep := strings.TrimPrefix(rc.GetReservationId(), "rsv-gen-1|")
		if rc.GetReservationId() == "rsv-decide" {
			ep = "a/m" // Decide's, on the first endpoint
		}
		if rc.GetFailureDeferred() {
			deferred[ep]++
		} else {
			charged[ep]++
		}
	}
	return deferred, charged
}

// The same failure from two endpoints is the request's: the client hears
// it at once, with no call to the rest of the plan and no Retry-After, and
// neither endpoint is benched or paused for it.
func TestRepeatedFailureIsTheRequests(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   fakeupstream.Mode
		status int
	}{
		{name: "500", mode: fakeupstream.InternalError, status: http.StatusInternalServerError},
		{name: "bare 401", mode: fakeupstream.Unauthorized, status: http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ups, eps := upstreams(t, 3)
			for _, u := range ups {
				u.SetMode(tc.mode)
			}
			rec, b := &recorder{}, newBroker()
			w := httptest.NewRecorder()
			err := chargeDispatcher(rec, b).Serve(t.Context(), w, admitted(t, plainBody), eps)
			var f *Failure
			require.ErrorAs(t, err, &f)
			require.Equal(t, tc.status, f.Status, f.Message)
			require.Equal(t, codeRepeated, f.Code)
			require.Contains(t, f.Message, "failed on 2 providers with the same error")
			require.Zero(t, f.RetryAfter, "nothing to wait for")
			require.Len(t, ups[0].Requests(), 1)
			require.Len(t, ups[1].Requests(), 1)
			require.Empty(t, ups[2].Requests(), "not tried on the rest of the fleet")
			require.Equal(t, "1", w.Header().Get(retryHeader))

			reps := rec.all()
			require.Len(t, reps, 2)
			for _, r := range reps {
				require.True(t, r.GetRequestFailure(), "%s: the request's failure, not the endpoint's", r.GetEndpointId())
			}
			deferred, charged := deferredAndCharged(b)
			require.Equal(t, map[string]int{"a/m": 1, "b/m": 1}, deferred, "capacity given back at once, nothing paused")
			require.Empty(t, charged, "and no pause applied afterwards")
		})
	}
}

// A held failure is the endpoint's when another endpoint then serves: its
// report goes out as before and its deferred pause is applied.
func TestHeldFailureChargedWhenAnotherServes(t *testing.T) {
	ups, eps := upstreams(t, 2)
	ups[0].SetMode(fakeupstream.InternalError)
	rec, b := &recorder{}, newBroker()
	w := httptest.NewRecorder()
	require.NoError(t, chargeDispatcher(rec, b).Serve(t.Context(), w, admitted(t, plainBody), eps))
	require.Equal(t, "b", w.Header().Get("X-Switchboard-Provider"))
	reps := rec.all()
	require.Len(t, reps, 2)
	for _, r := range reps {
		require.False(t, r.GetRequestFailure())
	}
	require.Eventually(t, func() bool {
		_, charged := deferredAndCharged(b)
		return charged["a/m"] == 1
	}, 10*time.Second, time.Millisecond, "a's deferred failure is charged to it")
	for _, rc := range b.released() {
		if rc.GetReservationId() == "rsv-decide" && !rc.GetFailureDeferred() {
			require.Equal(t, switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD, rc.GetFailure())
		}
	}
}

// Failures that are never the request's keep today's rule: a 503 (a
// provider saying it is overloaded) on every endpoint tries them all, and
// each is charged at once.
func TestOverloadOnEveryEndpointTriesThemAll(t *testing.T) {
	ups, eps := upstreams(t, 3)
	for _, u := range ups {
		u.SetMode(fakeupstream.Unavailable)
	}
	rec, b := &recorder{}, newBroker()
	err := chargeDispatcher(rec, b).Serve(t.Context(), httptest.NewRecorder(), admitted(t, plainBody), eps)
	var f *Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, http.StatusServiceUnavailable, f.Status)
	for _, u := range ups {
		require.Len(t, u.Requests(), 1)
	}
	for _, r := range rec.all() {
		require.False(t, r.GetRequestFailure())
	}
	deferred, _ := deferredAndCharged(b)
	require.Empty(t, deferred, "nothing deferred: a 503 is the endpoint's")
}

// Two failures alike need not be consecutive: a 500, a bare 401, a 500 is
// the request's 500; the 401 between them is its endpoint's.
func TestRepeatedFailureAcrossAnother(t *testing.T) {
	ups, eps := upstreams(t, 4)
	ups[0].SetMode(fakeupstream.InternalError)
	ups[1].SetMode(fakeupstream.Unauthorized)
	ups[2].SetMode(fakeupstream.InternalError)
	rec, b := &recorder{}, newBroker()
	err := chargeDispatcher(rec, b).Serve(t.Context(), httptest.NewRecorder(), admitted(t, plainBody), eps)
	var f *Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, http.StatusInternalServerError, f.Status, f.Message)
	require.True(t, f.Final, "the request's own failure: a retry fails it again")
	require.Empty(t, ups[3].Requests())
	byEndpoint := map[string]bool{}
	for _, r := range rec.all() {
		byEndpoint[r.GetEndpointId()] = r.GetRequestFailure()
	}
	require.Equal(t, map[string]bool{"a/m": true, "b/m": false, "c/m": true}, byEndpoint)
	require.Eventually(t, func() bool {
		_, charged := deferredAndCharged(b)
		return charged["b/m"] == 1
	}, 10*time.Second, time.Millisecond, "b's 401 is b's")
	_, charged := deferredAndCharged(b)
	require.Zero(t, charged["a/m"]+charged["c/m"])
}
