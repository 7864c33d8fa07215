package tests

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// TestBoundaryRefusesWhatIsOutOfBounds repeats, from outside and with valid
// credentials (a service scoped to acme, an edge), each field the decider's
// gRPC boundary once took as sent: 900 kB ids, attempt −7, enum values no
// version defines, an endpoint the catalog does not have, negative tokens,
// cached above input, NaN money. Each is INVALID_ARGUMENT naming the field,
// and none of them takes a slot of the tenant's limit or a cent of the
// hedge budget.
func TestBoundaryRefusesWhatIsOutOfBounds(t *testing.T) {
	d := startSecDecider(t)
	svc := dialAs(t, d.Addr(), secServiceToken)
	edge := dialAs(t, d.Addr(), secEdgeToken)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	before := requestsLeft(t, d, "acme")
	huge := strings.Repeat("x", 900_000)

	reserve := func(edit func(*switchboardv1.ReserveRequest)) func() error {
		return func() error {
			r := reserveReq(byTenant("acme"))
			edit(r)
			_, err := svc.Reserve(ctx, r)
			return err
		}
	}
	reconcile := func(edit func(*switchboardv1.ReconcileRequest)) func() error {
		return func() error {
			r := &switchboardv1.ReconcileRequest{ReservationId: "res-1", Outcome: switchboardv1.Outcome_OUTCOME_OK,
				Usage: &switchboardv1.Usage{InputTokens: 10, OutputTokens: 5}}
			edit(r)
			_, err := svc.Reconcile(ctx, r)
			return err
		}
	}
	cases := []struct {
		name, field string
		call        func() error
	}{
		{"900 kB request_id", "request_id", reserve(func(r *switchboardv1.ReserveRequest) { r.RequestId = huge })},
		{"900 kB idempotency_key", "idempotency_key", reserve(func(r *switchboardv1.ReserveRequest) { r.IdempotencyKey = huge })},
		{"1 MiB app", "identity.app", reserve(func(r *switchboardv1.ReserveRequest) { r.Identity.App = huge + huge })},
		{"attempt -7", "attempt", reserve(func(r *switchboardv1.ReserveRequest) { r.Attempt = -7 })},
		{"unknown previous_failure", "previous_failure", reserve(func(r *switchboardv1.ReserveRequest) { r.PreviousFailure = 77 })},
		{"unknown endpoint", "endpoint_id", reserve(func(r *switchboardv1.ReserveRequest) { r.EndpointId = "nobody/" + secModel })},
		{"model not the endpoint's", "model", reserve(func(r *switchboardv1.ReserveRequest) { r.Model = "another-" + secModel })},
		{"negative demand tokens", "demand.input_tokens", reserve(func(r *switchboardv1.ReserveRequest) { r.Demand.InputTokens = -100 })},
		{"NaN demand usd", "demand.usd", reserve(func(r *switchboardv1.ReserveRequest) { r.Demand.Usd = math.NaN() })},
		{"unknown outcome", "outcome", reconcile(func(r *switchboardv1.ReconcileRequest) { r.Outcome = 99 })},
		{"unknown failure", "failure", reconcile(func(r *switchboardv1.ReconcileRequest) { r.Failure = 42 })},
		{"negative tokens", "usage.output_tokens", reconcile(func(r *switchboardv1.ReconcileRequest) { r.Usage.OutputTokens = -5 })},
		{"cached above input", "usage.cached_input_tokens", reconcile(func(r *switchboardv1.ReconcileRequest) { r.Usage.CachedInputTokens = 11 })},
		{"infinite cost", "usage.cost_usd", reconcile(func(r *switchboardv1.ReconcileRequest) { r.Usage.CostUsd = math.Inf(1) })},
		{"900 kB reservation_id", "reservation_id", reconcile(func(r *switchboardv1.ReconcileRequest) { r.ReservationId = huge })},
		{"decide cached above input", "tokens.cached_input_tokens", func() error {
			r := decideReserve(byTenant("acme"))
			r.Tokens.CachedInputTokens = 1000
			_, err := svc.Decide(ctx, r)
			return err
		}},
		{"keep a 900 kB id", "reservation_ids[1]", func() error {
			_, err := svc.KeepReservations(ctx, &switchboardv1.KeepReservationsRequest{ReservationIds: []string{"a", huge}})
			return err
		}},
		{"hedge NaN", "estimated_cost_usd", func() error {
			_, err := edge.AcquireHedge(ctx, &switchboardv1.AcquireHedgeRequest{RequestId: "h0", EndpointId: secEndpoint, EstimatedCostUsd: math.NaN()})
			return err
		}},
		{"hedge negative", "estimated_cost_usd", func() error {
			_, err := edge.AcquireHedge(ctx, &switchboardv1.AcquireHedgeRequest{RequestId: "h0", EndpointId: secEndpoint, EstimatedCostUsd: -4.9})
			return err
		}},
		{"settle NaN", "settlements[0].loser_cost_usd", func() error {
			_, err := edge.SettleHedge(ctx, &switchboardv1.SettleHedgeRequest{Settlements: []*switchboardv1.HedgeSettlement{{RequestId: "h0", LoserCostUsd: math.NaN()}}})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.True(t, strings.HasPrefix(status.Convert(err).Message(), tc.field+":"), "the message names %s: %q", tc.field, status.Convert(err).Message())
			require.Less(t, len(status.Convert(err).Message()), 512, "the message does not echo the field back")
		})
	}
	require.InDelta(t, before, requestsLeft(t, d, "acme"), 1e-9, "nothing refused took a slot")

	// The budget of $5 after a NaN: at most one $4.90 hedge (none while the
	// budget's pacing holds it back), not three, and what is left is an
	// amount.
	granted := 0
	for _, id := range []string{"h1", "h2", "h3"} {
		resp, err := edge.AcquireHedge(ctx, &switchboardv1.AcquireHedgeRequest{RequestId: id, EndpointId: secEndpoint, EstimatedCostUsd: 4.9})
		require.NoError(t, err)
		if resp.GetGranted() {
			granted++
		}
		left := resp.GetRemainingUsd()
		require.False(t, math.IsNaN(left), "remaining is NaN")
		require.GreaterOrEqual(t, left, 5-4.9*float64(granted)-1e-9)
	}
	require.LessOrEqual(t, granted, 1)

	// On the Report stream a bad call report is dropped and counted, and the
	// stream is answered, not ended.
	require.NoError(t, report(ctx, edge,
		&switchboardv1.CallReport{RequestId: "c1", EndpointId: secEndpoint, Model: secModel, Outcome: 99},
		&switchboardv1.CallReport{RequestId: "c2", EndpointId: secEndpoint, Model: secModel, Usage: &switchboardv1.Usage{InputTokens: -3}}))
	require.Eventually(t, func() bool { return d.ReportsInvalid() == 2 }, 10*time.Second, 10*time.Millisecond, "both reports dropped and counted")

	// What is within bounds is still served.
	resp, err := svc.Reserve(ctx, reserveReq(byTenant("acme")))
	require.NoError(t, err)
	require.True(t, resp.GetAdmitted())
}
