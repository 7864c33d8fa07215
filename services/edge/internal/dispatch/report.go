package dispatch

import (
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// report hands the decider what this attempt taught about the endpoint.
func (d *Dispatcher) report(call Call, ep *switchboardv1.Endpoint, res result) {
	r := &switchboardv1.CallReport{
		RequestId:        call.RequestID,
		Model:            call.Model,
		EndpointId:       ep.GetId(),
		PromptTokens:     call.PromptTokens,
		StartTime:        timestamppb.New(res.start),
		Duration:         durationpb.New(res.duration),
		Outcome:          res.outcome,
		HttpStatus:       int32(res.status),
		RateLimitHeaders: res.headers,
		ProbeId:          call.ProbeID,
		TenantId:         call.TenantID,
		Error:            res.errText,
		Usage:            reportUsage(call, ep, res),
		PromptHash:       call.PromptHash,
	}
	if res.hasTTFT {
		r.Ttft = durationpb.New(res.ttft)
	}
	if res.retryAfter > 0 {
		r.RetryAfter = durationpb.New(res.retryAfter)
	}
	d.opts.Reporter.Report(r)
}

// reportUsage is the provider's usage priced at the endpoint's list. Without
// provider usage a completed call reports the prompt estimate, marked as not
// reported, so the decider can tell the two apart.
func reportUsage(call Call, ep *switchboardv1.Endpoint, res result) *switchboardv1.Usage {
	u := &switchboardv1.Usage{}
	switch {
	case res.usage != nil:
		u.InputTokens, u.CachedInputTokens, u.OutputTokens, u.Reported = res.usage.input, res.usage.cached, res.usage.output, true
	case res.outcome == switchboardv1.Outcome_OUTCOME_OK:
		u.InputTokens = call.PromptTokens
	default:
		return u
	}
	cached := min(max(u.CachedInputTokens, 0), u.InputTokens)
	p := ep.GetPrice()
	u.CostUsd = (float64(u.InputTokens-cached)*p.GetInput() +
		float64(cached)*p.GetCachedInput() +
		float64(u.OutputTokens)*p.GetOutput()) / 1e6
	return u
}
