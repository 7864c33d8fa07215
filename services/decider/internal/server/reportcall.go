package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// ReportCall implements [switchboardv1.RouterServiceServer.ReportCall]: a
// request the caller dispatched itself, reported at once, as an edge
// reports its requests on its Report stream.
func (s *Server) ReportCall(ctx context.Context, req *switchboardv1.ReportCallRequest) (*switchboardv1.ReportCallResponse, error) {
	p := s.policy
	if err := p.Ready(); err != nil {
		return nil, err
	}
	rec := req.GetRecord()
	if rec == nil || rec.GetId() == "" {
		return nil, fieldStatus("record.id is required: the request_id Decide answered", "record.id", "REQUIRED")
	}
	if rec.GetGrantRequestId() != "" {
		// An earlier decision's grant covers only the calls an edge served
		// while no decider answered it; a service reports each request
		// under the decision Decide answered for it.
		return nil, fieldStatus("record.grant_request_id is for an edge's offline calls: report the request under its own decision's grant",
			"record.grant_request_id", "NOT_ALLOWED")
	}
	if len(req.GetReconciles()) > validate.MaxList {
		return nil, status.Errorf(codes.InvalidArgument, "reconciles: %d items, at most %d allowed", len(req.GetReconciles()), validate.MaxList)
	}
	errs := []error{validate.ActivityRecord(rec), validate.Tokens("prompt_tokens", req.GetPromptTokens())}
	for i, rq := range req.GetReconciles() {
		if rq.GetReservationId() == "" {
			errs = append(errs, fmt.Errorf("reconciles[%d].reservation_id is required", i))
		} else if err := validate.Reconcile(rq); err != nil {
			errs = append(errs, fmt.Errorf("reconciles[%d]: %w", i, err))
		}
	}
	reports := callReports(req)
	for _, r := range reports {
		errs = append(errs, validate.CallReport(r))
	}
	if err := invalid(errors.Join(errs...)); err != nil {
		return nil, err
	}
	caller := auth.FromContext(ctx)
	if caller != nil && !caller.ActsFor(rec.GetTenantId()) {
		return nil, status.Errorf(codes.PermissionDenied, "caller %q may not act for tenant %q", caller.ID, rec.GetTenantId())
	}
	var reconciled int64
	for _, rq := range req.GetReconciles() {
		_, err := p.Reconcile(ctx, rq, s.allow(ctx))
		switch status.Code(err) {
		case codes.OK:
			reconciled++
		case codes.NotFound: // reconciled before, or expired: nothing left to do
		default:
			return nil, err
		}
	}
	if !auth.SharesProviderState(ctx) {
		// What a service the catalog does not trust with shared provider
		// state reports of a failure stays its tenant's (the
		// reconciliation above): only its timings of calls that worked
		// reach the statistics every tenant is routed by.
		ok := reports[:0]
		for _, r := range reports {
			if r.GetOutcome() == switchboardv1.Outcome_OUTCOME_OK {
				ok = append(ok, r)
			}
		}
		reports = ok
	}
	from := &switchboardv1.EdgeHello{EdgeId: "caller/unknown"}
	if caller != nil {
		from.EdgeId = "caller/" + caller.ID
	}
	if err := s.hub.Take(ctx, from, reports, []*switchboardv1.ActivityRecord{rec}); err != nil {
		return nil, status.Errorf(codes.Unavailable, "activity record not stored: %v", err)
	}
	return &switchboardv1.ReportCallResponse{Reconciled: reconciled}, nil
}

// callReports are the call reports of a reported request's attempts, as an
// edge would have sent them: the attempt that served the request (the
// record's endpoint, the last attempt on it) carries the request's usage,
// its prefixes and its duration up to the request's end.
func callReports(req *switchboardv1.ReportCallRequest) []*switchboardv1.CallReport {
	rec := req.GetRecord()
	served := -1
	for i, a := range rec.GetAttempts() {
		if a.GetEndpointId() == rec.GetEndpointId() && a.GetOutcome() == switchboardv1.Outcome_OUTCOME_OK {
			served = i
		}
	}
	out := make([]*switchboardv1.CallReport, 0, len(rec.GetAttempts()))
	for i, a := range rec.GetAttempts() {
		r := &switchboardv1.CallReport{
			RequestId: rec.GetId(), Model: rec.GetModel(), EndpointId: a.GetEndpointId(), PromptTokens: req.GetPromptTokens(),
			StartTime: a.GetStartTime(), Ttft: a.GetTtft(), Outcome: a.GetOutcome(), HttpStatus: a.GetHttpStatus(),
			TenantId: rec.GetTenantId(), Error: a.GetError(), Hedge: a.GetHedge(), Stream: rec.GetStream(),
		}
		if i == served {
			r.Usage, r.Prefixes = rec.GetUsage(), req.GetPrefixes()
			if n := len(r.Prefixes); n > 0 {
				r.PromptHash = r.Prefixes[n-1].GetHash()
			}
			if start, end := a.GetStartTime(), rec.GetCreateTime(); start.IsValid() && end.IsValid() && rec.GetDuration() != nil {
				if d := end.AsTime().Add(rec.GetDuration().AsDuration()).Sub(start.AsTime()); d > 0 {
					r.Duration = durationpb.New(d)
				}
			}
		}
		out = append(out, r)
	}
	return out
}
