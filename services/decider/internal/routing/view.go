package routing

import (
	"errors"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// ChoiceTokens are the prompt sizes ModelStats asks a choice for, one
// inside each size bucket, smallest bucket first.
var ChoiceTokens = [tokens.NumBuckets]int64{2 * tokens.K, 16 * tokens.K, 64 * tokens.K, 160 * tokens.K}

// ModelStats is what routing knows of each endpoint of the model idx names
// modelID (an id or an alias), as this replica holds it now, and the
// endpoint a request for id's tenant would be routed to for a prompt of
// each size bucket (a dry run: nothing is recorded or explored). False
// for a model idx does not have.
func (r *Router) ModelStats(idx *Index, modelID string, id *switchboardv1.Identity) (*switchboardv1.ModelStats, bool) {
	canonical, ok := idx.Resolve(modelID)
	if !ok {
		return nil, false
	}
	m := idx.models[canonical]
	now := r.o.Now()
	out := &switchboardv1.ModelStats{Model: m.id}
	if typical, n, ok := m.st.TypicalOutput(); ok {
		out.TypicalOutputTokens = proto.Int64(typical)
		out.OutputSamples = int64(n)
	}
	var load float64
	for _, e := range m.endpoints {
		es := r.endpointStats(e, now)
		load += es.GetRequestsPerMinute()
		out.Endpoints = append(out.Endpoints, es)
	}
	for _, es := range out.Endpoints {
		if load > 0 {
			es.TrafficShare = es.GetRequestsPerMinute() / load
		}
	}
	for b, n := range ChoiceTokens {
		c := &switchboardv1.BucketChoice{Bucket: switchboardv1.SizeBucket(b + 1), PromptTokens: n}
		resp, err := r.DecideIn(idx, &switchboardv1.DecideRequest{Model: m.id, Tokens: &switchboardv1.TokenEstimate{InputTokens: n}, DryRun: true}, id)
		var rerr *Error
		switch {
		case errors.As(err, &rerr):
			c.Unavailable = rerr.Msg
		case err != nil:
			c.Unavailable = err.Error()
		default:
			c.EndpointId = resp.GetEndpoint().GetId()
			c.Reason = resp.GetDecision().GetReason()
			c.Summary = resp.GetDecision().GetSummary()
		}
		out.Choices = append(out.Choices, c)
	}
	return out, true
}

// endpointStats is one endpoint's figures at now.
func (r *Router) endpointStats(e *endpoint, now time.Time) *switchboardv1.EndpointStats {
	es := &switchboardv1.EndpointStats{EndpointId: e.id, Provider: e.provider, Price: e.proto.GetPrice(), ContextLength: e.contextLength}
	for b := range tokens.Bucket(tokens.NumBuckets) {
		bt := &switchboardv1.BucketTtft{Bucket: switchboardv1.SizeBucket(int(b) + 1)}
		if typical, n, ok := e.st.TTFT(b); ok {
			bt.Typical, bt.Samples = durationpb.New(typical), int64(n)
		}
		es.Ttft = append(es.Ttft, bt)
	}
	if tps, n, ok := e.st.Throughput(); ok {
		es.ThroughputTokensPerSecond, es.ThroughputSamples = proto.Float64(tps), int64(n)
	}
	if rate, n, ok := e.st.CacheHitRate(); ok {
		es.CacheHitRate, es.CacheSamples = proto.Float64(rate), int64(n)
	}
	f := e.oc.Read(now)
	es.RequestsPerMinute = f.Load
	if f.Calls > 0 {
		es.RateLimitedRate, es.ErrorRate = f.RateLimited/f.Calls, f.Failed/f.Calls
	}
	if f.Cap > 0 {
		es.LearnedCapPerMinute = proto.Float64(f.Cap)
	}
	if r.o.Cooldown != nil {
		if until, cooling := r.o.Cooldown.Until(e.id, now); cooling {
			es.CooldownUntil = timestamppb.New(until)
		}
	}
	return es
}

// ModelIDs are the ids of idx's models, in order.
func (idx *Index) ModelIDs() []string {
	ids := make([]string, 0, len(idx.list))
	for _, m := range idx.list {
		ids = append(ids, m.GetId())
	}
	return ids
}
