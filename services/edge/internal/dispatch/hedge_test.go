package dispatch

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/invoice"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakeupstream"
)

// budget is a HedgeBudget that grants or refuses every hedge, optionally
// failing or hanging until the caller gives up.
type budget struct {
	grant bool
	err   error
	hang  bool
	// onAcquire runs inside each AcquireHedge, before it answers.
	onAcquire func()

	mu     sync.Mutex
	reqs   []*switchboardv1.AcquireHedgeRequest
	called chan struct{}
}

var _ HedgeBudget = (*budget)(nil)

func newBudget(grant bool) *budget { return &budget{grant: grant, called: make(chan struct{}, 8)} }

func (b *budget) AcquireHedge(ctx context.Context, in *switchboardv1.AcquireHedgeRequest, _ ...grpc.CallOption) (*switchboardv1.AcquireHedgeResponse, error) {
	b.mu.Lock()
	b.reqs = append(b.reqs, in)
	b.mu.Unlock()
	if b.onAcquire != nil {
		b.onAcquire()
	}
	defer func() { b.called <- struct{}{} }()
	if b.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if b.err != nil {
		return nil, b.err
	}
	return &switchboardv1.AcquireHedgeResponse{Granted: b.grant}, nil
}

func (b *budget) requests() []*switchboardv1.AcquireHedgeRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*switchboardv1.AcquireHedgeRequest(nil), b.reqs...)
}

// newHedgeDispatcher has deadlines far beyond any test's duration, so only
// the order of events decides who wins.
func newHedgeDispatcher(rec *recorder, b HedgeBudget, maxAttempts int) *Dispatcher {
	return New(Options{
		Client:            &http.Client{},
		Getenv:            func(string) string { return secret },
		Reporter:          rec,
		Hedges:            b,
		HedgeTimeout:      50 * time.Millisecond,
		FirstTokenTimeout: time.Minute,
		IdleTimeout:       time.Minute,
		MaxAttempts:       maxAttempts,
	})
}

func hedgePlan(mode switchboardv1.HedgeMode, ep *switchboardv1.Endpoint) *switchboardv1.HedgePlan {
	return &switchboardv1.HedgePlan{Mode: mode, Delay: durationpb.New(time.Millisecond), Endpoint: ep}
}

// upstreams starts n fake providers and their endpoints a, b, c...; the
// first has input price 1, the others 3, so a loser's cost tells which leg
// lost.
func upstreams(t *testing.T, n int) ([]*fakeupstream.Server, []*switchboardv1.Endpoint) {
	t.Helper()
	var ups []*fakeupstream.Server
	var eps []*switchboardv1.Endpoint
	for i := range n {
		up := fakeupstream.Start(t)
		ep := endpoint(string(rune('a'+i)), up.BaseURL())
		if i > 0 {
			ep.Price = &switchboardv1.Price{Input: 3, CachedInput: 0.5, Output: 2}
		}
		ups, eps = append(ups, up), append(eps, ep)
	}
	return ups, eps
}

// serveAsync runs Serve in the background.
func serveAsync(ctx context.Context, d *Dispatcher, w http.ResponseWriter, call Call, eps []*switchboardv1.Endpoint) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- d.Serve(ctx, w, call, eps) }()
	return errc
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// reportOf returns the call report of one endpoint.
func reportOf(t *testing.T, rec *recorder, endpointID string) *switchboardv1.CallReport {
	t.Helper()
	var found *switchboardv1.CallReport
	for _, r := range rec.all() {
		if r.GetEndpointId() == endpointID {
			require.Nil(t, found, "one report per endpoint")
			found = r
		}
	}
	require.NotNil(t, found, "no report for %s", endpointID)
	return found
}

// requireOneAnswer checks the client got exactly one complete answer, from
// provider.
func requireOneAnswer(t *testing.T, w *httptest.ResponseRecorder, provider string) {
	t.Helper()
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, provider, w.Header().Get("X-Switchboard-Provider"))
	evs := events(t, w.Body.String())
	require.Equal(t, "[DONE]", evs[len(evs)-1])
	require.Equal(t, 1, strings.Count(w.Body.String(), "[DONE]"))
	var content strings.Builder
	for _, c := range chunks(t, w.Body.String()) {
		require.Equal(t, provider, c["provider"])
		require.Equal(t, "gen-1", c["id"])
		for _, ch := range c["choices"].([]any) {
			if s, ok := ch.(map[string]any)["delta"].(map[string]any)["content"].(string); ok {
				content.WriteString(s)
			}
		}
	}
	require.Equal(t, fakeupstream.Content, content.String())
}

func TestHedgeDelayed(t *testing.T) {
	ups, eps := upstreams(t, 2)
	ups[0].SetMode(fakeupstream.HangAfterHeaders) // slow: accepted, no first token
	rec, b := &recorder{}, newBudget(true)
	// The hedge starts only once the primary reached its provider, which
	// then sees it cancelled; with a 1ms delay the hedge could otherwise win
	// before the primary's connection was even made.
	b.onAcquire = func() { <-ups[0].Arrived() }
	d := newHedgeDispatcher(rec, b, 4)
	call := newCall(t, streamBody)
	call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, eps[1])
	w := httptest.NewRecorder()

	// The hedge endpoint is also the first fallback, as the decider sends it.
	require.NoError(t, d.Serve(t.Context(), w, call, eps))
	requireOneAnswer(t, w, "b")
	waitFor(t, ups[0].Cancelled(), "the slow primary to see its request cancelled")
	require.Len(t, ups[0].Requests(), 1)
	require.Len(t, ups[1].Requests(), 1, "the hedge endpoint is not tried again as a fallback")

	reqs := b.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "gen-1", reqs[0].GetRequestId())
	require.Equal(t, "b/m", reqs[0].GetEndpointId())
	require.InDelta(t, float64(call.PromptTokens)*3/1e6, reqs[0].GetEstimatedCostUsd(), 1e-12, "the dearer leg's prompt")

	loserCost := float64(call.PromptTokens) * 1 / 1e6
	primary := reportOf(t, rec, "a/m")
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, primary.GetOutcome())
	require.False(t, primary.GetHedge())
	require.Nil(t, primary.GetTtft())
	require.False(t, primary.GetUsage().GetReported())
	require.InDelta(t, loserCost, primary.GetUsage().GetCostUsd(), 1e-12)
	require.Contains(t, primary.GetError(), "hedge lost")
	hedge := reportOf(t, rec, "b/m")
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, hedge.GetOutcome())
	require.True(t, hedge.GetHedge())

	r := rec.records()[0]
	require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_OK, r.GetStatus())
	require.Equal(t, "b/m", r.GetEndpointId())
	require.Equal(t, &switchboardv1.HedgeInfo{
		Used: true, Mode: switchboardv1.HedgeMode_HEDGE_MODE_DELAYED,
		WinnerEndpointId: "b/m", LoserEndpointId: "a/m", LoserCostUsd: loserCost,
	}, r.GetHedge())
	require.Len(t, r.GetAttempts(), 2)
	require.Equal(t, "a/m", r.GetAttempts()[0].GetEndpointId())
	require.False(t, r.GetAttempts()[0].GetHedge())
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, r.GetAttempts()[0].GetOutcome())
	require.Equal(t, "b/m", r.GetAttempts()[1].GetEndpointId())
	require.True(t, r.GetAttempts()[1].GetHedge())
	// The client pays the winner's usage only, never the cancelled leg.
	wantBill, _ := invoice.Charge(pricing.Usage{Input: fakeupstream.PromptTokens, CachedInput: fakeupstream.CachedTokens, Output: fakeupstream.CompletionTokens}, eps[1].GetPrice(), invoice.Caps{})
	require.InDelta(t, wantBill, r.GetCostUsd(), 1e-12)
}

func TestHedgeImmediate(t *testing.T) {
	ups, eps := upstreams(t, 2)
	primaryGate, hedgeGate := make(chan struct{}), make(chan struct{})
	ups[0].SetGate(primaryGate)
	ups[1].SetGate(hedgeGate)
	rec, b := &recorder{}, newBudget(true)
	primaryStartedFirst := false
	b.onAcquire = func() { primaryStartedFirst = len(ups[0].Requests()) > 0 }
	d := newHedgeDispatcher(rec, b, 4)
	call := newCall(t, streamBody)
	call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, eps[1])
	w := httptest.NewRecorder()

	errc := serveAsync(t.Context(), d, w, call, eps)
	// Both legs are running before either produced a token.
	waitFor(t, ups[0].Arrived(), "the primary")
	waitFor(t, ups[1].Arrived(), "the hedge")
	close(hedgeGate)
	require.NoError(t, <-errc)
	requireOneAnswer(t, w, "b")
	waitFor(t, ups[0].Cancelled(), "the primary to be cancelled")
	require.False(t, primaryStartedFirst, "the budget is asked before anything starts")

	r := rec.records()[0]
	require.Equal(t, switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, r.GetHedge().GetMode())
	require.True(t, r.GetHedge().GetUsed())
	require.Equal(t, "b/m", r.GetHedge().GetWinnerEndpointId())
	require.Equal(t, "a/m", r.GetHedge().GetLoserEndpointId())
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, reportOf(t, rec, "a/m").GetOutcome())
}

func TestHedgeTie(t *testing.T) {
	// Both legs get their first token at once: exactly one serves.
	ups, eps := upstreams(t, 2)
	gate := make(chan struct{})
	ups[0].SetGate(gate)
	ups[1].SetGate(gate)
	rec := &recorder{}
	d := newHedgeDispatcher(rec, newBudget(true), 4)
	call := newCall(t, streamBody)
	call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, eps[1])
	w := httptest.NewRecorder()
	errc := serveAsync(t.Context(), d, w, call, eps)
	waitFor(t, ups[0].Arrived(), "the primary")
	waitFor(t, ups[1].Arrived(), "the hedge")
	close(gate)
	require.NoError(t, <-errc)
	r := rec.records()[0]
	winner, loser := r.GetHedge().GetWinnerEndpointId(), r.GetHedge().GetLoserEndpointId()
	require.ElementsMatch(t, []string{"a/m", "b/m"}, []string{winner, loser})
	requireOneAnswer(t, w, strings.TrimSuffix(winner, "/m"))
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, reportOf(t, rec, winner).GetOutcome())
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, reportOf(t, rec, loser).GetOutcome())
}

func TestHedgeNotStarted(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		mode       switchboardv1.HedgeMode
		budget     *budget
		wantAsked  bool
		wantHedge  *switchboardv1.HedgeInfo
		hedgeOnTop bool // the hedge endpoint is the primary itself
	}{
		{name: "refused", body: streamBody, mode: switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, budget: newBudget(false), wantAsked: true,
			wantHedge: &switchboardv1.HedgeInfo{Mode: switchboardv1.HedgeMode_HEDGE_MODE_DELAYED}},
		{name: "refused immediate", body: streamBody, mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, budget: newBudget(false), wantAsked: true,
			wantHedge: &switchboardv1.HedgeInfo{Mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE}},
		{name: "budget error", body: streamBody, mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, budget: &budget{grant: true, err: errors.New("unavailable"), called: make(chan struct{}, 8)},
			wantAsked: true, wantHedge: &switchboardv1.HedgeInfo{Mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE}},
		{name: "budget too slow", body: streamBody, mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, budget: &budget{grant: true, hang: true, called: make(chan struct{}, 8)},
			wantAsked: true, wantHedge: &switchboardv1.HedgeInfo{Mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE}},
		{name: "no plan", body: streamBody, mode: switchboardv1.HedgeMode_HEDGE_MODE_NONE, budget: newBudget(true)},
		{name: "unspecified", body: streamBody, mode: switchboardv1.HedgeMode_HEDGE_MODE_UNSPECIFIED, budget: newBudget(true)},
		{name: "non-stream is never hedged", body: plainBody, mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, budget: newBudget(true)},
		{name: "hedge endpoint is the primary", body: streamBody, mode: switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, budget: newBudget(true), hedgeOnTop: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ups, eps := upstreams(t, 2)
			gate := make(chan struct{})
			ups[0].SetGate(gate)
			rec := &recorder{}
			d := newHedgeDispatcher(rec, tt.budget, 4)
			call := newCall(t, tt.body)
			call.Hedge = hedgePlan(tt.mode, eps[1])
			if tt.hedgeOnTop {
				call.Hedge.Endpoint = eps[0]
			}
			w := httptest.NewRecorder()
			errc := serveAsync(t.Context(), d, w, call, eps)
			if tt.wantAsked {
				// The primary holds its first token until the budget answered.
				waitFor(t, tt.budget.called, "the budget to be asked")
			}
			close(gate)
			require.NoError(t, <-errc)
			require.Equal(t, "a", w.Header().Get("X-Switchboard-Provider"))
			require.Empty(t, ups[1].Requests(), "one endpoint only")
			require.Equal(t, tt.wantAsked, len(tt.budget.requests()) > 0)
			r := rec.records()[0]
			require.Len(t, r.GetAttempts(), 1)
			require.Equal(t, tt.wantHedge, r.GetHedge())
		})
	}
}

func TestHedgeLegFails(t *testing.T) {
	ups, eps := upstreams(t, 2)
	gate := make(chan struct{})
	ups[0].SetGate(gate)
	ups[1].SetMode(fakeupstream.Unavailable)
	rec := &recorder{}
	d := newHedgeDispatcher(rec, newBudget(true), 4)
	call := newCall(t, streamBody)
	call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, eps[1])
	w := httptest.NewRecorder()
	errc := serveAsync(t.Context(), d, w, call, eps)
	// The hedge fails while the primary is still waiting for its first token.
	require.Eventually(t, func() bool { return len(rec.all()) == 1 }, 10*time.Second, 5*time.Millisecond)
	hedge := reportOf(t, rec, "b/m")
	require.Equal(t, switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, hedge.GetOutcome())
	require.True(t, hedge.GetHedge())
	require.Equal(t, 3*time.Second, hedge.GetRetryAfter().AsDuration())
	require.Zero(t, hedge.GetUsage().GetCostUsd(), "a failed call costs nobody")
	close(gate)
	require.NoError(t, <-errc)
	requireOneAnswer(t, w, "a")

	r := rec.records()[0]
	require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_OK, r.GetStatus())
	require.Equal(t, &switchboardv1.HedgeInfo{Used: true, Mode: switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, WinnerEndpointId: "a/m"}, r.GetHedge())
	require.Len(t, r.GetAttempts(), 2)
	require.Equal(t, switchboardv1.Outcome_OUTCOME_OK, r.GetAttempts()[0].GetOutcome())
	require.Equal(t, switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, r.GetAttempts()[1].GetOutcome())
	require.Len(t, ups[1].Requests(), 1, "not tried again as a fallback")
}

func TestHedgeBothFail(t *testing.T) {
	tests := []struct {
		name        string
		maxAttempts int
		wantServed  string
		wantTried   []string
	}{
		{name: "next fallback serves", maxAttempts: 4, wantServed: "c", wantTried: []string{"a/m", "b/m", "c/m"}},
		{name: "the hedge counts as an attempt", maxAttempts: 2, wantTried: []string{"a/m", "b/m"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ups, eps := upstreams(t, 3)
			ups[0].SetMode(fakeupstream.Unavailable)
			ups[1].SetMode(fakeupstream.RateLimited)
			rec := &recorder{}
			d := newHedgeDispatcher(rec, newBudget(true), tt.maxAttempts)
			call := newCall(t, streamBody)
			call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, eps[1])
			w := httptest.NewRecorder()
			err := d.Serve(t.Context(), w, call, eps)
			r := rec.records()[0]
			var tried []string
			for _, a := range r.GetAttempts() {
				tried = append(tried, a.GetEndpointId())
			}
			require.Equal(t, tt.wantTried, tried)
			require.Len(t, ups[1].Requests(), 1)
			if tt.wantServed == "" {
				var f *Failure
				require.ErrorAs(t, err, &f)
				require.Contains(t, f.Message, "a: HTTP 503")
				require.Contains(t, f.Message, "b: rate limited")
				require.Empty(t, ups[2].Requests())
				require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_FAILED, r.GetStatus())
				require.Zero(t, r.GetCostUsd())
				require.Zero(t, r.GetHedge().GetLoserCostUsd())
				return
			}
			require.NoError(t, err)
			requireOneAnswer(t, w, tt.wantServed)
			require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_OK, r.GetStatus())
			require.True(t, r.GetAttempts()[1].GetHedge())
			require.False(t, r.GetAttempts()[2].GetHedge())
		})
	}
}

func TestHedgeClientGone(t *testing.T) {
	ups, eps := upstreams(t, 2)
	gate := make(chan struct{})
	defer close(gate)
	ups[0].SetGate(gate)
	ups[1].SetGate(gate)
	rec := &recorder{}
	d := newHedgeDispatcher(rec, newBudget(true), 4)
	call := newCall(t, streamBody)
	call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_IMMEDIATE, eps[1])
	ctx, cancel := context.WithCancel(t.Context())
	errc := serveAsync(ctx, d, httptest.NewRecorder(), call, eps)
	waitFor(t, ups[0].Arrived(), "the primary")
	waitFor(t, ups[1].Arrived(), "the hedge")
	cancel()
	require.ErrorIs(t, <-errc, ErrClientGone)
	waitFor(t, ups[0].Cancelled(), "the primary to be cancelled")
	waitFor(t, ups[1].Cancelled(), "the hedge to be cancelled")
	for _, id := range []string{"a/m", "b/m"} {
		require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, reportOf(t, rec, id).GetOutcome())
	}
	r := rec.records()[0]
	require.Equal(t, switchboardv1.CallStatus_CALL_STATUS_CLIENT_CANCELLED, r.GetStatus())
	require.Zero(t, r.GetCostUsd())
	require.True(t, r.GetHedge().GetUsed())
	require.Empty(t, r.GetHedge().GetWinnerEndpointId())
	// The client pays nothing; the extra call was made on the hedge budget.
	require.Equal(t, "b/m", r.GetHedge().GetLoserEndpointId())
	require.InDelta(t, float64(call.PromptTokens)*3/1e6, r.GetHedge().GetLoserCostUsd(), 1e-12)
}

func TestHedgeBudgetDoesNotHoldPrimary(t *testing.T) {
	// The budget never answers within the test; the primary's first token,
	// arriving while it is asked, is served at once all the same.
	ups, eps := upstreams(t, 2)
	gate := make(chan struct{})
	ups[0].SetGate(gate)
	rec := &recorder{}
	asked := make(chan struct{}, 1)
	b := &budget{grant: true, hang: true, called: make(chan struct{}, 8), onAcquire: func() { asked <- struct{}{} }}
	d := New(Options{
		Client: &http.Client{}, Getenv: func(string) string { return secret }, Reporter: rec, Hedges: b,
		HedgeTimeout: time.Hour, FirstTokenTimeout: time.Minute, IdleTimeout: time.Minute,
	})
	call := newCall(t, streamBody)
	call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, eps[1])
	w := httptest.NewRecorder()
	errc := serveAsync(t.Context(), d, w, call, eps)
	waitFor(t, asked, "the budget to be asked")
	close(gate)
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the primary waited for the hedge budget")
	}
	requireOneAnswer(t, w, "a")
	waitFor(t, b.called, "the budget call to be cancelled")
	require.Empty(t, ups[1].Requests())
	require.False(t, rec.records()[0].GetHedge().GetUsed())
}

// A hedge loser is reported (and its reservation reconciled) as soon as it
// is cancelled, not when the winner's stream ends, which may be long after.
func TestHedgeLoserReportedWhileTheWinnerStreams(t *testing.T) {
	ups, eps := upstreams(t, 2)
	ups[0].SetMode(fakeupstream.HangAfterHeaders) // never a first token: loses
	ups[1].SetMode(fakeupstream.HangMidStream)    // a first token, then a long stream
	rec, b := &recorder{}, newBudget(true)
	b.onAcquire = func() { <-ups[0].Arrived() }
	d := newHedgeDispatcher(rec, b, 4)
	call := newCall(t, streamBody)
	call.Hedge = hedgePlan(switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, eps[1])
	call.Admission = &Admission{ReservationID: "rsv-decide", EndpointID: "a/m", Identity: &switchboardv1.Identity{TenantId: "t"}, Demand: &switchboardv1.Demand{Requests: 1}}
	bk := newBroker()
	d.opts.Broker = bk
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := serveAsync(ctx, d, httptest.NewRecorder(), call, eps)

	require.Eventually(t, func() bool {
		for _, r := range rec.all() {
			if r.GetEndpointId() == "a/m" {
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond, "the loser is reported while the winner still streams")
	select {
	case err := <-errc:
		t.Fatalf("Serve returned early: %v", err)
	default:
	}
	loser := reportOf(t, rec, "a/m")
	require.Equal(t, switchboardv1.Outcome_OUTCOME_CANCELLED, loser.GetOutcome())
	require.Equal(t, "rsv-decide", loser.GetReservationId())

	cancel() // the client leaves the long stream
	require.ErrorIs(t, <-errc, nil)
	r := rec.records()[0]
	require.Equal(t, "a/m", r.GetHedge().GetLoserEndpointId())
	require.Equal(t, "b/m", r.GetHedge().GetWinnerEndpointId())
}
