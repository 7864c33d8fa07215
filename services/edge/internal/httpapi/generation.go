package httpapi

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// The JSON the edge answers with about its own routing (GET /v1/generation,
// GET /v1/activity, the x-switchboard-route-debug header) is written from
// these structs, in the dialect of the rest of the HTTP API: snake_case
// names, counts and money as JSON numbers, durations as a number of
// milliseconds, enum values as lower-case words ([switchboardv1.EnumName]).
// The field names follow OpenRouter's generation stats where it has one
// (provider_name, native_tokens_prompt, latency, generation_time,
// total_cost, provider_responses). They are mapped from the proto records
// here and nowhere else; protobuf's own JSON (string int64s, "0.7s"
// durations, camelCase, CLIENT_API_CHAT_COMPLETIONS) stays off the HTTP API.

// generationStats is one call: GET /v1/generation's data and an element of
// GET /v1/activity's.
type generationStats struct {
	ID        string `json:"id"`
	CreatedAt string `json:"created_at"`
	// TenantID is the tenant billed; APIKeyID the key used.
	TenantID string `json:"tenant_id"`
	APIKeyID string `json:"api_key_id"`
	// Model is the catalog id of the model asked for; RequestedModel the
	// name the client sent when it was another (an alias, a suffix).
	Model          string `json:"model"`
	RequestedModel string `json:"requested_model,omitempty"`
	// APIType is the HTTP API the call came in by: chat_completions,
	// messages or responses.
	APIType      string `json:"api_type"`
	ProviderName string `json:"provider_name"`
	EndpointID   string `json:"endpoint_id"`
	Streamed     bool   `json:"streamed"`
	// Status is how the call ended: ok, failed, interrupted or
	// client_cancelled; HTTPStatus the status the client got.
	Status     string `json:"status"`
	HTTPStatus int32  `json:"http_status"`
	Error      string `json:"error,omitempty"`
	// Latency is the time to the first token the client got, null when none
	// came; GenerationTime the whole call at the edge. Milliseconds.
	Latency        *int64 `json:"latency"`
	GenerationTime int64  `json:"generation_time"`
	// The tokens billed, as the serving provider counted them (or as the
	// edge estimated them, usage_reported false): the whole prompt, the
	// part of it read from cache, the parts written to cache (for the
	// default lifetime and for an hour), the completion.
	NativeTokensPrompt       int64 `json:"native_tokens_prompt"`
	NativeTokensCached       int64 `json:"native_tokens_cached"`
	NativeTokensCacheWrite   int64 `json:"native_tokens_cache_write"`
	NativeTokensCacheWrite1h int64 `json:"native_tokens_cache_write_1h"`
	NativeTokensCompletion   int64 `json:"native_tokens_completion"`
	UsageReported            bool  `json:"usage_reported"`
	// TotalCost is what the client is billed, in USD; CostCapped says it was
	// capped at the request's max_price or max_tokens.
	TotalCost  float64 `json:"total_cost"`
	CostCapped bool    `json:"cost_capped"`
	// Hedge is set when a second endpoint was started.
	Hedge *hedgeStats `json:"hedge,omitempty"`
	// ProviderResponses are every call made for the request, in order:
	// retries, fallbacks, both legs of a hedge, endpoints skipped.
	ProviderResponses []providerResponse `json:"provider_responses"`
}

// hedgeStats is how a hedged call was hedged.
type hedgeStats struct {
	// Mode is delayed or immediate.
	Mode             string `json:"mode"`
	WinnerEndpointID string `json:"winner_endpoint_id,omitempty"`
	LoserEndpointID  string `json:"loser_endpoint_id,omitempty"`
	// LoserCost is the cancelled leg's cost in USD, paid from the hedge
	// budget, not by the client.
	LoserCost float64 `json:"loser_cost"`
}

// providerResponse is one call to one endpoint.
type providerResponse struct {
	EndpointID   string `json:"endpoint_id"`
	ProviderName string `json:"provider_name"`
	// Status is the provider's HTTP status, null when none arrived (a
	// connection error, a timeout, an endpoint skipped).
	Status *int32 `json:"status"`
	// Outcome is how the call ended: ok, rate_limited, upstream_error,
	// timeout, cancelled (a hedge's loser) ...
	Outcome string `json:"outcome"`
	// Latency is the call's time to first token in milliseconds, null when
	// none came.
	Latency *int64 `json:"latency"`
	// IsHedge marks the second leg of a hedge.
	IsHedge bool `json:"is_hedge"`
	// Cost is what the provider charges for this call, in USD.
	Cost      float64 `json:"cost"`
	Error     string  `json:"error,omitempty"`
	StartedAt string  `json:"started_at,omitempty"`
}

// routeDebug is the x-switchboard-route-debug header: the decider's
// explanation of its choice.
type routeDebug struct {
	// Reason is why the chosen endpoint won (cheapest_qualifying, ...);
	// Bucket the request's prompt-size bucket (under_8k, ...).
	Reason  string `json:"reason"`
	Bucket  string `json:"bucket"`
	Summary string `json:"summary"`
	// FastestTTFT is the fastest typical time to first token measured for
	// this bucket in milliseconds, null without data.
	FastestTTFT *int64           `json:"fastest_ttft"`
	Candidates  []routeCandidate `json:"candidates"`
}

// routeCandidate is one endpoint the decider considered.
type routeCandidate struct {
	EndpointID   string `json:"endpoint_id"`
	ProviderName string `json:"provider_name"`
	// TypicalTTFT is its typical time to first token for this size, in
	// milliseconds, null without data; Samples how many measurements back it.
	TypicalTTFT *int64 `json:"typical_ttft"`
	Samples     int64  `json:"samples"`
	// Throughput is its typical output tokens per second, 0 if unknown.
	Throughput float64 `json:"throughput"`
	// Cost is this request priced on it, in USD.
	Cost                  float64 `json:"cost"`
	EstimatedCachedTokens int64   `json:"estimated_cached_tokens"`
	Qualified             bool    `json:"qualified"`
	Note                  string  `json:"note,omitempty"`
	// RoutingCost and Share are the routing-cost policy's figures: the
	// expected USD of one good answer, the part of the traffic given; 0
	// under other policies.
	RoutingCost float64 `json:"routing_cost"`
	Share       float64 `json:"share"`
}

// generationOf maps an activity record to its JSON.
func generationOf(r *switchboardv1.ActivityRecord) generationStats {
	u := r.GetUsage()
	g := generationStats{
		ID:                       r.GetId(),
		CreatedAt:                timeString(r.GetCreateTime().AsTime(), r.GetCreateTime() != nil),
		TenantID:                 r.GetTenantId(),
		APIKeyID:                 r.GetApiKeyId(),
		Model:                    r.GetModel(),
		RequestedModel:           r.GetRequestedModel(),
		APIType:                  switchboardv1.EnumName(r.GetClientApi()),
		ProviderName:             r.GetProvider(),
		EndpointID:               r.GetEndpointId(),
		Streamed:                 r.GetStream(),
		Status:                   switchboardv1.EnumName(r.GetStatus()),
		HTTPStatus:               r.GetHttpStatus(),
		Error:                    r.GetError(),
		Latency:                  millis(r.GetTtft()),
		GenerationTime:           r.GetDuration().AsDuration().Milliseconds(),
		NativeTokensPrompt:       u.GetInputTokens(),
		NativeTokensCached:       u.GetCachedInputTokens(),
		NativeTokensCacheWrite:   u.GetCacheWriteTokens(),
		NativeTokensCacheWrite1h: u.GetCacheWrite_1HTokens(),
		NativeTokensCompletion:   u.GetOutputTokens(),
		UsageReported:            u.GetReported(),
		TotalCost:                r.GetCostUsd(),
		CostCapped:               r.GetCostCapped(),
		ProviderResponses:        make([]providerResponse, 0, len(r.GetAttempts())),
	}
	if h := r.GetHedge(); h.GetUsed() {
		g.Hedge = &hedgeStats{
			Mode:             switchboardv1.EnumName(h.GetMode()),
			WinnerEndpointID: h.GetWinnerEndpointId(),
			LoserEndpointID:  h.GetLoserEndpointId(),
			LoserCost:        h.GetLoserCostUsd(),
		}
	}
	for _, a := range r.GetAttempts() {
		p := providerResponse{
			EndpointID:   a.GetEndpointId(),
			ProviderName: a.GetProvider(),
			Outcome:      switchboardv1.EnumName(a.GetOutcome()),
			Latency:      millis(a.GetTtft()),
			IsHedge:      a.GetHedge(),
			Cost:         a.GetCostUsd(),
			Error:        a.GetError(),
			StartedAt:    timeString(a.GetStartTime().AsTime(), a.GetStartTime() != nil),
		}
		if s := a.GetHttpStatus(); s != 0 {
			p.Status = &s
		}
		g.ProviderResponses = append(g.ProviderResponses, p)
	}
	return g
}

// routeDebugOf maps a Decide answer's explanation to its JSON.
func routeDebugOf(d *switchboardv1.Decision) routeDebug {
	out := routeDebug{
		Reason:      switchboardv1.EnumName(d.GetReason()),
		Bucket:      switchboardv1.EnumName(d.GetBucket()),
		Summary:     d.GetSummary(),
		FastestTTFT: millis(d.GetFastestTtft()),
		Candidates:  make([]routeCandidate, 0, len(d.GetCandidates())),
	}
	for _, c := range d.GetCandidates() {
		out.Candidates = append(out.Candidates, routeCandidate{
			EndpointID:            c.GetEndpointId(),
			ProviderName:          c.GetProvider(),
			TypicalTTFT:           millis(c.GetTypicalTtft()),
			Samples:               c.GetSamples(),
			Throughput:            c.GetThroughput(),
			Cost:                  c.GetCostUsd(),
			EstimatedCachedTokens: c.GetEstimatedCachedTokens(),
			Qualified:             c.GetQualified(),
			Note:                  c.GetNote(),
			RoutingCost:           c.GetRoutingCostUsd(),
			Share:                 c.GetShare(),
		})
	}
	return out
}

// millis is an optional duration in whole milliseconds, nil when unset.
func millis(d *durationpb.Duration) *int64 {
	if d == nil {
		return nil
	}
	ms := d.AsDuration().Milliseconds()
	return &ms
}

// timeString is t in RFC 3339 with its fraction, "" when unset.
func timeString(t time.Time, set bool) string {
	if !set {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
