package dispatch

import (
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
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
		Usage:            attemptUsage(call, l),
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
			Usage:            tenantUsage(call, l),
			Outcome:          res.outcome,
			RateLimitHeaders: res.headers,
		})
	}
}

// tenantUsage is what one call consumed as the tenant's quotas count it:
// its tokens, whoever pays for them, and as cost what the tenant is billed
// for it — the served attempt's bill (what the activity log records, the
// same when the client left mid-answer: it pays for what it got), nothing
// for any other attempt (a failed one, a lost hedge, one the client left
// before it started).
func tenantUsage(call Call, l *leg) *switchboardv1.Usage {
	if !l.res.committed {
		u := attemptUsage(call, l)
		u.CostUsd = 0
		return u
	}
	u, reported := billedUsage(call, l)
	cost, _ := charge(u, l.ep.GetPrice(), call.Caps)
	return &switchboardv1.Usage{
		InputTokens: u.input, CachedInputTokens: u.cached, OutputTokens: u.output,
		CostUsd: cost, Reported: reported,
	}
}

// billedUsage is the usage the client of a served attempt is billed for:
// its provider's, or without one an estimate of what was delivered.
func billedUsage(call Call, l *leg) (usage, bool) {
	if l.res.usage != nil {
		return *l.res.usage, true
	}
	return call.estimate(l.res.delivered), false
}

// attemptUsage is what the provider charges for one call, at its list price
// (the client's caps are the client's bill, not the provider's):
//   - a call that answered: the provider's usage, or without one an estimate
//     of what was delivered (prompt estimate in, delivered text out), marked
//     as not reported so the decider can tell the two apart;
//   - a call cancelled before its first token (a lost hedge, a client that
//     left): its prompt at the uncached input price, not reported;
//   - a call that failed: nothing.
func attemptUsage(call Call, l *leg) *switchboardv1.Usage {
	res := l.res
	var u usage
	reported := false
	switch {
	case res.committed && res.usage != nil:
		u, reported = *res.usage, true
	case res.committed:
		u = call.estimate(res.delivered)
	case res.outcome == switchboardv1.Outcome_OUTCOME_CANCELLED:
		u = usage{input: call.PromptTokens}
	default:
		return &switchboardv1.Usage{}
	}
	return &switchboardv1.Usage{
		InputTokens:       u.input,
		CachedInputTokens: u.cached,
		OutputTokens:      u.output,
		CostUsd:           listCost(u, l.ep.GetPrice()),
		Reported:          reported,
	}
}
