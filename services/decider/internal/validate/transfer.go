package validate

import (
	"errors"
	"fmt"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// MaxServedPerPrompt bounds the endpoints of one transferred affinity
// entry, as the affinity table keeps them.
const MaxServedPerPrompt = 4

// AffinityEntry checks one prompt of a state transfer.
func AffinityEntry(e *switchboardv1.AffinityEntry) error {
	if e.GetHash() == 0 || len(e.GetServed()) == 0 || len(e.GetServed()) > MaxServedPerPrompt {
		return fmt.Errorf("affinity entry: a hash and 1 to %d endpoints are required", MaxServedPerPrompt)
	}
	if err := Tokens("tokens", e.GetTokens()); err != nil {
		return err
	}
	for _, s := range e.GetServed() {
		if s.GetEndpointId() == "" || s.GetTime() == nil {
			return errors.New("affinity entry: every endpoint needs an endpoint_id and a time")
		}
		if err := first(Model("endpoint_id", s.GetEndpointId()), Time("time", s.GetTime())); err != nil {
			return err
		}
	}
	return nil
}

// Conversation checks one named conversation of a state transfer.
func Conversation(t *switchboardv1.SessionTurn) error {
	if t.GetEndpointId() == "" {
		return errors.New("conversation: endpoint_id is required")
	}
	return SessionTurn(t)
}

// CooldownEntry checks one endpoint's cool-down state of a state transfer.
func CooldownEntry(e *switchboardv1.CooldownEntry) error {
	if e.GetEndpointId() == "" || len(e.GetRefusals()) > MaxList {
		return fmt.Errorf("cool-down entry: an endpoint_id and at most %d refusals are required", MaxList)
	}
	errs := []error{Model("endpoint_id", e.GetEndpointId()), Time("until", e.GetUntil())}
	for _, r := range e.GetRefusals() {
		errs = append(errs, Time("refusals", r))
	}
	return first(errs...)
}

// OutcomeEntry checks one endpoint's routing-cost figures of a state
// transfer: every sum finite and not negative.
func OutcomeEntry(e *switchboardv1.OutcomeEntry) error {
	if e.GetEndpointId() == "" || e.GetTime() == nil || len(e.GetChecks()) > MaxList {
		return fmt.Errorf("outcome entry: an endpoint_id, a time and at most %d checks are required", MaxList)
	}
	errs := []error{Model("endpoint_id", e.GetEndpointId()), Time("time", e.GetTime()), Time("cap_time", e.GetCapTime()), Time("paused_until", e.GetPausedUntil())}
	for name, v := range map[string]float64{
		"calls": e.GetCalls(), "rate_limited": e.GetRateLimited(), "failed": e.GetFailed(), "poor": e.GetPoor(),
		"recent_calls": e.GetRecentCalls(), "recent_failed": e.GetRecentFailed(), "priced": e.GetPriced(),
		"input_tokens": e.GetInputTokens(), "cached_tokens": e.GetCachedTokens(), "output_tokens": e.GetOutputTokens(),
		"charged_usd": e.GetChargedUsd(), "output_tokens_timed": e.GetOutputTokensTimed(), "call_seconds": e.GetCallSeconds(), "cap": e.GetCap(),
	} {
		errs = append(errs, Finite(name, v))
	}
	for name, v := range e.GetChecks() {
		errs = append(errs, Name("checks", name), Finite("checks", v))
	}
	return first(errs...)
}
