package dispatch

import (
	"errors"
	"net/http"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// StatusClientClosedRequest is the activity record's http_status for a
// client that went away before it got any answer (nginx's convention): it
// got no status at all, and 0 would read as unknown.
const StatusClientClosedRequest = 499

// record is the request's entry in the activity log: every
// attempt, the hedge, and what the client is billed. err is Serve's result.
func (s *serving) record(err error) *switchboardv1.ActivityRecord {
	now := time.Now()
	c := s.call
	r := &switchboardv1.ActivityRecord{
		Id:             c.RequestID,
		CreateTime:     timestamppb.New(c.Received),
		TenantId:       c.TenantID,
		ApiKeyId:       c.APIKeyID,
		Grant:          c.Grant,
		Caps:           c.GrantCaps,
		GrantRequestId: c.GrantRequestID,
		Model:          c.Model,
		RequestedModel: c.RequestedModel,
		Hedge:          s.hedge,
		Stream:         c.Stream,
		ClientApi:      c.ClientAPI,
		Duration:       durationpb.New(now.Sub(c.Received)),
	}
	r.Attempts = s.attemptRecords()

	var f *Failure
	switch {
	case errors.As(err, &f):
		r.Status, r.HttpStatus, r.Error = switchboardv1.CallStatus_CALL_STATUS_FAILED, int32(f.Status), f.Message
		r.Usage = &switchboardv1.Usage{}
		return r
	case err != nil || s.winner == nil:
		// The client left before anything was written: it pays nothing.
		r.Status, r.HttpStatus, r.Error = switchboardv1.CallStatus_CALL_STATUS_CLIENT_CANCELLED, StatusClientClosedRequest, "client went away"
		r.Usage = &switchboardv1.Usage{}
		return r
	}

	w := s.winner
	r.EndpointId, r.Provider, r.HttpStatus = w.Endpoint.GetId(), w.Endpoint.GetProvider(), http.StatusOK
	r.Ttft = durationpb.New(w.Result.CommittedAt.Sub(c.Received))
	switch {
	case w.Result.WriteFailed || w.Result.Outcome == switchboardv1.Outcome_OUTCOME_CANCELLED:
		r.Status, r.Error = switchboardv1.CallStatus_CALL_STATUS_CLIENT_CANCELLED, "client went away"
	case w.Result.Outcome == switchboardv1.Outcome_OUTCOME_OK:
		r.Status = switchboardv1.CallStatus_CALL_STATUS_OK
	default:
		r.Status, r.Error = switchboardv1.CallStatus_CALL_STATUS_INTERRUPTED, "the provider's stream was interrupted: "+w.Result.Summary
	}
	// The client pays the serving endpoint's price for the provider's usage,
	// or, without it, for what was delivered; never above its caps.
	u, capped := c.bill(w).Client()
	r.Usage = u
	r.CostUsd, r.CostCapped = u.GetCostUsd(), capped
	return r
}

// attemptRecords are the request's attempts as the activity record lists
// them: every leg and every endpoint skipped, in order.
func (s *serving) attemptRecords() []*switchboardv1.Attempt {
	c := s.call
	out := make([]*switchboardv1.Attempt, 0, len(s.attempts))
	for _, at := range s.attempts {
		if sk := at.skip; sk != nil {
			// Not a provider call: no status, no cost.
			out = append(out, &switchboardv1.Attempt{
				EndpointId: sk.ep.GetId(),
				Provider:   sk.ep.GetProvider(),
				Outcome:    sk.outcome,
				Hedge:      sk.hedge,
				Error:      sk.summary,
				StartTime:  timestamppb.New(sk.at),
			})
			continue
		}
		l := at.leg
		a := &switchboardv1.Attempt{
			EndpointId: l.Endpoint.GetId(),
			Provider:   l.Endpoint.GetProvider(),
			Outcome:    l.Result.Outcome,
			HttpStatus: int32(l.Result.Status),
			Hedge:      l.hedge,
			CostUsd:    c.bill(l).ProviderCost(),
			StartTime:  timestamppb.New(l.Result.Start),
		}
		if l.Result.HasTTFT {
			a.Ttft = durationpb.New(l.Result.TTFT)
		}
		if l.Result.Outcome != switchboardv1.Outcome_OUTCOME_OK {
			// The summary, not the provider's text: the log is shown to the
			// tenant, and provider errors may name internal addresses.
			a.Error = l.Result.Summary
		}
		out = append(out, a)
	}
	return out
}
