package dashboard

import (
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// bucketNames are the size buckets' labels, by tokens.Bucket.
var bucketNames = func() []string {
	out := make([]string, tokens.NumBuckets)
	for b := range tokens.NumBuckets {
		out[b] = tokens.Bucket(b).String()
	}
	return out
}()

// bucketIndex is a SizeBucket's index in bucketNames, false for none.
func bucketIndex(b switchboardv1.SizeBucket) (int, bool) {
	i := int(b) - int(switchboardv1.SizeBucket_SIZE_BUCKET_UNDER_8K)
	return i, i >= 0 && i < tokens.NumBuckets
}

// ms is a duration in milliseconds; nil for none.
func ms(d interface{ AsDuration() time.Duration }, ok bool) *float64 {
	if !ok {
		return nil
	}
	f := float64(d.AsDuration()) / float64(time.Millisecond)
	return &f
}

// lower is an enum's name without its prefix, in lower case.
func lower(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

type endpointRow struct {
	ID       string     `json:"id"`
	Provider string     `json:"provider"`
	Input    float64    `json:"price_input"`
	Cached   float64    `json:"price_cached_input"`
	Output   float64    `json:"price_output"`
	Share    float64    `json:"traffic_share"`
	PerMin   float64    `json:"requests_per_minute"`
	TTFTms   []*float64 `json:"ttft_ms"`
	Samples  []int64    `json:"samples"`
	Cooled   *time.Time `json:"cooled_until"`
	Limited  float64    `json:"rate_limited_rate"`
	Errors   float64    `json:"error_rate"`
}

type choiceRow struct {
	Bucket      string `json:"bucket"`
	Prompt      int64  `json:"prompt_tokens"`
	Endpoint    string `json:"endpoint"`
	Reason      string `json:"reason"`
	Summary     string `json:"summary"`
	Unavailable string `json:"unavailable,omitempty"`
}

type modelRow struct {
	ID        string        `json:"id"`
	Endpoints []endpointRow `json:"endpoints"`
	Choices   []choiceRow   `json:"choices"`
}

// overview is every model's endpoints now (OperatorService.GetEndpointStats):
// price (USD per million tokens), traffic share, first-token time per
// bucket, cool-down; and the choice per bucket for ?tenant= (the catalog's
// first tenant when none is named).
func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request, s session) {
	ctx, v := d.o.Catalog.Pin(r.Context())
	tenants := make([]string, 0, len(v.Catalog.Tenants))
	for _, t := range v.Catalog.Tenants {
		tenants = append(tenants, t.ID)
	}
	slices.Sort(tenants)
	tenant := r.URL.Query().Get("tenant")
	if tenant == "" && len(tenants) > 0 {
		tenant = tenants[0]
	}
	ctx, err := d.callContext(ctx, v, s)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated", err.Error())
		return
	}
	resp, err := d.o.RPC.GetEndpointStats(ctx, &switchboardv1.GetEndpointStatsRequest{TenantId: tenant})
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", statusMessage(err))
		return
	}
	models := []modelRow{}
	for _, m := range resp.GetModels() {
		row := modelRow{ID: m.GetModel()}
		for _, e := range m.GetEndpoints() {
			er := endpointRow{ID: e.GetEndpointId(), Provider: e.GetProvider(), Input: e.GetPrice().GetInput(),
				Cached: e.GetPrice().GetCachedInput(), Output: e.GetPrice().GetOutput(), Share: e.GetTrafficShare(),
				PerMin: e.GetRequestsPerMinute(), Limited: e.GetRateLimitedRate(), Errors: e.GetErrorRate(),
				TTFTms: make([]*float64, tokens.NumBuckets), Samples: make([]int64, tokens.NumBuckets)}
			for _, t := range e.GetTtft() {
				if i, ok := bucketIndex(t.GetBucket()); ok {
					er.TTFTms[i] = ms(t.GetTypical(), t.GetTypical() != nil)
					er.Samples[i] = t.GetSamples()
				}
			}
			if c := e.GetCooldownUntil(); c != nil {
				u := c.AsTime().UTC()
				er.Cooled = &u
			}
			row.Endpoints = append(row.Endpoints, er)
		}
		for _, c := range m.GetChoices() {
			cr := choiceRow{Prompt: c.GetPromptTokens(), Endpoint: c.GetEndpointId(), Summary: c.GetSummary(), Unavailable: c.GetUnavailable(),
				Reason: lower(switchboardv1.EnumName(c.GetReason()), "ROUTE_REASON_")}
			if i, ok := bucketIndex(c.GetBucket()); ok {
				cr.Bucket = bucketNames[i]
			}
			row.Choices = append(row.Choices, cr)
		}
		models = append(models, row)
	}
	writeJSON(w, map[string]any{"models": models, "buckets": bucketNames, "tenants": tenants, "tenant": tenant,
		"revision": v.Revision, "replica": resp.GetReplica()})
}

// ttft is one model's first-token times over the history and now: the
// sample times (Unix seconds) and, per size bucket, one series per
// endpoint (ms, null where there was no figure), as uPlot draws them.
func (d *Dashboard) ttft(w http.ResponseWriter, r *http.Request, _ session) {
	now, err := d.sample(r.Context(), d.o.Now())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", statusMessage(err))
		return
	}
	id := r.URL.Query().Get("model")
	_, v := d.o.Catalog.Pin(r.Context())
	if canon, ok := v.Routing.Resolve(id); ok {
		id = canon
	}
	endpoints, ok := now.models[id]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "no such model in the catalog")
		return
	}
	// The history, and the figures of now as its last point.
	samples := append(d.hist.samples(), now)
	times := make([]int64, len(samples))
	for i, s := range samples {
		times[i] = s.at.Unix()
	}
	type series struct {
		Endpoint string     `json:"endpoint"`
		Values   []*float64 `json:"values"`
	}
	buckets := make([][]series, tokens.NumBuckets)
	for b := range tokens.NumBuckets {
		for _, e := range endpoints {
			vals := make([]*float64, len(samples))
			for i, s := range samples {
				if row, ok := s.ttft[e]; ok && row[b] != nil {
					vals[i] = row[b]
				}
			}
			buckets[b] = append(buckets[b], series{Endpoint: e, Values: vals})
		}
	}
	writeJSON(w, map[string]any{"model": id, "times": times, "buckets": bucketNames, "series": buckets,
		"every_seconds": d.o.SampleEvery.Seconds()})
}

// choices explains, per size bucket, where the decider would send a
// request of ?model= now for ?tenant= (OperatorService.Explain, a dry run),
// with every candidate's figures.
func (d *Dashboard) choices(w http.ResponseWriter, r *http.Request, s session) {
	ctx, v := d.o.Catalog.Pin(r.Context())
	model, tenant := r.URL.Query().Get("model"), r.URL.Query().Get("tenant")
	ctx, err := d.callContext(ctx, v, s)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated", err.Error())
		return
	}
	type candidate struct {
		Endpoint  string   `json:"endpoint"`
		TTFTms    *float64 `json:"ttft_ms"`
		Samples   int64    `json:"samples"`
		CostUSD   float64  `json:"cost_usd"`
		Qualified bool     `json:"qualified"`
		Note      string   `json:"note"`
	}
	type explained struct {
		Bucket     string      `json:"bucket"`
		Prompt     int64       `json:"prompt_tokens"`
		Endpoint   string      `json:"endpoint"`
		Fallbacks  []string    `json:"fallbacks"`
		Hedge      string      `json:"hedge"`
		Error      string      `json:"error,omitempty"`
		Candidates []candidate `json:"candidates"`
	}
	out := []explained{}
	for b := range tokens.NumBuckets {
		c := explained{Bucket: bucketNames[b], Prompt: bucketPrompt[b]}
		resp, err := d.o.RPC.Explain(ctx, &switchboardv1.ExplainRequest{
			Identity: &switchboardv1.Identity{TenantId: tenant}, Model: model, Stream: true,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: bucketPrompt[b], MaxOutputTokens: 1024},
		})
		if err != nil {
			c.Error = statusMessage(err)
			out = append(out, c)
			continue
		}
		c.Endpoint = resp.GetEndpoint().GetId()
		c.Hedge = lower(switchboardv1.EnumName(resp.GetHedge().GetMode()), "HEDGE_MODE_")
		for _, f := range resp.GetFallbacks() {
			c.Fallbacks = append(c.Fallbacks, f.GetId())
		}
		for _, k := range resp.GetDecision().GetCandidates() {
			c.Candidates = append(c.Candidates, candidate{Endpoint: k.GetEndpointId(), Samples: k.GetSamples(), CostUSD: k.GetCostUsd(),
				Qualified: k.GetQualified(), Note: k.GetNote(), TTFTms: ms(k.GetTypicalTtft(), k.GetTypicalTtft() != nil)})
		}
		out = append(out, c)
	}
	writeJSON(w, map[string]any{"model": model, "tenant": tenant, "choices": out})
}

// bucketPrompt is the prompt size a bucket's choice is explained for: a
// typical request inside the bucket.
var bucketPrompt = [tokens.NumBuckets]int64{2 * tokens.K, 16 * tokens.K, 64 * tokens.K, 160 * tokens.K}

// limits is the hedge budget, the broker's buckets and its queues, as the
// broker's owner holds them (OperatorService.GetBroker).
func (d *Dashboard) limits(w http.ResponseWriter, r *http.Request, s session) {
	ctx, v := d.o.Catalog.Pin(r.Context())
	ctx, err := d.callContext(ctx, v, s)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated", err.Error())
		return
	}
	resp, err := d.o.RPC.GetBroker(ctx, &switchboardv1.GetBrokerRequest{MaxBuckets: 500})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", statusMessage(err))
		return
	}
	type bucketRow struct {
		Scope     string  `json:"scope"`
		Key       string  `json:"key"`
		Unit      string  `json:"unit"`
		Window    string  `json:"window"`
		Learned   bool    `json:"learned"`
		Limit     float64 `json:"limit"`
		Available float64 `json:"available"`
	}
	buckets := []bucketRow{}
	for _, b := range resp.GetBuckets() {
		buckets = append(buckets, bucketRow{Scope: b.GetScope(), Key: b.GetKey(), Unit: b.GetUnit(), Window: b.GetWindow(),
			Learned: b.GetLearned(), Limit: finite(b.GetLimit()), Available: finite(b.GetAvailable())})
	}
	type queueRow struct {
		Class  string `json:"class"`
		Tenant string `json:"tenant"`
		Depth  int64  `json:"depth"`
	}
	queues := []queueRow{}
	for _, q := range resp.GetQueues() {
		queues = append(queues, queueRow{Class: lower(switchboardv1.EnumName(q.GetWorkloadClass()), "WORKLOAD_CLASS_"),
			Tenant: q.GetTenantId(), Depth: q.GetDepth()})
	}
	h := resp.GetHedgeBudget()
	writeJSON(w, map[string]any{
		"owner": resp.GetOwner(),
		"hedge": map[string]any{"spent_usd": h.GetSpentUsd(), "daily_usd": h.GetDailyUsd(), "remaining_usd": h.GetRemainingUsd(),
			"granted": h.GetGranted(), "refused": h.GetRefused()},
		"buckets": buckets, "total_buckets": resp.GetTotalBuckets(), "open_reservations": resp.GetOpenReservations(),
		"queues": queues, "queued_total": resp.GetQueuedTotal(), "timed_out_in_queue": resp.GetTimedOutInQueue(),
	})
}

// finite keeps JSON encodable: an unlimited bucket's infinity is sent as -1.
func finite(f float64) float64 {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return -1
	}
	return f
}
