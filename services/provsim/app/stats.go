package app

import (
	"maps"
	"sync"
)

// Stats is a snapshot of one provider's counters, served as JSON at
// GET /admin/stats so black-box tests can check what reached the provider.
type Stats struct {
	// Requests counts every API request received (chat completions and
	// Messages), on arrival, before its body is read.
	Requests int64 `json:"requests"`
	// Messages counts the Messages API requests among Requests.
	Messages int64 `json:"messages"`
	// Started counts the calls the provider began to serve: body read and
	// parsed, model known. Each is recorded in its model's counters when it
	// ends; a request whose client left while its body was being read is
	// counted in Requests and BadRequest only.
	Started int64 `json:"started"`
	// Unauthorized counts requests refused for a missing or wrong API key.
	Unauthorized int64 `json:"unauthorized"`
	// BadRequest counts bodies refused before a model could be told (bad JSON,
	// missing fields), so they belong to no model.
	BadRequest int64 `json:"bad_request"`
	// UnknownModel counts requests for a model the provider does not serve.
	UnknownModel int64 `json:"unknown_model"`
	// Models holds the counters of each model, by model id.
	Models map[string]ModelStats `json:"models"`
}

// ModelStats are the counters of one model.
type ModelStats struct {
	// Requests counts requests addressed to the model.
	Requests int64 `json:"requests"`
	// Outcomes splits Requests by how each ended.
	Outcomes Outcomes `json:"outcomes"`
	// PromptTokens sums the prompt tokens of every request but bad requests.
	PromptTokens int64 `json:"prompt_tokens"`
	// CachedTokens sums the cached part of PromptTokens.
	CachedTokens int64 `json:"cached_tokens"`
	// CacheWriteTokens sums the prompt tokens written to the cache: the
	// Messages API's cache_creation_input_tokens, and for chat completions the
	// tokens of the prefix-cache blocks a prompt added (or renewed after they
	// expired).
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// CompletionTokens sums the tokens delivered: all of a completed call,
	// what was sent before a drop, nothing of a cancelled call.
	CompletionTokens int64 `json:"completion_tokens"`
}

// Outcomes count requests by how they ended.
type Outcomes struct {
	// OK counts replies delivered in full.
	OK int64 `json:"ok"`
	// Cancelled counts requests whose client went away during generation.
	Cancelled int64 `json:"cancelled"`
	// RateLimited counts 429s, from quotas or the rate_limit fault.
	RateLimited int64 `json:"rate_limited"`
	// Unavailable counts 5xx from the unavailable fault.
	Unavailable int64 `json:"unavailable"`
	// Hang counts hang faults (ended by the client going away).
	Hang int64 `json:"hang"`
	// Drop counts connections cut by the drop fault.
	Drop int64 `json:"drop"`
	// Malformed counts replies broken by the malformed fault.
	Malformed int64 `json:"malformed"`
	// BadRequest counts requests for the model refused as invalid (max_tokens,
	// unknown fault directive).
	BadRequest int64 `json:"bad_request"`
	// Refused counts requests answered by a scripted refusal.
	Refused int64 `json:"refused"`
}

type outcome int

const (
	outcomeOK outcome = iota
	outcomeCancelled
	outcomeRateLimited
	outcomeUnavailable
	outcomeHang
	outcomeDrop
	outcomeMalformed
	outcomeBadRequest
	outcomeRefused
)

func (o outcome) String() string {
	return [...]string{"ok", "cancelled", "rate_limited", "unavailable", "hang", "drop", "malformed", "bad_request", "refused"}[o]
}

func (o *Outcomes) add(x outcome) {
	switch x {
	case outcomeOK:
		o.OK++
	case outcomeCancelled:
		o.Cancelled++
	case outcomeRateLimited:
		o.RateLimited++
	case outcomeUnavailable:
		o.Unavailable++
	case outcomeHang:
		o.Hang++
	case outcomeDrop:
		o.Drop++
	case outcomeMalformed:
		o.Malformed++
	case outcomeBadRequest:
		o.BadRequest++
	case outcomeRefused:
		o.Refused++
	}
}

// counters guards a provider's Stats; one mutex is plenty at simulator rates.
type counters struct {
	mu sync.Mutex
	s  Stats
}

func (c *counters) update(f func(*Stats)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s.Models == nil {
		c.s.Models = map[string]ModelStats{}
	}
	f(&c.s)
}

// record adds one finished model request.
func (c *counters) record(model string, o outcome, prompt, cached, written, completion int64) {
	c.update(func(s *Stats) {
		m := s.Models[model]
		m.Requests++
		m.Outcomes.add(o)
		if o != outcomeBadRequest {
			m.PromptTokens += prompt
			m.CachedTokens += cached
			m.CacheWriteTokens += written
		}
		m.CompletionTokens += completion
		s.Models[model] = m
	})
}

func (c *counters) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.s
	s.Models = maps.Clone(c.s.Models)
	if s.Models == nil {
		s.Models = map[string]ModelStats{}
	}
	return s
}
