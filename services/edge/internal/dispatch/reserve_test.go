package dispatch

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// broker is a Broker that admits every reservation (id "rsv-<key>") unless
// told to refuse or fail an endpoint, recording every call.
type broker struct {
	refuse map[string]*switchboardv1.Refusal
	fail   map[string]error
	// onReserve runs inside each Reserve, before it answers.
	onReserve func(*switchboardv1.ReserveRequest)
	// answer, when it returns a refusal, refuses that Reserve.
	answer func(*switchboardv1.ReserveRequest) *switchboardv1.Refusal

	mu         sync.Mutex
	reserves   []*switchboardv1.ReserveRequest
	reconciles []*switchboardv1.ReconcileRequest
	called     chan struct{}
}

var _ Broker = (*broker)(nil)

func newBroker() *broker {
	return &broker{refuse: map[string]*switchboardv1.Refusal{}, fail: map[string]error{}, called: make(chan struct{}, 16)}
}

func (b *broker) Reserve(_ context.Context, in *switchboardv1.ReserveRequest, _ ...grpc.CallOption) (*switchboardv1.ReserveResponse, error) {
	b.mu.Lock()
	b.reserves = append(b.reserves, proto.Clone(in).(*switchboardv1.ReserveRequest))
	b.mu.Unlock()
	defer func() { b.called <- struct{}{} }()
	if b.onReserve != nil {
		b.onReserve(in)
	}
	if err := b.fail[in.GetEndpointId()]; err != nil {
		return nil, err
	}
	if ref := b.refuse[in.GetEndpointId()]; ref != nil {
		return &switchboardv1.ReserveResponse{Refusal: ref}, nil
	}
	if b.answer != nil {
		if ref := b.answer(in); ref != nil {
			return &switchboardv1.ReserveResponse{Refusal: ref}, nil
		}
	}
	return &switchboardv1.ReserveResponse{Admitted: true, Reservation: &switchboardv1.Reservation{
		ReservationId: "rsv-" + in.GetIdempotencyKey(), RequestId: in.GetRequestId(), IdempotencyKey: in.GetIdempotencyKey(),
	}}, nil
}

func (b *broker) Reconcile(_ context.Context, in *switchboardv1.ReconcileRequest, _ ...grpc.CallOption) (*switchboardv1.ReconcileResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reconciles = append(b.reconciles, proto.Clone(in).(*switchboardv1.ReconcileRequest))
	return &switchboardv1.ReconcileResponse{}, nil
}

func (b *broker) reserved() []*switchboardv1.ReserveRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*switchboardv1.ReserveRequest(nil), b.reserves...)
}

func (b *broker) released() []*switchboardv1.ReconcileRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*switchboardv1.ReconcileRequest(nil), b.reconciles...)
}

// providerFull is how the broker refuses an endpoint whose provider quota is
// full: no figures, a retry delay.
var providerFull = &switchboardv1.Refusal{
	Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_PROVIDER_PROJECT,
	Unit: switchboardv1.LimitUnit_LIMIT_UNIT_INPUT_TOKENS, Message: "provider capacity for input_tokens is exhausted",
}

func newAdmittedDispatcher(rec *recorder, b *broker, hb HedgeBudget) *Dispatcher {
	return New(Options{
		Client: &http.Client{}, Getenv: func(string) string { return secret }, Reporter: rec,
		Broker: b, ReserveTimeout: time.Minute, Hedges: hb, HedgeTimeout: time.Minute,
		FirstTokenTimeout: time.Second, IdleTimeout: time.Minute, MaxAttempts: 4,
		// This fake broker neither pauses nor counts retries: the retries
		// of an endpoint after its pause are retry_test.go's.
		RetryWait: -1,
	})
}

// admitted is a call Decide reserved on endpoint a/m as "rsv-decide".
func admitted(t *testing.T, body string) Call {
	t.Helper()
	call := newCall(t, body)
	call.Admission = &Admission{
		ReservationID: "rsv-decide", EndpointID: "a/m",
		Identity: &switchboardv1.Identity{TenantId: "acme", ApiKeyId: "key-1", App: "app1",
			WorkloadClass: switchboardv1.WorkloadClass_WORKLOAD_CLASS_BACKGROUND},
		Demand: &switchboardv1.Demand{InputTokens: call.PromptTokens, OutputTokens: 4096, Usd: 0.5, Requests: 1},
		TTL:    2 * time.Minute,
	}
	return call
}

// priced gives each endpoint its own estimated cost, so a Reserve's usd
// says which endpoint it was priced on.
func priced(eps []*switchboardv1.Endpoint) []*switchboardv1.Endpoint {
	for i, ep := range eps {
		ep.EstimatedCostUsd = float64(i+1) / 100
	}
	return eps
}

// requireReconciledOnce checks every reservation is closed exactly once:
// by one call report, or by one Reconcile (an unused one released as
// cancelled, or a failed attempt's released at once with its outcome, whose
// report then names no reservation), never both.
func requireReconciledOnce(t *testing.T, rec *recorder, b *broker) map[string]string {
	t.Helper()
	byEndpoint := map[string]string{}
	seen := map[string]bool{}
	var unreserved []string // endpoints, in report order
	for _, r := range rec.all() {
		id := r.GetReservationId()
		if id == "" {
			require.NotEqual(t, switchboardv1.Outcome_OUTCOME_OK, r.GetOutcome(), "report of %s without a reservation", r.GetEndpointId())
			unreserved = append(unreserved, r.GetEndpointId())
			continue
		}
		require.False(t, seen[id], "reservation %s reported twice", id)
		seen[id] = true
		byEndpoint[r.GetEndpointId()] = id
	}
	var early []string // reservations of failed attempts released at once, in order
	for _, rc := range b.released() {
		require.False(t, seen[rc.GetReservationId()], "reservation %s reported and released", rc.GetReservationId())
		seen[rc.GetReservationId()] = true
		require.Zero(t, rc.GetUsage().GetInputTokens())
		require.Zero(t, rc.GetUsage().GetOutputTokens())
		if rc.GetOutcome() != switchboardv1.Outcome_OUTCOME_CANCELLED {
			early = append(early, rc.GetReservationId())
		}
	}
	require.Len(t, early, len(unreserved), "every report without a reservation is a failed attempt released at once")
	for i, ep := range unreserved {
		byEndpoint[ep] = early[i]
	}
	return byEndpoint
}

func attemptSummary(r *switchboardv1.ActivityRecord) []string {
	var out []string
	for _, a := range r.GetAttempts() {
		s := a.GetEndpointId() + " " + a.GetOutcome().String()
		if a.GetHedge() {
			s += " hedge"
		}
		if a.GetError() != "" {
			s += " (" + a.GetError() + ")"
		}
		out = append(out, s)
	}
	return out
}

func TestAdmissionFirstAttemptUsesDecideReservation(t *testing.T) {
	up := fakeupstream.Start(t)
	rec, b := &recorder{}, newBroker()
	d := newAdmittedDispatcher(rec, b, nil)
	w := httptest.NewRecorder()
	require.NoError(t, d.Serve(t.Context(), w, admitted(t, streamBody), []*switchboardv1.Endpoint{endpoint("a", up.BaseURL())}))
	require.Equal(t, http.StatusOK, w.Code)
	require.Empty(t, b.reserved(), "Decide's reservation is used as is")
	require.Empty(t, b.released())
	reps := rec.all()
	require.Len(t, reps, 1)
	require.Equal(t, "rsv-decide", reps[0].GetReservationId())
	require.True(t, reps[0].GetUsage().GetReported(), "the provider's usage reconciles it")
}

func TestAdmissionFallbackReserves(t *testing.T) {
	tests := []struct {
		name     string
		mode     fakeupstream.Mode
		body     string
		wantFail switchboardv1.Outcome
	}{
		{name: "after a 503", mode: fakeupstream.Unavailable, body: plainBody, wantFail: switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR},
		{name: "after a timeout", mode: fakeupstream.HangAfterHeaders, body: streamBody, wantFail: switchboardv1.Outcome_OUTCOME_TIMEOUT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ups, eps := upstreams(t, 2)
			eps = priced(eps)
			ups[0].SetMode(tt.mode)
			rec, b := &recorder{}, newBroker()
			b.onReserve = func(*switchboardv1.ReserveRequest) {
				require.Empty(t, ups[1].Requests(), "reserved before the call")
			}
			d := newAdmittedDispatcher(rec, b, nil)
			call := admitted(t, tt.body)
			w := httptest.NewRecorder()
			require.NoError(t, d.Serve(t.Context(), w, call, eps))
			require.Equal(t, "b", w.Header().Get("X-Switchboard-Provider"))

			res := b.reserved()
			require.Len(t, res, 1)
			want := &switchboardv1.ReserveRequest{
				RequestId: "gen-1", IdempotencyKey: "gen-1|b/m", Identity: call.Admission.Identity, Model: "org/model",
				EndpointId: "b/m", Demand: &switchboardv1.Demand{InputTokens: call.PromptTokens, OutputTokens: 4096, Usd: 0.02, Requests: 1},
				// The first retry, after an overload (a 503, a timeout).
				Attempt: 2, PreviousFailure: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD,
			}
			require.Negative(t, res[0].GetMaxWait().AsDuration(), "a fallback endpoint is never waited for: the request waited once, in Decide")
			res[0].MaxWait = nil
			require.Equal(t, 2*time.Minute, res[0].GetTtl().AsDuration())
			res[0].Ttl = nil
			require.True(t, proto.Equal(want, res[0]), "got %v", res[0])

			ids := requireReconciledOnce(t, rec, b)
			require.Equal(t, map[string]string{"a/m": "rsv-decide", "b/m": "rsv-gen-1|b/m"}, ids)
			failed := reportOf(t, rec, "a/m")
			require.Equal(t, tt.wantFail, failed.GetOutcome())
			require.Zero(t, failed.GetUsage().GetInputTokens(), "a call that failed before any token reconciles to zero")
			rel := b.released()
			require.Len(t, rel, 1, "the failed attempt's reservation is given back before the fallback is reserved")
			require.Equal(t, "rsv-decide", rel[0].GetReservationId())
			require.Equal(t, tt.wantFail, rel[0].GetOutcome(), "with its outcome, so the broker learns from it")
			require.Equal(t, switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD, rel[0].GetFailure(), "and its class, so the broker pauses the route")
		})
	}
}

func TestAdmissionRefusedFallbackSkipped(t *testing.T) {
	tests := []struct {
		name        string
		refuse      *switchboardv1.Refusal
		fail        error
		wantOutcome switchboardv1.Outcome
		wantError   string
	}{
		{name: "provider full", refuse: providerFull, wantOutcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED, wantError: "skipped: provider capacity"},
		{name: "caller's own limit", refuse: &switchboardv1.Refusal{
			Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY, Scope: switchboardv1.LimitScope_LIMIT_SCOPE_TENANT,
			Unit: switchboardv1.LimitUnit_LIMIT_UNIT_CONCURRENT_REQUESTS, Limit: 1,
		}, wantOutcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED, wantError: "skipped: tenant rate limit"},
		{name: "broker error", fail: errors.New("unavailable"), wantOutcome: switchboardv1.Outcome_OUTCOME_UNSPECIFIED, wantError: "skipped: capacity could not be reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ups, eps := upstreams(t, 3)
			ups[0].SetMode(fakeupstream.Unavailable)
			rec, b := &recorder{}, newBroker()
			b.refuse["b/m"], b.fail["b/m"] = tt.refuse, tt.fail
			d := newAdmittedDispatcher(rec, b, nil)
			w := httptest.NewRecorder()
			require.NoError(t, d.Serve(t.Context(), w, admitted(t, streamBody), eps))
			requireOneAnswer(t, w, "c")
			require.Empty(t, ups[1].Requests(), "a refused endpoint is not called")

			var asked []string
			for _, r := range b.reserved() {
				asked = append(asked, r.GetEndpointId())
			}
			require.Equal(t, []string{"b/m", "c/m"}, asked)
			ids := requireReconciledOnce(t, rec, b)
			require.Equal(t, map[string]string{"a/m": "rsv-decide", "c/m": "rsv-gen-1|c/m"}, ids, "no report for the skipped endpoint")

			r := rec.records()[0]
			require.Equal(t, []string{
				"a/m OUTCOME_UPSTREAM_ERROR (HTTP 503)",
				"b/m " + tt.wantOutcome.String() + " (" + tt.wantError + ")",
				"c/m OUTCOME_OK",
			}, attemptSummary(r))
			skipped := r.GetAttempts()[1]
			require.Zero(t, skipped.GetCostUsd())
			require.Zero(t, skipped.GetHttpStatus())
			require.NotNil(t, skipped.GetStartTime())
			require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_OK, r.GetStatus())
		})
	}
}

func TestAdmissionEveryFallbackRefused(t *testing.T) {
	ups, eps := upstreams(t, 2)
	ups[0].SetMode(fakeupstream.Unavailable)
	rec, b := &recorder{}, newBroker()
	b.refuse["b/m"] = providerFull
	d := newAdmittedDispatcher(rec, b, nil)
	w := httptest.NewRecorder()
	err := d.Serve(t.Context(), w, admitted(t, plainBody), eps)
	var f *Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, http.StatusServiceUnavailable, f.Status, "the provider's overload ends the request")
	require.Equal(t, "provider_overloaded", f.Code)
	require.True(t, f.Final, "a provider was called and failed: the client's retry would only repeat it")
	require.Equal(t, "0", w.Header().Get("X-Switchboard-Retries"), "one provider call made: b was refused before any")
	require.Contains(t, f.Message, "all 2 attempts failed")
	require.Contains(t, f.Message, "b: skipped: provider capacity")
	require.Empty(t, ups[1].Requests())
	r := rec.records()[0]
	require.Len(t, r.GetAttempts(), 2)
	require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_FAILED, r.GetStatus())
	require.Zero(t, r.GetCostUsd())
}

func TestAdmissionDecideReservationUnused(t *testing.T) {
	// Decide reserved on an endpoint that is not in the list handed to
	// dispatch: the first endpoint called is reserved on its own, and the
	// unused reservation is given back.
	up := fakeupstream.Start(t)
	rec, b := &recorder{}, newBroker()
	d := newAdmittedDispatcher(rec, b, nil)
	call := admitted(t, plainBody)
	call.Admission.EndpointID = "gone/m"
	w := httptest.NewRecorder()
	require.NoError(t, d.Serve(t.Context(), w, call, []*switchboardv1.Endpoint{endpoint("a", up.BaseURL())}))
	ids := requireReconciledOnce(t, rec, b)
	require.Equal(t, map[string]string{"a/m": "rsv-gen-1|a/m"}, ids)
	rel := b.released()
	require.Len(t, rel, 1)
	require.Equal(t, "rsv-decide", rel[0].GetReservationId())
}

func TestAdmissionOnlyEndpointRefused(t *testing.T) {
	// No provider was called at all: the client hears 429 with the delay
	// of the endpoint that frees first.
	up := fakeupstream.Start(t)
	rec, b := &recorder{}, newBroker()
	ref := proto.Clone(providerFull).(*switchboardv1.Refusal)
	ref.RetryAfter = durationpb.New(1500 * time.Millisecond)
	b.refuse["a/m"] = ref
	d := newAdmittedDispatcher(rec, b, nil)
	call := admitted(t, plainBody)
	call.Admission.EndpointID = "gone/m"
	err := d.Serve(t.Context(), httptest.NewRecorder(), call, []*switchboardv1.Endpoint{endpoint("a", up.BaseURL())})
	var f *Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, http.StatusTooManyRequests, f.Status)
	require.Equal(t, 1500*time.Millisecond, f.RetryAfter)
	require.False(t, f.Final, "no provider was called: a retry once it has room can be served")
	require.Empty(t, up.Requests())
	require.Empty(t, rec.all())
	require.Len(t, b.released(), 1, "Decide's unused reservation")
}

func TestAdmissionHedgeImmediate(t *testing.T) {
	tests := []struct {
		name      string
		refuse    bool
		wantHedge *switchboardv1.HedgeInfo
	}{
		{name: "reserved, then started", wantHedge: &switchboardv1.HedgeInfo{Used: true, Mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE,
			WinnerEndpointId: "b/m", LoserEndpointId: "a/m"}},
		{name: "refused, not started", refuse: true, wantHedge: &switchboardv1.HedgeInfo{Mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ups, eps := upstreams(t, 2)
			eps = priced(eps)
			primaryGate := make(chan struct{})
			ups[0].SetGate(primaryGate)
			rec, b := &recorder{}, newBroker()
			b.onReserve = func(*switchboardv1.ReserveRequest) {
				require.Empty(t, ups[1].Requests(), "the hedge is reserved before it starts")
			}
			if tt.refuse {
				b.refuse["b/m"] = providerFull
			}
			d := newAdmittedDispatcher(rec, b, newBudget(true))
			call := admitted(t, streamBody)
			call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, eps[1])
			w := httptest.NewRecorder()
			errc := serveAsync(t.Context(), d, w, call, eps)
			waitFor(t, b.called, "the hedge's reservation")
			if tt.refuse {
				close(primaryGate)
			}
			require.NoError(t, <-errc)
			if !tt.refuse {
				close(primaryGate)
			}

			res := b.reserved()
			require.Len(t, res, 1)
			require.Equal(t, "b/m", res[0].GetEndpointId())
			require.Equal(t, "gen-1|b/m", res[0].GetIdempotencyKey())
			require.InDelta(t, 0.02, res[0].GetDemand().GetUsd(), 1e-12)
			r := rec.records()[0]
			loserCost := r.GetHedge().GetLoserCostUsd()
			r.GetHedge().LoserCostUsd = 0
			require.True(t, proto.Equal(tt.wantHedge, r.GetHedge()), "got %v", r.GetHedge())
			ids := requireReconciledOnce(t, rec, b)
			if tt.refuse {
				requireOneAnswer(t, w, "a")
				require.Empty(t, ups[1].Requests())
				require.Equal(t, map[string]string{"a/m": "rsv-decide"}, ids)
				require.Equal(t, []string{"a/m OUTCOME_OK", "b/m OUTCOME_RATE_LIMITED hedge (skipped: provider capacity)"}, attemptSummary(r))
				require.Zero(t, loserCost)
				return
			}
			requireOneAnswer(t, w, "b")
			// The cancelled primary is reported, and reconciled, once.
			require.Equal(t, map[string]string{"a/m": "rsv-decide", "b/m": "rsv-gen-1|b/m"}, ids)
			require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, reportOf(t, rec, "a/m").GetOutcome())
			require.Positive(t, loserCost)
		})
	}
}

func TestAdmissionHedgeDelayedRefused(t *testing.T) {
	ups, eps := upstreams(t, 2)
	gate := make(chan struct{})
	ups[0].SetGate(gate)
	rec, b := &recorder{}, newBroker()
	b.refuse["b/m"] = providerFull
	hb := newBudget(true)
	d := newAdmittedDispatcher(rec, b, hb)
	call := admitted(t, streamBody)
	call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, eps[1])
	w := httptest.NewRecorder()
	errc := serveAsync(t.Context(), d, w, call, eps)
	waitFor(t, hb.called, "the hedge budget")
	waitFor(t, b.called, "the hedge's reservation")
	close(gate)
	require.NoError(t, <-errc)
	requireOneAnswer(t, w, "a")
	require.Empty(t, ups[1].Requests(), "a refused hedge is not started")
	r := rec.records()[0]
	require.False(t, r.GetHedge().GetUsed())
	require.Equal(t, []string{"a/m OUTCOME_OK", "b/m OUTCOME_RATE_LIMITED hedge (skipped: provider capacity)"}, attemptSummary(r))
	require.Equal(t, map[string]string{"a/m": "rsv-decide"}, requireReconciledOnce(t, rec, b))
	require.Empty(t, b.released())
}

// firstWrite signals the first write to the client.
type firstWrite struct {
	*httptest.ResponseRecorder
	once  sync.Once
	wrote chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	n, err := w.ResponseRecorder.Write(p)
	w.once.Do(func() { close(w.wrote) })
	return n, err
}

func TestAdmissionHedgeReservedTooLate(t *testing.T) {
	// The hedge's reservation is granted only after the primary's first
	// token reached the client: the hedge does not start and what was
	// reserved for it is given back, after the answer.
	ups, eps := upstreams(t, 2)
	gate := make(chan struct{})
	ups[0].SetGate(gate)
	rec, b := &recorder{}, newBroker()
	w := &firstWrite{ResponseRecorder: httptest.NewRecorder(), wrote: make(chan struct{})}
	reserving := make(chan struct{})
	b.onReserve = func(*switchboardv1.ReserveRequest) {
		close(reserving)
		<-w.wrote
	}
	d := newAdmittedDispatcher(rec, b, newBudget(true))
	call := admitted(t, streamBody)
	call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, eps[1])
	errc := serveAsync(t.Context(), d, w, call, eps)
	waitFor(t, reserving, "the hedge's reservation")
	close(gate)
	require.NoError(t, <-errc)
	requireOneAnswer(t, w.ResponseRecorder, "a")
	require.Empty(t, ups[1].Requests())
	r := rec.records()[0]
	require.False(t, r.GetHedge().GetUsed())
	require.Equal(t, []string{"a/m OUTCOME_OK"}, attemptSummary(r))
	require.Equal(t, map[string]string{"a/m": "rsv-decide"}, requireReconciledOnce(t, rec, b))
	rel := b.released()
	require.Len(t, rel, 1)
	require.Equal(t, "rsv-gen-1|b/m", rel[0].GetReservationId())
}

func TestAdmissionClientGoneDuringHedge(t *testing.T) {
	ups, eps := upstreams(t, 2)
	gate := make(chan struct{})
	defer close(gate)
	ups[0].SetGate(gate)
	ups[1].SetGate(gate)
	rec, b := &recorder{}, newBroker()
	d := newAdmittedDispatcher(rec, b, newBudget(true))
	call := admitted(t, streamBody)
	call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, eps[1])
	ctx, cancel := context.WithCancel(t.Context())
	errc := serveAsync(ctx, d, httptest.NewRecorder(), call, eps)
	waitFor(t, ups[0].Arrived(), "the primary")
	waitFor(t, ups[1].Arrived(), "the hedge")
	cancel()
	require.ErrorIs(t, <-errc, ErrClientGone)
	// Both cancelled legs are reported once, each with its reservation.
	require.Equal(t, map[string]string{"a/m": "rsv-decide", "b/m": "rsv-gen-1|b/m"}, requireReconciledOnce(t, rec, b))
	for _, r := range rec.all() {
		require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, r.GetOutcome())
	}
	require.Empty(t, b.released())
}

func TestAdmissionNone(t *testing.T) {
	// A call Decide reserved nothing for (a decider without a broker) is
	// dispatched as before: no Reserve for its fallbacks, no reservation ids.
	ups, eps := upstreams(t, 2)
	ups[0].SetMode(fakeupstream.Unavailable)
	rec, b := &recorder{}, newBroker()
	d := newAdmittedDispatcher(rec, b, nil)
	require.NoError(t, d.Serve(t.Context(), httptest.NewRecorder(), newCall(t, plainBody), eps))
	require.Empty(t, b.reserved())
	for _, r := range rec.all() {
		require.Empty(t, r.GetReservationId())
	}
}
