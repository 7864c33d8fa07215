package dispatch

import (
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/invoice"
)

// report hands the decider what this attempt taught about the endpoint.
func (d *Dispatcher) report(call Call, l *leg) {
	res := l.Result
	r := &switchboardv1.CallReport{
		RequestId:        call.RequestID,
		Model:            call.Model,
		EndpointId:       l.Endpoint.GetId(),
		PromptTokens:     call.PromptTokens,
		StartTime:        timestamppb.New(res.Start),
		Duration:         durationpb.New(res.Duration),
		Outcome:          res.Outcome,
		HttpStatus:       int32(res.Status),
		RateLimitHeaders: res.Headers,
		ProbeId:          call.ProbeID,
		TenantId:         call.TenantID,
		Error:            res.ErrText,
		Usage:            call.bill(l).Provider(),
		PromptHash:       call.PromptHash,
		Hedge:            l.hedge,
		// The reservation, for the record; it is reconciled below, through
		// the Ledger. Every leg is reported once, whatever ended it.
		ReservationId: l.reservation,
		Stream:        call.Stream,
		// The answer-quality checks a completed answer failed.
		QualityFailures: res.QualityFailures,
		// The same request failed the same way elsewhere: not this
		// endpoint's failure (see charge.go).
		RequestFailure: l.requestFailure,
		Traceparent:    l.traceparent(),
		ReportTime:     timestamppb.Now(),
	}
	if res.Outcome == switchboardv1.Outcome_OUTCOME_OK {
		// Only the attempt that served the prompt holds it in cache; the
		// others' reports stay small.
		r.Prefixes = call.Prefixes
	}
	if res.HasTTFT {
		r.Ttft = durationpb.New(res.TTFT)
	}
	if res.RetryAfter > 0 {
		// The decider extends the endpoint's cool-down to at least this.
		r.RetryAfter = durationpb.New(res.RetryAfter)
	}
	endSpan(l, r.GetUsage())
	d.opts.Reporter.Report(r)
	if l.reservation != "" {
		rr := &switchboardv1.ReconcileRequest{
			ReservationId:     l.reservation,
			Usage:             call.bill(l).Tenant(),
			Outcome:           res.Outcome,
			RateLimitHeaders:  res.Headers,
			Failure:           switchboardv1.RefusalReason(res.Class()),
			ProviderErrorCode: res.ProviderErrorCode,
		}
		if l.requestFailure {
			// The request's failure pauses nothing: every endpoint would
			// have failed it.
			rr.Failure = switchboardv1.RefusalReason_REFUSAL_REASON_NON_RETRYABLE_REQUEST
			rr.RateLimitHeaders = withoutRetryAfter(res.Headers)
		}
		d.opts.Ledger.Reconcile(rr)
	}
}

// bill is the leg as billing sees it once it ended.
func (c Call) bill(l *leg) invoice.Attempt {
	return invoice.Attempt{
		PromptTokens:   c.PromptTokens,
		Price:          l.Endpoint.GetPrice(),
		Caps:           c.Caps,
		Served:         l.Result.Committed,
		Cancelled:      l.Result.Outcome == switchboardv1.Outcome_OUTCOME_CANCELLED,
		Usage:          l.Result.Usage,
		DeliveredBytes: l.Result.Delivered,
		MaxOutput:      c.GrantCaps.GetMaxOutputTokens(),
	}
}
