package dispatch

import (
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/billing"
)

// report hands the decider what this attempt taught about the endpoint.
func (d *Dispatcher) report(call Call, l *leg) {
	res := l.res
	r := &switchboardv1.CallReport{
		RequestId:        call.RequestID,
		Model:            call.Model,
		EndpointId:       l.ep.GetId(),
		PromptTokens:     call.PromptTokens,
		StartTime:        timestamppb.New(res.start),
		Duration:         durationpb.New(res.duration),
		Outcome:          res.outcome,
		HttpStatus:       int32(res.status),
		RateLimitHeaders: res.headers,
		ProbeId:          call.ProbeID,
		TenantId:         call.TenantID,
		Error:            res.errText,
		Usage:            call.bill(l).Provider(),
		PromptHash:       call.PromptHash,
		Hedge:            l.hedge,
		// The reservation, for the record; with a Ledger it is reconciled
		// below, else the decider reconciles it from this report. Every leg
		// is reported once, whatever ended it.
		ReservationId: l.reservation,
		Stream:        call.Stream,
	}
	if res.hasTTFT {
		r.Ttft = durationpb.New(res.ttft)
	}
	if res.retryAfter > 0 {
		// The decider extends the endpoint's cool-down to at least this.
		r.RetryAfter = durationpb.New(res.retryAfter)
	}
	d.opts.Reporter.Report(r)
	if l.reservation != "" && d.opts.Ledger != nil {
		d.opts.Ledger.Reconcile(&switchboardv1.ReconcileRequest{
			ReservationId:    l.reservation,
			Usage:            call.bill(l).Tenant(),
			Outcome:          res.outcome,
			RateLimitHeaders: res.headers,
		})
	}
}

// bill is the leg as billing sees it once it ended.
func (c Call) bill(l *leg) billing.Attempt {
	return billing.Attempt{
		PromptTokens:   c.PromptTokens,
		Price:          l.ep.GetPrice(),
		Caps:           c.Caps,
		Served:         l.res.committed,
		Cancelled:      l.res.outcome == switchboardv1.Outcome_OUTCOME_CANCELLED,
		Usage:          l.res.usage,
		DeliveredBytes: l.res.delivered,
	}
}
