package app

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

// metricsCatalog is limitedCatalog (alpha takes 2 requests a minute, beta is
// unlimited, the tenant has a daily quota of 5 requests) with, for the
// tenant, a daily spend limit of $1 and 4 requests in flight.
const metricsCatalog = limitedCatalog + `      - {unit: usd, per: day, capacity: 1}
      - {unit: concurrent_requests, capacity: 4}
`

// scrape reads the decider's /metrics over HTTP and parses it.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// series returns the metrics of family name whose labels include want.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			ok = ok && have[k] == v
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// value is the one series of name with labels want: a counter's or a
// gauge's value, a histogram's count.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	ms := series(fams, name, want)
	require.Len(t, ms, 1, "%s%v among %v", name, want, fams[name].GetMetric())
	m := ms[0]
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	t.Fatalf("%s: no value", name)
	return 0
}

// TestMetricsScrapedOverHTTP drives a decider with its debug listener on
// over real gRPC: admitted and refused reservations (a provider's rate
// limit, the tenant's concurrency and daily quota), a 429 with Retry-After,
// a successful call that used less than it reserved, a 503, reconciliations
// on the Report stream delivered twice; then scrapes /metrics over HTTP and
// checks each series.
func TestMetricsScrapedOverHTTP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A stopped clock: alpha's 2 a minute never refill during the test.
	clk := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	p := filepath.Join(dir, "catalog.yaml")
	require.NoError(t, os.WriteFile(p, []byte(strings.ReplaceAll(metricsCatalog, "@KEY@", catalog.HashKey(demoKey))+testCallers()), 0o600))
	d, c := startDecider(t, Config{Catalog: p, DataDir: dir, DebugListen: "127.0.0.1:0", Now: clk.Now})
	t.Cleanup(d.Close)
	ctx := t.Context()
	who := &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(demoKey)}
	const alpha, beta = "alpha/vendor/model", "beta/vendor/model"
	reserve := func(endpoint string, attempt int32) *switchboardv1.ReserveResponse {
		t.Helper()
		r, err := c.Reserve(ctx, &switchboardv1.ReserveRequest{
			Identity: who, Model: "vendor/model", EndpointId: endpoint, Attempt: attempt,
			Demand: &switchboardv1.Demand{InputTokens: 100, OutputTokens: 10, Usd: 0.01},
			// Refused at once: on a stopped clock a wait in the queue
			// would never reach its deadline.
			MaxWait: admission.NoWait,
		})
		require.NoError(t, err)
		return r
	}

	// Before any traffic: the gauges are there, the queues empty.
	fams := scrape(t, d.DebugAddr())
	for _, class := range []string{"interactive", "background", "partner", "batch"} {
		require.Zero(t, value(t, fams, "switchboard_queue_depth", map[string]string{"class": class}), class)
	}
	dayRequests := map[string]string{"scope": "tenant", "tenant": "acme", "unit": "requests", "window": "day"}
	require.Equal(t, 1.0, value(t, fams, "switchboard_quota_headroom_ratio", dayRequests))
	require.Zero(t, value(t, fams, "switchboard_concurrency_saturation_ratio", map[string]string{"scope": "tenant", "tenant": "acme"}))
	require.Empty(t, series(fams, "switchboard_reservations_total", nil))

	a1, a2 := reserve(alpha, 1), reserve(alpha, 0)
	require.True(t, a1.GetAdmitted())
	require.True(t, a2.GetAdmitted())
	require.False(t, reserve(alpha, 1).GetAdmitted(), "alpha's 2 a minute are used")
	b1 := reserve(beta, 2)
	require.True(t, b1.GetAdmitted())
	// Decide tries alpha (full), then reserves beta: one refusal, one admission.
	dr, err := c.Decide(ctx, &switchboardv1.DecideRequest{Identity: who, Model: "vendor/model", Reserve: true,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 100, MaxOutputTokens: 10}})
	require.NoError(t, err)
	require.Equal(t, "beta", dr.GetEndpoint().GetProvider())
	require.Equal(t, switchboardv1.LimitUnit_LIMIT_UNIT_CONCURRENT_REQUESTS, reserve(beta, 1).GetRefusal().GetUnit(), "4 in flight")

	fams = scrape(t, d.DebugAddr())
	admitted := map[string]string{"tenant": "acme", "class": "interactive", "result": "admitted", "reason": "", "code": ""}
	require.Equal(t, 2.0, value(t, fams, "switchboard_reservations_total", with(admitted, "route", alpha)))
	require.Equal(t, 2.0, value(t, fams, "switchboard_reservations_total", with(admitted, "route", beta)))
	require.Equal(t, 2.0, value(t, fams, "switchboard_reservations_total", map[string]string{
		"tenant": "acme", "route": alpha, "class": "interactive", "result": "refused",
		"reason": "retryable_capacity", "code": "rate_limit", "scope": "model_route", "unit": "requests",
	}), "Reserve's and Decide's refusals by alpha's own limit")
	require.Equal(t, 1.0, value(t, fams, "switchboard_reservations_total", map[string]string{
		"route": beta, "result": "refused", "reason": "retryable_capacity", "code": "concurrency", "scope": "tenant", "unit": "concurrent_requests",
	}))
	require.Len(t, series(fams, "switchboard_reservations_total", nil), 4, "no other series")
	require.Equal(t, 1.0, value(t, fams, "switchboard_concurrency_saturation_ratio", map[string]string{"scope": "tenant", "tenant": "acme"}))
	require.Equal(t, 4.0, value(t, fams, "switchboard_reservation_attempt", map[string]string{"class": "interactive"}), "one per admitted dispatch")
	h := series(fams, "switchboard_reservation_attempt", nil)[0].GetHistogram()
	require.Equal(t, 1+1+2+1.0, h.GetSampleSum(), "attempt 0 counts as the first")
	require.Equal(t, uint64(3), h.GetBucket()[0].GetCumulativeCount(), "three first attempts (le=1)")

	// A 429 with Retry-After, then a call that used half its input estimate;
	// the same reconciliation again is NOT_FOUND and counts nothing.
	_, err = c.Reconcile(ctx, &switchboardv1.ReconcileRequest{ReservationId: a1.GetReservation().GetReservationId(),
		Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED, Failure: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY,
		RateLimitHeaders: []*switchboardv1.Header{{Name: "retry-after", Value: "30"}}})
	require.NoError(t, err)
	ok := &switchboardv1.ReconcileRequest{ReservationId: a2.GetReservation().GetReservationId(), Outcome: switchboardv1.Outcome_OUTCOME_OK,
		Usage: &switchboardv1.Usage{InputTokens: 50, OutputTokens: 4, CostUsd: 0.005, Reported: true}}
	_, err = c.Reconcile(ctx, ok)
	require.NoError(t, err)
	_, err = c.Reconcile(ctx, ok)
	require.Equal(t, codes.NotFound, status.Code(err))

	// On the Report stream: beta's first call, acknowledged; the same batch
	// replayed (as after a reconnection), then a 503.
	stream, err := c.Report(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{
		Hello: &switchboardv1.EdgeHello{EdgeId: "e"}}}))
	batch := func(seq uint64, rs ...*switchboardv1.ReconcileRequest) {
		t.Helper()
		require.NoError(t, stream.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Reconcile{
			Reconcile: &switchboardv1.ReconcileBatch{Reconciles: rs, Sequence: seq}}}))
	}
	acked := func(seq uint64) {
		t.Helper()
		for {
			m, err := stream.Recv()
			require.NoError(t, err)
			if m.GetAck().GetReconcileSequence() == seq {
				return
			}
		}
	}
	first := &switchboardv1.ReconcileRequest{ReservationId: b1.GetReservation().GetReservationId(), Outcome: switchboardv1.Outcome_OUTCOME_OK,
		Usage: &switchboardv1.Usage{InputTokens: 100, OutputTokens: 10, Reported: true}}
	batch(1, first)
	acked(1)
	batch(0, first)
	batch(2, &switchboardv1.ReconcileRequest{ReservationId: dr.GetReservation().GetReservationId(),
		Outcome: switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, Failure: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD})
	acked(2) // applied in order: the replay before it

	// The 503 paused beta for everyone; once the pause is over, the 5th
	// request of the day is admitted, the 6th is over the quota.
	paused := reserve(beta, 1).GetRefusal()
	require.Equal(t, switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_OVERLOAD, paused.GetReason(), "the 503 paused beta")
	clk.Advance(2 * time.Minute)
	require.True(t, reserve(beta, 1).GetAdmitted())
	daily := reserve(beta, 1).GetRefusal()
	require.Equal(t, switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY, daily.GetReason(), "the daily quota is used up")

	fams = scrape(t, d.DebugAddr())
	calls := func(route, outcome string) float64 {
		return value(t, fams, "switchboard_provider_calls_total", map[string]string{"route": route, "outcome": outcome})
	}
	require.Equal(t, 1.0, calls(alpha, "rate_limited"))
	require.Equal(t, 1.0, calls(alpha, "ok"))
	require.Equal(t, 1.0, calls(beta, "ok"), "a reconciliation delivered twice is counted once")
	require.Equal(t, 1.0, calls(beta, "upstream_error"))
	require.Len(t, series(fams, "switchboard_provider_calls_total", nil), 4)
	require.Equal(t, 1.0, value(t, fams, "switchboard_provider_throttled_total", map[string]string{"route": alpha, "status": "429"}))
	require.Equal(t, 1.0, value(t, fams, "switchboard_provider_throttled_total", map[string]string{"route": beta, "status": "503"}))
	require.Len(t, series(fams, "switchboard_provider_throttled_total", nil), 2)
	require.Equal(t, 1.0, value(t, fams, "switchboard_provider_retry_after_total", map[string]string{"route": alpha}))
	require.Len(t, series(fams, "switchboard_provider_retry_after_total", nil), 1)

	ratio := func(route, unit string) *dto.Histogram {
		t.Helper()
		ms := series(fams, "switchboard_token_estimate_ratio", map[string]string{"route": route, "unit": unit})
		require.Len(t, ms, 1, "%s %s", route, unit)
		return ms[0].GetHistogram()
	}
	require.Equal(t, uint64(1), ratio(alpha, "input_tokens").GetSampleCount())
	require.InDelta(t, 0.5, ratio(alpha, "input_tokens").GetSampleSum(), 1e-9)
	require.InDelta(t, 0.4, ratio(alpha, "output_tokens").GetSampleSum(), 1e-9)
	require.InDelta(t, 1.0, ratio(beta, "input_tokens").GetSampleSum(), 1e-9)
	over := func(route, unit string) float64 {
		return value(t, fams, "switchboard_tokens_over_reserved_total", map[string]string{"tenant": "acme", "route": route, "unit": unit})
	}
	require.Equal(t, 50.0, over(alpha, "input_tokens"))
	require.Equal(t, 6.0, over(alpha, "output_tokens"))
	require.Len(t, series(fams, "switchboard_tokens_over_reserved_total", nil), 2, "beta used all it reserved")

	require.Equal(t, 1.0, value(t, fams, "switchboard_reservations_total", map[string]string{
		"route": beta, "result": "refused", "reason": "non_retryable_policy", "code": "daily_quota", "scope": "tenant", "unit": "requests",
	}))
	require.Equal(t, 0.0, value(t, fams, "switchboard_quota_headroom_ratio", dayRequests))
	require.Equal(t, 1.0, value(t, fams, "switchboard_tenant_capacity_used_ratio", map[string]string{"tenant": "acme", "unit": "requests", "window": "day"}))
	spend := value(t, fams, "switchboard_quota_headroom_ratio", map[string]string{"scope": "tenant", "tenant": "acme", "unit": "usd", "window": "day"})
	require.Greater(t, spend, 0.9)
	require.Less(t, spend, 1.0)
	require.Equal(t, 0.25, value(t, fams, "switchboard_concurrency_saturation_ratio", map[string]string{"scope": "tenant", "tenant": "acme"}), "one call in flight of 4")
	require.Empty(t, series(fams, "switchboard_queue_wait_seconds", nil), "nothing waited in a queue")
}

// with returns a copy of m with k=v added.
func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

// TestMetricsCountedOnceOnTheOwner: a reservation asked of a replica that
// does not own the broker is forwarded and counted by the owner alone, and
// only the owner reports the broker's gauges.
func TestMetricsCountedOnceOnTheOwner(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := startDecider(t, Config{Catalog: writeLimited(t, dir), DataDir: dir, DebugListen: "127.0.0.1:0"})
	t.Cleanup(a.Close)
	b, cb := startDecider(t, Config{Etcd: []string{a.EtcdEndpoint()}, DataDir: t.TempDir(), DebugListen: "127.0.0.1:0"})
	t.Cleanup(b.Close)
	require.True(t, a.adm.Owner())
	require.False(t, b.adm.Owner())

	resp := decideReserve(t, cb, 0)
	require.NotNil(t, resp.GetReservation(), "reserved through the non-owner")
	admitted := map[string]string{"tenant": "acme", "route": resp.GetEndpoint().GetId(), "result": "admitted"}
	require.Equal(t, 1.0, value(t, scrape(t, a.DebugAddr()), "switchboard_reservations_total", admitted))
	fams := scrape(t, b.DebugAddr())
	require.Empty(t, series(fams, "switchboard_reservations_total", nil), "the forwarding replica counts nothing")
	require.Empty(t, series(fams, "switchboard_quota_headroom_ratio", nil), "nor reports its idle broker's levels")
	require.Len(t, series(scrape(t, a.DebugAddr()), "switchboard_quota_headroom_ratio", map[string]string{"tenant": "acme"}), 1)
}
