package chaos

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// maxPause is the longest a report may bench an endpoint or pause a route
// (the longest a provider's own Retry-After may set).
const maxPause = 15 * time.Minute

// fillReservations is how many reservations with ids of the largest size
// the boundary accepts the attacker's service opens: enough to take a
// snapshot past etcd's request limit (1.5 MiB) if nothing bounds it.
const fillReservations = 2500

// attacks runs every attack from a valid credential against decider at (a
// replica that forwards to the owner) and returns one check each.
func (s *system) attacks(ctx context.Context, hc *http.Client, at int) []Check {
	svc, closeSvc, err := s.rpc(at, serviceToken)
	if err != nil {
		return []Check{{Name: "attacks", Measured: err.Error()}}
	}
	defer closeSvc()
	edgeRPC, closeEdge, err := s.rpc(at, edgeToken)
	if err != nil {
		return []Check{{Name: "attacks", Measured: err.Error()}}
	}
	defer closeEdge()
	ops, closeOps, err := s.rpc(at, operatorToken)
	if err != nil {
		return []Check{{Name: "attacks", Measured: err.Error()}}
	}
	defer closeOps()
	// The fill comes last: what it leaves open (reservations with a long
	// TTL) must not be what refuses the attacks after it.
	var out []Check
	out = append(out, s.attackServiceHeaders(ctx, hc, svc))
	out = append(out, attackRetryAfter(ctx, edgeRPC))
	out = append(out, attackHedgeNaN(ctx, edgeRPC))
	out = append(out, attackActivity(ctx, edgeRPC, ops))
	out = append(out, attackHugeIDs(ctx, svc)...)
	out = append(out, s.attackFill(ctx, svc))
	out = append(out, s.servedAfterFill(ctx, hc))
	return out
}

// servedAfterFill: another tenant's request is still served, on the model
// the attacker's service filled with reservations (not the one whose
// route its reconcile paused).
func (s *system) servedAfterFill(ctx context.Context, hc *http.Client) Check {
	c := Check{Name: "after the fill, tenant victim is served on chaos/fill", Bound: "200 from p-spare through every edge", OK: true}
	var got []string
	for _, e := range s.edges {
		a := ask(ctx, hc, e, tenantVictim, keyVictim, modelFill, "still there", 4, false, "")
		got = append(got, fmt.Sprintf("edge %s: %d %s%s", e.name, a.status, a.provider, a.code))
		c.OK = c.OK && a.status == http.StatusOK && a.provider == "p-spare"
	}
	c.Measured = strings.Join(got, ", ")
	return c
}

// reserveReq is a reservation of mallory's on model's endpoint at p-spare.
func reserveReq(model, requestID, key string, ttl time.Duration) *switchboardv1.ReserveRequest {
	return &switchboardv1.ReserveRequest{
		RequestId: requestID, IdempotencyKey: key, Identity: &switchboardv1.Identity{TenantId: tenantMallory},
		Model: model, EndpointId: "p-spare/" + model, Demand: &switchboardv1.Demand{Requests: 1, InputTokens: 10, OutputTokens: 8},
		// A refusal is answered at once instead of waiting in the queue.
		Ttl: durationpb.New(ttl), MaxWait: durationpb.New(-time.Millisecond),
	}
}

// attackHugeIDs: the service reserves (on chaos/fill, which no pause of
// the other attacks touches) with a 900 kB request id, then a
// 900 kB idempotency key; the boundary must refuse both.
func attackHugeIDs(ctx context.Context, svc switchboardv1.DeciderClient) []Check {
	huge := strings.Repeat("x", 900_000)
	var out []Check
	for _, tc := range []struct{ name, id, key string }{{"request_id", huge, "k"}, {"idempotency_key", "r", huge}} {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := svc.Reserve(cctx, reserveReq(modelFill, tc.id, tc.key, time.Minute))
		cancel()
		out = append(out, Check{Name: "attack: service reserves with a 900 kB " + tc.name, Bound: "INVALID_ARGUMENT",
			Measured: status.Code(err).String(), OK: status.Code(err) == codes.InvalidArgument})
	}
	return out
}

// attackFill: the service opens many reservations with ids of the largest
// size the boundary accepts; the broker's snapshot must still be written.
func (s *system) attackFill(ctx context.Context, svc switchboardv1.DeciderClient) Check {
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > fillReservations || ctx.Err() != nil {
					return
				}
				id := fmt.Sprintf("fill-%06d-", i)
				id += strings.Repeat("i", 128-len(id))
				key := fmt.Sprintf("fill-key-%06d-", i)
				key += strings.Repeat("k", 400-len(key))
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := svc.Reserve(cctx, reserveReq(modelFill, id, key, 10*time.Minute))
				cancel()
				if err == nil && resp.GetAdmitted() {
					admitted.Add(1)
				} else {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	c := Check{Name: fmt.Sprintf("attack: service opens %d reservations with 128 B ids and 400 B keys", fillReservations),
		Bound: "the broker's snapshot is written again within 5 s"}
	// A snapshot encoded before the last reservations may still be
	// committed after them: the revision to beat is read once the owner had
	// time to write one with all of them (about a second apart).
	select {
	case <-ctx.Done():
	case <-time.After(1500 * time.Millisecond):
	}
	rev0, err := s.snapshotRevision(ctx)
	if err != nil {
		c.Measured = err.Error()
		return c
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if rev, err := s.snapshotRevision(ctx); err == nil && rev > rev0 {
			c.OK = true
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	state := "not written for 5 s"
	if c.OK {
		state = "written"
	}
	c.Measured = fmt.Sprintf("%d admitted, %d refused; snapshot %s", admitted.Load(), refused.Load(), state)
	return c
}

// attackServiceHeaders: the service, scoped to mallory, reconciles its own
// reservation on p-spare as a provider policy refusal with retry-after 590;
// tenant victim's next requests on that endpoint, through either edge, must
// be served by it, not refused as paused.
func (s *system) attackServiceHeaders(ctx context.Context, hc *http.Client, svc switchboardv1.DeciderClient) Check {
	c := Check{Name: "attack: mallory's service reconciles with retry-after: 590", Bound: "victim served on p-spare through every edge"}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := svc.Reserve(cctx, reserveReq(modelSpare, "scope-1", "scope-1-key", time.Minute))
	if err != nil || !resp.GetAdmitted() {
		c.Measured = fmt.Sprintf("reserve: %v %v", err, resp.GetRefusal())
		return c
	}
	_, err = svc.Reconcile(cctx, &switchboardv1.ReconcileRequest{
		ReservationId: resp.GetReservation().GetReservationId(), Outcome: switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR,
		Failure: switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_POLICY, Usage: &switchboardv1.Usage{InputTokens: 10},
		RateLimitHeaders: []*switchboardv1.Header{{Name: "retry-after", Value: "590"}},
	})
	reconciled := "reconcile " + status.Code(err).String()
	var got []string
	c.OK = true
	for _, e := range s.edges {
		a := ask(ctx, hc, e, tenantVictim, keyVictim, modelSpare, "are you paused", 4, false, "")
		got = append(got, fmt.Sprintf("edge %s: %d %s%s", e.name, a.status, a.provider, a.code))
		c.OK = c.OK && a.status == http.StatusOK && a.provider == "p-spare"
	}
	c.Measured = reconciled + "; " + strings.Join(got, ", ")
	return c
}

// attackRetryAfter: the edge credential reports three 429s with
// retry_after 87,600 h on spare2's endpoint; a cool-down it causes must end
// within maxPause.
func attackRetryAfter(ctx context.Context, edgeRPC switchboardv1.DeciderClient) Check {
	c := Check{Name: "attack: edge reports 3 × 429 with retry_after 87,600 h", Bound: fmt.Sprintf("any cool-down ≤ %s", maxPause)}
	ep := "p-spare/" + modelSpare2
	sctx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	st, err := edgeRPC.Report(sctx)
	if err != nil {
		c.Measured = err.Error()
		return c
	}
	_ = st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: "chaos-attacker", Region: "local"}}})
	var reports []*switchboardv1.CallReport
	for i := range 3 {
		reports = append(reports, &switchboardv1.CallReport{
			RequestId: fmt.Sprintf("ra-%d", i), Model: modelSpare2, EndpointId: ep, TenantId: tenantVictim, PromptTokens: 10,
			StartTime: timestamppb.Now(), Duration: durationpb.New(100 * time.Millisecond),
			Outcome: switchboardv1.Outcome_OUTCOME_RATE_LIMITED, HttpStatus: 429, RetryAfter: durationpb.New(87_600 * time.Hour),
		})
	}
	sent := time.Now()
	_ = st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Batch{Batch: &switchboardv1.CallReportBatch{Reports: reports}}})
	var longest time.Duration
	seen := false
	for {
		m, err := st.Recv()
		if err != nil {
			break
		}
		if cd := m.GetCooldown(); cd != nil && cd.GetEndpointId() == ep {
			seen = true
			longest = max(longest, cd.GetUntil().AsTime().Sub(sent))
		}
	}
	c.OK = longest <= maxPause+time.Minute
	if !seen {
		c.Measured = "no cool-down within 6 s"
	} else {
		c.Measured = fmt.Sprintf("cool-down for %s", longest.Round(time.Minute))
	}
	return c
}

// attackHedgeNaN: the edge credential asks for a hedge costing NaN.
func attackHedgeNaN(ctx context.Context, edgeRPC switchboardv1.DeciderClient) Check {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := edgeRPC.AcquireHedge(cctx, &switchboardv1.AcquireHedgeRequest{RequestId: "chaos-nan", EndpointId: "p-hb/" + modelHedge, EstimatedCostUsd: math.NaN()})
	c := Check{Name: "attack: edge AcquireHedge with a NaN cost", Bound: "INVALID_ARGUMENT (and the budget check below)",
		Measured: status.Code(err).String(), OK: status.Code(err) == codes.InvalidArgument}
	if err == nil {
		c.Measured = fmt.Sprintf("granted=%v remaining=%g", resp.GetGranted(), resp.GetRemainingUsd())
	}
	return c
}

// attackActivity: the edge credential takes a real grant from a Decide it
// never dispatches and writes an activity record of $999 and 10⁹ output
// tokens under it; no replica may list it with that bill.
func attackActivity(ctx context.Context, edgeRPC, ops switchboardv1.DeciderClient) Check {
	c := Check{Name: "attack: edge writes a $999 activity record under a real grant", Bound: "not stored with that bill"}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	const id = "chaos-forged-999"
	dec, err := edgeRPC.Decide(cctx, &switchboardv1.DecideRequest{
		RequestId: id, Identity: &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(keyVictim)}, Model: modelSpare,
		Tokens: &switchboardv1.TokenEstimate{InputTokens: 10, MaxOutputTokens: 8},
	})
	if err != nil {
		c.Measured = "decide: " + err.Error()
		return c
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	st, err := edgeRPC.Report(sctx)
	if err != nil {
		c.Measured = err.Error()
		return c
	}
	_ = st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Hello{Hello: &switchboardv1.EdgeHello{EdgeId: "chaos-forger", Region: "local"}}})
	rec := &switchboardv1.ActivityRecord{
		Id: id, CreateTime: timestamppb.Now(), TenantId: dec.GetIdentity().GetTenantId(), ApiKeyId: dec.GetIdentity().GetApiKeyId(),
		Model: modelSpare, EndpointId: dec.GetEndpoint().GetId(), Provider: dec.GetEndpoint().GetProvider(),
		Usage:   &switchboardv1.Usage{InputTokens: 10, OutputTokens: 1_000_000_000, CostUsd: 999, Reported: true},
		CostUsd: 999, Status: switchboardv1.CallStatus_CALL_STATUS_OK, HttpStatus: 200, Grant: dec.GetGrant(),
		Attempts: []*switchboardv1.Attempt{{EndpointId: dec.GetEndpoint().GetId(), Provider: dec.GetEndpoint().GetProvider(),
			Outcome: switchboardv1.Outcome_OUTCOME_OK, HttpStatus: 200, CostUsd: 999, StartTime: timestamppb.Now()}},
	}
	_ = st.Send(&switchboardv1.ReportRequest{Kind: &switchboardv1.ReportRequest_Activity{Activity: &switchboardv1.ActivityBatch{Records: []*switchboardv1.ActivityRecord{rec}, Sequence: 1}}})
	acked := false
	for !acked {
		m, err := st.Recv()
		if err != nil {
			break
		}
		acked = m.GetAck().GetActivitySequence() == 1
	}
	list, err := ops.GetActivity(cctx, &switchboardv1.GetActivityRequest{Identity: &switchboardv1.Identity{TenantId: tenantVictim}, Id: id})
	switch {
	case status.Code(err) == codes.NotFound:
		c.OK, c.Measured = true, fmt.Sprintf("acked=%v, not stored", acked)
	case err != nil:
		c.Measured = "get activity: " + err.Error()
	default:
		cost := list.GetRecord().GetCostUsd()
		c.OK = cost < 1
		c.Measured = fmt.Sprintf("acked=%v, stored with $%g and %d output tokens", acked, cost, list.GetRecord().GetUsage().GetOutputTokens())
	}
	return c
}
