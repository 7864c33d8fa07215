package dashboard

import (
	"cmp"
	"context"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
	"github.com/switchboard-ai/switchboard/services/decider/internal/gate"
)

// Source reads the operator's figures from the decider's components.
type Source interface {
	// TTFT is an endpoint's typical first-token time in a size bucket
	// (stats.Store.TTFT).
	TTFT(endpointID string, b tokens.Bucket) (typical time.Duration, samples int, ok bool)
	// Calls is the decayed count of attempts reported on an endpoint
	// (outcomes.Figures.Calls): its traffic, lately.
	Calls(endpointID string) float64
	// CooledUntil is when an endpoint's cool-down ends, false when it has
	// none (cooldown.Tracker.Until).
	CooledUntil(endpointID string, now time.Time) (time.Time, bool)
	// HedgeBudget is today's hedge spend and budget (hedge.Budget.Status).
	HedgeBudget() (spent, daily float64, granted, refused int64)
	// BucketLevels and QueueDepths are the rate-limit broker's (broker.Broker).
	BucketLevels(scopes ...broker.Scope) []broker.BucketLevel
	QueueDepths() []broker.QueueDepth
}

// bucketNames are the size buckets' labels, by tokens.Bucket.
var bucketNames = func() []string {
	out := make([]string, tokens.NumBuckets)
	for b := range tokens.NumBuckets {
		out[b] = tokens.Bucket(b).String()
	}
	return out
}()

// bucketPrompt is the prompt size a bucket's choice is explained for:
// inside the bucket, a typical request of its size.
var bucketPrompt = [tokens.NumBuckets]int64{2 * tokens.K, 16 * tokens.K, 64 * tokens.K, 160 * tokens.K}

type endpointRow struct {
	ID       string     `json:"id"`
	Provider string     `json:"provider"`
	Input    *float64   `json:"price_input"`
	Cached   *float64   `json:"price_cached_input"`
	Output   *float64   `json:"price_output"`
	Share    float64    `json:"traffic_share"`
	Calls    float64    `json:"recent_calls"`
	TTFTms   []*float64 `json:"ttft_ms"`
	Samples  []int      `json:"samples"`
	Cooled   *time.Time `json:"cooled_until"`
}

type modelRow struct {
	ID        string        `json:"id"`
	Endpoints []endpointRow `json:"endpoints"`
}

// overview is every model's endpoints now: price (USD per million
// tokens), traffic share, first-token time per bucket, cool-down.
func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request, _ session) {
	_, v := d.o.Catalog.Pin(r.Context())
	now := d.o.Now()
	var models []modelRow
	for _, m := range v.Catalog.Models {
		row := modelRow{ID: m.ID}
		var total float64
		for _, e := range m.Endpoints {
			er := d.endpointRow(m, e, now)
			total += er.Calls
			row.Endpoints = append(row.Endpoints, er)
		}
		for i := range row.Endpoints {
			if total > 0 {
				row.Endpoints[i].Share = row.Endpoints[i].Calls / total
			}
		}
		models = append(models, row)
	}
	slices.SortFunc(models, func(a, b modelRow) int { return cmp.Compare(a.ID, b.ID) })
	tenants := make([]string, 0, len(v.Catalog.Tenants))
	for _, t := range v.Catalog.Tenants {
		tenants = append(tenants, t.ID)
	}
	slices.Sort(tenants)
	writeJSON(w, map[string]any{"models": models, "buckets": bucketNames, "tenants": tenants, "revision": v.Revision})
}

func (d *Dashboard) endpointRow(m catalog.Model, e catalog.Endpoint, now time.Time) endpointRow {
	id := e.ID(m.ID)
	er := endpointRow{ID: id, Provider: e.Provider, Input: e.Price.Input, Cached: e.Price.CachedInput, Output: e.Price.Output,
		Calls: d.o.Source.Calls(id)}
	for b := range tokens.NumBuckets {
		t, n, ok := d.o.Source.TTFT(id, tokens.Bucket(b))
		var ms *float64
		if ok {
			f := float64(t) / float64(time.Millisecond)
			ms = &f
		}
		er.TTFTms = append(er.TTFTms, ms)
		er.Samples = append(er.Samples, n)
	}
	if u, ok := d.o.Source.CooledUntil(id, now); ok {
		u = u.UTC()
		er.Cooled = &u
	}
	return er
}

// model is the catalog's model the query's ?model= names (an id or an
// alias), with the request's context pinning the views it was found in;
// else it answers 404 and false.
func (d *Dashboard) model(w http.ResponseWriter, r *http.Request) (context.Context, *gate.Views, catalog.Model, bool) {
	ctx, v := d.o.Catalog.Pin(r.Context())
	id := r.URL.Query().Get("model")
	if canon, ok := v.Routing.Resolve(id); ok {
		id = canon
	}
	for _, m := range v.Catalog.Models {
		if m.ID == id {
			return ctx, v, m, true
		}
	}
	writeError(w, http.StatusNotFound, "not_found", "no such model in the catalog")
	return nil, nil, catalog.Model{}, false
}

// ttft is one model's first-token times over the history and now: the sample
// times (Unix seconds) and, per size bucket, one series per endpoint (ms,
// null where there was no figure), as uPlot draws them.
func (d *Dashboard) ttft(w http.ResponseWriter, r *http.Request, _ session) {
	_, v, m, ok := d.model(w, r)
	if !ok {
		return
	}
	// The history, and the figures of now as its last point.
	samples := append(d.hist.samples(), d.sampleOf(v.Catalog, d.o.Now()))
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
		for _, e := range m.Endpoints {
			id := e.ID(m.ID)
			vals := make([]*float64, len(samples))
			for i, s := range samples {
				if row, ok := s.ttft[id]; ok && !math.IsNaN(row[b]) {
					f := row[b]
					vals[i] = &f
				}
			}
			buckets[b] = append(buckets[b], series{Endpoint: id, Values: vals})
		}
	}
	writeJSON(w, map[string]any{"model": m.ID, "times": times, "buckets": bucketNames, "series": buckets,
		"every_seconds": d.o.SampleEvery.Seconds()})
}

// choices explains, per size bucket, where the decider would send a
// request of the model now (OperatorService.Explain, a dry run) for a
// tenant (the query's, else the catalog's first), with every candidate.
func (d *Dashboard) choices(w http.ResponseWriter, r *http.Request, s session) {
	ctx, v, m, ok := d.model(w, r)
	if !ok {
		return
	}
	tenant := r.URL.Query().Get("tenant")
	if tenant == "" && len(v.Catalog.Tenants) > 0 {
		ids := make([]string, 0, len(v.Catalog.Tenants))
		for _, t := range v.Catalog.Tenants {
			ids = append(ids, t.ID)
		}
		tenant = slices.Min(ids)
	}
	ctx, err := d.callContext(ctx, v, s)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated", err.Error())
		return
	}
	type candidate struct {
		Endpoint  string   `json:"endpoint"`
		Provider  string   `json:"provider"`
		TTFTms    *float64 `json:"ttft_ms"`
		Samples   int64    `json:"samples"`
		CostUSD   float64  `json:"cost_usd"`
		Qualified bool     `json:"qualified"`
		Note      string   `json:"note"`
	}
	type choice struct {
		Bucket     string      `json:"bucket"`
		Prompt     int64       `json:"prompt_tokens"`
		Endpoint   string      `json:"endpoint"`
		Reason     string      `json:"reason"`
		Summary    string      `json:"summary"`
		Fallbacks  []string    `json:"fallbacks"`
		Hedge      string      `json:"hedge"`
		Error      string      `json:"error,omitempty"`
		Candidates []candidate `json:"candidates"`
	}
	var out []choice
	for b := range tokens.NumBuckets {
		c := choice{Bucket: bucketNames[b], Prompt: bucketPrompt[b]}
		resp, err := d.o.RPC.Explain(ctx, &switchboardv1.ExplainRequest{
			Identity: &switchboardv1.Identity{TenantId: tenant}, Model: m.ID, Stream: true,
			Tokens: &switchboardv1.TokenEstimate{InputTokens: bucketPrompt[b], MaxOutputTokens: 1024},
		})
		if err != nil {
			c.Error = statusMessage(err)
			out = append(out, c)
			continue
		}
		c.Endpoint = resp.GetEndpoint().GetId()
		c.Reason = switchboardv1.EnumName(resp.GetDecision().GetReason())
		c.Summary = resp.GetDecision().GetSummary()
		c.Hedge = switchboardv1.EnumName(resp.GetHedge().GetMode())
		for _, f := range resp.GetFallbacks() {
			c.Fallbacks = append(c.Fallbacks, f.GetId())
		}
		for _, k := range resp.GetDecision().GetCandidates() {
			cd := candidate{Endpoint: k.GetEndpointId(), Provider: k.GetProvider(), Samples: k.GetSamples(), CostUSD: k.GetCostUsd(),
				Qualified: k.GetQualified(), Note: k.GetNote()}
			if t := k.GetTypicalTtft(); t != nil {
				f := float64(t.AsDuration()) / float64(time.Millisecond)
				cd.TTFTms = &f
			}
			c.Candidates = append(c.Candidates, cd)
		}
		out = append(out, c)
	}
	writeJSON(w, map[string]any{"model": m.ID, "tenant": tenant, "choices": out})
}

// limits is the hedge budget, the broker's buckets and its queues.
func (d *Dashboard) limits(w http.ResponseWriter, _ *http.Request, _ session) {
	spent, daily, granted, refused := d.o.Source.HedgeBudget()
	type bucketRow struct {
		Scope     string  `json:"scope"`
		Key       string  `json:"key"`
		Unit      string  `json:"unit"`
		Window    string  `json:"window"`
		Source    string  `json:"source"`
		Limit     float64 `json:"limit"`
		Available float64 `json:"available"`
	}
	var buckets []bucketRow
	for _, l := range d.o.Source.BucketLevels() {
		buckets = append(buckets, bucketRow{Scope: l.Scope.String(), Key: l.Key, Unit: l.Unit.String(), Window: l.Window.String(),
			Source: l.Source.String(), Limit: finite(l.Limit), Available: finite(l.Available)})
	}
	slices.SortFunc(buckets, func(a, b bucketRow) int {
		return cmp.Or(cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Unit, b.Unit), cmp.Compare(a.Window, b.Window))
	})
	type queueRow struct {
		Class  string `json:"class"`
		Tenant string `json:"tenant"`
		Depth  int    `json:"depth"`
	}
	var queues []queueRow
	for _, q := range d.o.Source.QueueDepths() {
		queues = append(queues, queueRow{Class: switchboardv1.EnumName(switchboardv1.WorkloadClass(q.Class)), Tenant: q.Tenant, Depth: q.Depth})
	}
	writeJSON(w, map[string]any{
		"hedge":   map[string]any{"spent_usd": spent, "daily_usd": daily, "granted": granted, "refused": refused},
		"buckets": buckets, "queues": queues,
	})
}

// finite keeps JSON encodable: an unlimited bucket's infinity is sent as -1.
func finite(f float64) float64 {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return -1
	}
	return f
}
