package experiment

import (
	"fmt"
	"maps"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	statev1 "github.com/switchboard-ai/switchboard/proto/switchboard/state/v1"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// block is one block's figures: counts, sums and histograms only, so
// adding a request is a few additions and two blocks (of two replicas)
// merge by adding.
type block struct {
	requests    int64   // counted, burn-in excluded
	burnIn      int64   // in the burn-in, not counted
	costUSD     float64 // billed to clients
	tokens      int64   // input and output tokens billed
	rateLimited int64   // requests with at least one 429
	retried     int64   // requests that needed another attempt
	failedMS    float64 // time spent on failed attempts
	ttft        hist    // the serving attempt's time to first token, ms
	callerTTFT  hist    // the client's time to first token, ms
	throughput  hist    // output tokens/s from the serving attempt's start to the end
	e2e         hist    // the whole request, ms
}

func (b *block) merge(o *block) {
	b.requests += o.requests
	b.burnIn += o.burnIn
	b.costUSD += o.costUSD
	b.tokens += o.tokens
	b.rateLimited += o.rateLimited
	b.retried += o.retried
	b.failedMS += o.failedMS
	b.ttft.merge(&o.ttft)
	b.callerTTFT.merge(&o.callerTTFT)
	b.throughput.merge(&o.throughput)
	b.e2e.merge(&o.e2e)
}

// add counts one request of this block, past its burn-in.
func (b *block) add(r *switchboardv1.ActivityRecord) {
	b.requests++
	b.costUSD += r.GetCostUsd()
	b.tokens += max(r.GetUsage().GetInputTokens(), 0) + max(r.GetUsage().GetOutputTokens(), 0)
	if d := r.GetTtft(); d != nil && d.AsDuration() > 0 {
		b.callerTTFT.add(ms(d.AsDuration()))
	}
	end := r.GetCreateTime().AsTime().Add(r.GetDuration().AsDuration())
	served := servedAttempt(r)
	ok := r.GetStatus() == switchboardv1.CallStatus_CALL_STATUS_OK
	if served != nil {
		if d := served.GetTtft(); d != nil && d.AsDuration() > 0 {
			b.ttft.add(ms(d.AsDuration()))
		}
		if out := r.GetUsage().GetOutputTokens(); ok && out > 0 && served.GetStartTime() != nil {
			if secs := end.Sub(served.GetStartTime().AsTime()).Seconds(); secs > 0 {
				b.throughput.add(float64(out) / secs)
			}
		}
	}
	if ok && r.GetDuration() != nil {
		b.e2e.add(ms(r.GetDuration().AsDuration()))
	}
	limited, tries := false, 0
	for _, a := range r.GetAttempts() {
		limited = limited || a.GetOutcome() == switchboardv1.Outcome_OUTCOME_RATE_LIMITED || a.GetHttpStatus() == 429
		if !a.GetHedge() {
			tries++
		}
	}
	if limited {
		b.rateLimited++
	}
	if tries > 1 {
		b.retried++
	}
	b.failedMS += ms(failedTime(r, served, end))
}

// servedAttempt is the attempt that produced the answer, nil if none did.
func servedAttempt(r *switchboardv1.ActivityRecord) *switchboardv1.Attempt {
	if r.GetEndpointId() == "" {
		return nil
	}
	var served *switchboardv1.Attempt
	for _, a := range r.GetAttempts() {
		if a.GetEndpointId() == r.GetEndpointId() && a.GetOutcome() == switchboardv1.Outcome_OUTCOME_OK {
			served = a
		}
	}
	return served
}

// failed reports whether an attempt failed on the provider's side (a
// cancelled one was a hedge that lost or a client that left).
func failed(a *switchboardv1.Attempt) bool {
	switch a.GetOutcome() {
	case switchboardv1.Outcome_OUTCOME_OK, switchboardv1.Outcome_OUTCOME_CANCELLED, switchboardv1.Outcome_OUTCOME_UNSPECIFIED:
		return false
	}
	return true
}

// failedTime is how long the client waited on failed attempts: each failed
// attempt that was not a hedge leg, from its start to the start of the next
// attempt that was not one either, or to the end of the request when none
// followed. A failed attempt that ran beside a hedge leg which went on to
// serve cost the client nothing: the answer was already on its way.
func failedTime(r *switchboardv1.ActivityRecord, served *switchboardv1.Attempt, end time.Time) time.Duration {
	var total time.Duration
	atts := r.GetAttempts()
	for i, a := range atts {
		if a.GetHedge() || !failed(a) || a.GetStartTime() == nil {
			continue
		}
		start := a.GetStartTime().AsTime()
		until := end
		next := false
		for _, b := range atts[i+1:] {
			if !b.GetHedge() && b.GetStartTime() != nil {
				until, next = b.GetStartTime().AsTime(), true
				break
			}
		}
		if !next && served != nil && served.GetHedge() {
			if s := served.GetStartTime(); s == nil || !s.AsTime().After(start) {
				continue
			}
			until = served.GetStartTime().AsTime()
		}
		if until.After(start) {
			total += until.Sub(start)
		}
	}
	return total
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Aggregate is one replica's figures of one experiment, block by block,
// built from the activity records it receives. Safe for concurrent use.
type Aggregate struct {
	mu     sync.Mutex
	plan   *Plan
	blocks map[int]*block
	dirty  map[int]bool // changed since the last Dirty
}

// NewAggregate returns an empty aggregate of p.
func NewAggregate(p *Plan) *Aggregate {
	return &Aggregate{plan: p, blocks: map[int]*block{}, dirty: map[int]bool{}}
}

// SetPlan replaces the plan by another of the same experiment (a stop).
func (a *Aggregate) SetPlan(p *Plan) {
	a.mu.Lock()
	a.plan = p
	a.mu.Unlock()
}

// Add attributes records to the blocks of their create time: the records
// of models the experiment does not cover, or from outside it, are
// ignored; those in a burn-in are only counted as discarded. It returns
// how many were counted and how many fell in a burn-in.
func (a *Aggregate) Add(records []*switchboardv1.ActivityRecord) (counted, burnIn int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range records {
		if !a.plan.InScope(r.GetModel()) || !r.GetCreateTime().IsValid() {
			continue
		}
		s, ok := a.plan.Locate(r.GetCreateTime().AsTime())
		if !ok {
			continue
		}
		b := a.blocks[s.Block]
		if b == nil {
			b = &block{}
			a.blocks[s.Block] = b
		}
		a.dirty[s.Block] = true
		if s.BurnIn {
			b.burnIn++
			burnIn++
			continue
		}
		b.add(r)
		counted++
	}
	return counted, burnIn
}

// Encode returns the blocks changed since the last Encode (every block
// with all), each encoded for storage, keyed by block index. A block that
// fails to store is passed to Redirty.
func (a *Aggregate) Encode(all bool) (map[int][]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[int][]byte{}
	for i, b := range a.blocks {
		if !all && !a.dirty[i] {
			continue
		}
		data, err := encodeBlock(b)
		if err != nil {
			return nil, fmt.Errorf("encode block %d: %w", i, err)
		}
		out[i] = data
	}
	clear(a.dirty)
	return out, nil
}

// Redirty marks blocks as changed again, so the next Encode includes them.
func (a *Aggregate) Redirty(blocks []int) {
	a.mu.Lock()
	for _, i := range blocks {
		a.dirty[i] = true
	}
	a.mu.Unlock()
}

// Restore adds stored blocks (this replica's, saved before a restart).
func (a *Aggregate) Restore(stored map[int][]byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, data := range stored {
		b, err := decodeBlock(data)
		if err != nil {
			return fmt.Errorf("block %d: %w", i, err)
		}
		if cur := a.blocks[i]; cur != nil {
			cur.merge(b)
		} else {
			a.blocks[i] = b
		}
	}
	return nil
}

// snapshot returns a deep copy of the blocks.
func (a *Aggregate) snapshot() map[int]*block {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[int]*block, len(a.blocks))
	for i, b := range a.blocks {
		c := &block{}
		c.merge(b)
		out[i] = c
	}
	return out
}

// mergeBlocks adds src's blocks into dst.
func mergeBlocks(dst, src map[int]*block) {
	for i, b := range src {
		if cur := dst[i]; cur != nil {
			cur.merge(b)
		} else {
			c := &block{}
			c.merge(b)
			dst[i] = c
		}
	}
}

// encodeBlock writes a block as kept in etcd, a statev1.ExperimentBlock;
// histograms are sparse.
func encodeBlock(b *block) ([]byte, error) {
	return proto.Marshal(&statev1.ExperimentBlock{
		Requests: b.requests, BurnIn: b.burnIn, CostUsd: b.costUSD, Tokens: b.tokens,
		RateLimited: b.rateLimited, Retried: b.retried, FailedMs: b.failedMS,
		Ttft: b.ttft.sparse(), CallerTtft: b.callerTTFT.sparse(), Throughput: b.throughput.sparse(), E2E: b.e2e.sparse(),
	})
}

func decodeBlock(data []byte) (*block, error) {
	var s statev1.ExperimentBlock
	if err := proto.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	return &block{
		requests: s.GetRequests(), burnIn: s.GetBurnIn(), costUSD: s.GetCostUsd(), tokens: s.GetTokens(),
		rateLimited: s.GetRateLimited(), retried: s.GetRetried(), failedMS: s.GetFailedMs(),
		ttft: fromSparse(s.GetTtft()), callerTTFT: fromSparse(s.GetCallerTtft()), throughput: fromSparse(s.GetThroughput()), e2e: fromSparse(s.GetE2E()),
	}, nil
}

// decodeBlocks decodes stored blocks.
func decodeBlocks(stored map[int][]byte) (map[int]*block, error) {
	out := make(map[int]*block, len(stored))
	for i, data := range maps.All(stored) {
		b, err := decodeBlock(data)
		if err != nil {
			return nil, fmt.Errorf("block %d: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}
