// Package observe turns the edges' call reports into what routing learns
// from: TTFT per size bucket (from streams and probes only), throughput
// (from streams, probes included), cache-hit rate, typical output,
// which endpoint holds which prompt in cache (and which answered a named
// conversation's turn), refusals that bench an endpoint, and each
// endpoint's outcomes (price charged, 429s, failures, quality) for the
// routing-cost policy. It also accounts what synthetic probes cost the operator (the
// billing policy, pkg/billing, says probes are never billed to a tenant). It
// never waits on the broker: reservations are reconciled by the report hub's
// workers.
//
// Only edges send call reports (the Report stream is theirs alone), and each
// edge is one reporter to the statistics: its samples hold a bounded share
// of any figure (stats.MaxShare), so no one edge sets an endpoint's speed
// alone. A report whose timing no provider could produce (see the bounds
// below) adds no speed sample and is counted (Implausible); a Retry-After
// counts for provheaders.MaxRetryAfter at most.
package observe

import (
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/billing"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/affinity"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker/provheaders"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/session"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
)

// Bounds of a plausible call's timing. A report outside them is not a
// measurement but a bug or a lie: its TTFT and throughput are not recorded.
const (
	// MinTTFT is the fastest first token believed after a prompt of at
	// least FloorPromptTokens uncached tokens: a provider takes longer than
	// that to read so much (a cached or a short prompt may be faster).
	MinTTFT = 20 * time.Millisecond
	// FloorPromptTokens is the uncached prompt size from which MinTTFT holds.
	FloorPromptTokens = 1000
	// MaxThroughput is the fastest generation believed, output tokens per
	// second after the first token.
	MaxThroughput = 5000.0
	// MaxCallDuration is the longest call (and first token) believed.
	MaxCallDuration = time.Hour
)

// Catalog resolves an endpoint id to its model and price.
type Catalog interface {
	Endpoint(id string) (modelID string, rates catalog.Rates, ok bool)
}

// Options wire an Observer.
type Options struct {
	// Catalog returns the catalog applied, read once per batch: one
	// batch's reports are resolved by one catalog, not by whichever is
	// applied as each report is taken. (Required)
	Catalog  func() Catalog
	Stats    *stats.Store    // (Required)
	Affinity *affinity.Table // (Required)
	// Sessions learns which endpoint answered a named conversation's turn. (Optional)
	Sessions *session.Table
	Cooldown *cooldown.Tracker // (Required)
	// Outcomes tracks each endpoint's outcomes for the routing-cost
	// policy. (Optional) Without it they are not tracked.
	Outcomes *outcomes.Tracker
	// Broadcast tells every edge about a new cool-down. (Optional)
	Broadcast func(*switchboardv1.ReportResponse)
	// Logger logs cool-downs. (Required)
	Logger *slog.Logger
	// Now is the clock. (Optional) Defaults to time.Now.
	Now func() time.Time
}

// Observer ingests call reports. It is safe for concurrent use.
type Observer struct {
	o Options

	mu          sync.Mutex
	probeCost   map[string]float64 // by endpoint, USD
	probes      int64
	unknown     int64
	implausible int64
}

// New returns an observer.
func New(o Options) *Observer {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Observer{o: o, probeCost: map[string]float64{}}
}

// Ingest takes one batch from one edge. It implements report.Sink. The
// edge's id (its hello's edge_id) names it as one reporter to the
// statistics.
func (ob *Observer) Ingest(edge *switchboardv1.EdgeHello, reports []*switchboardv1.CallReport) {
	ob.ingest(edge, reports, true)
}

// IngestShared takes one batch another decider replica took from one of
// its edges (share), and learns from it exactly as Ingest would: the same
// statistics under the same edge, outcomes, affinity, conversations and
// cool-downs (told to this replica's edges). What the replica that took
// the batch counts of it (Unknown, Implausible, ProbeCost) it alone counts,
// so the replicas' figures add up.
func (ob *Observer) IngestShared(edge *switchboardv1.EdgeHello, reports []*switchboardv1.CallReport) {
	ob.ingest(edge, reports, false)
}

// ingest learns from one batch; own says this replica took it from its
// edge, and counts it.
func (ob *Observer) ingest(edge *switchboardv1.EdgeHello, reports []*switchboardv1.CallReport, own bool) {
	from := ob.o.Stats.From(edge.GetEdgeId()).In(edge.GetRegion())
	cat := ob.o.Catalog()
	for _, r := range reports {
		ob.one(cat, from, r, own)
	}
}

func (ob *Observer) one(cat Catalog, from stats.Reporter, r *switchboardv1.CallReport, own bool) {
	modelID, rates, ok := cat.Endpoint(r.GetEndpointId())
	if !ok {
		// Only the catalog's endpoints get series, so a confused or hostile
		// edge cannot grow the decider's memory.
		if own {
			ob.mu.Lock()
			ob.unknown++
			ob.mu.Unlock()
		}
		return
	}
	at := ob.o.Now()
	if st := r.GetStartTime(); st != nil && st.IsValid() {
		at = st.AsTime()
	}
	ep := r.GetEndpointId()
	u := r.GetUsage()
	switch r.GetOutcome() {
	case switchboardv1.Outcome_OUTCOME_OK:
		if r.GetTtft() != nil && (r.GetStream() || r.GetProbeId() != "") && !plausible(r) {
			ob.countImplausible(own)
		} else if r.GetTtft() != nil && (r.GetStream() || r.GetProbeId() != "") {
			// A first token is observed only on a stream, or on a probe:
			// probes ask for a handful of tokens, so even a non-streamed
			// one (from an edge that does not stream them) answers about
			// when its first token came. A client's non-streamed answer
			// arrives whole, so its ttft is when the last token came; it
			// still counts in the endpoint's outcomes below.
			ttft := r.GetTtft().AsDuration()
			from.ObserveTTFT(ep, tokens.BucketOf(r.GetPromptTokens()), ttft, at)
			if d := r.GetDuration().AsDuration(); r.GetStream() && u.GetOutputTokens() > 1 && d > ttft {
				// Tokens after the first over the time after the first: the
				// generation speed, not polluted by the prompt's read time.
				// Only streams: a non-streamed answer arrives all at once.
				// Beyond MaxThroughput it is not believed (nor is it a
				// measure when the rest came in one burst).
				if tps := float64(u.GetOutputTokens()-1) / (d - ttft).Seconds(); tps > MaxThroughput {
					ob.countImplausible(own)
				} else {
					from.ObserveThroughput(ep, tps, at)
				}
			}
		}
		if r.GetProbeId() == "" && u.GetReported() {
			// Probes are built to miss the cache; they would skew the rate.
			from.ObserveCache(ep, u.GetInputTokens(), u.GetCachedInputTokens(), at)
			from.ObserveOutput(modelID, u.GetOutputTokens(), at)
		}
		if h := r.GetPromptHash(); (h != 0 || len(r.GetPrefixes()) > 0) && r.GetProbeId() == "" {
			n := u.GetInputTokens()
			if n == 0 {
				n = r.GetPromptTokens()
			}
			// The prompt and each of its prefixes at its cache boundaries
			// (the tool block, the system prompt, each message boundary):
			// the endpoint holds them all now, so a new question after the
			// same system prompt is priced with this endpoint's cache.
			ob.o.Affinity.Served(ep, h, n, r.GetPrefixes(), ob.o.Now())
		}
		if ob.o.Sessions != nil && r.GetProbeId() == "" {
			// The endpoint that answered holds the conversation's prompt
			// now, whichever the decision put first.
			ob.o.Sessions.Served(r.GetRequestId(), ep, ob.o.Now())
		}
	case switchboardv1.Outcome_OUTCOME_RATE_LIMITED, switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, switchboardv1.Outcome_OUTCOME_CONNECT_ERROR:
		if r.GetRequestFailure() {
			// The same request failed the same way elsewhere too: its own
			// failure, which benching this endpoint would charge to every
			// other request.
			break
		}
		// A refusal benches the endpoint.
		if until, started := ob.o.Cooldown.RefusedFor(ep, ob.o.Now(), r.GetRetryAfter().AsDuration()); started {
			ob.o.Logger.Warn("endpoint cooling down", "endpoint", ep, "until", until, "outcome", r.GetOutcome().String(), "http_status", r.GetHttpStatus())
			if ob.o.Broadcast != nil {
				ob.o.Broadcast(&switchboardv1.ReportResponse{Command: &switchboardv1.ReportResponse_Cooldown{Cooldown: &switchboardv1.CooldownCommand{
					EndpointId: ep, Until: timestamppb.New(until), Reason: r.GetOutcome().String(),
				}}})
			}
		}
	}
	if ob.o.Outcomes != nil {
		ob.o.Outcomes.Observe(ep, outcomeOf(r), rates)
	}
	if r.GetProbeId() != "" && u != nil && own {
		// Probes are never billed to a tenant: the operator pays them, at
		// the endpoint's list price.
		cost := billing.ListCost(rates, pricing.Usage{Input: u.GetInputTokens(), CachedInput: u.GetCachedInputTokens(), Output: u.GetOutputTokens(),
			CacheWrite: u.GetCacheWriteTokens(), CacheWrite1h: u.GetCacheWrite_1HTokens()})
		ob.mu.Lock()
		ob.probeCost[ep] += cost
		ob.probes++
		ob.mu.Unlock()
	}
}

// outcomeOf is what a report says of its endpoint, for the routing-cost
// policy's rates.
func outcomeOf(r *switchboardv1.CallReport) outcomes.Call {
	u := r.GetUsage()
	c := outcomes.Call{
		Probe: r.GetProbeId() != "",
		Usage: pricing.Usage{Input: u.GetInputTokens(), CachedInput: u.GetCachedInputTokens(), Output: u.GetOutputTokens(),
			CacheWrite: u.GetCacheWriteTokens(), CacheWrite1h: u.GetCacheWrite_1HTokens()},
		Reported:        u.GetReported(),
		Duration:        r.GetDuration().AsDuration(),
		QualityFailures: r.GetQualityFailures(),
		RetryAfter:      min(r.GetRetryAfter().AsDuration(), provheaders.MaxRetryAfter),
	}
	if d := c.Duration; !plausible(r) || c.Usage.Output > 0 && d > 0 && float64(c.Usage.Output)/d.Seconds() > MaxThroughput {
		c.Duration = 0 // no speed to learn from
	}
	if r.GetRequestFailure() && r.GetOutcome() != switchboardv1.Outcome_OUTCOME_OK {
		// The request's own failure says nothing of the endpoint.
		c.Kind = outcomes.KindIgnored
		return c
	}
	switch r.GetOutcome() {
	case switchboardv1.Outcome_OUTCOME_OK:
		c.Kind = outcomes.KindOK
	case switchboardv1.Outcome_OUTCOME_RATE_LIMITED:
		c.Kind = outcomes.KindRateLimited
	case switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, switchboardv1.Outcome_OUTCOME_TIMEOUT,
		switchboardv1.Outcome_OUTCOME_MALFORMED, switchboardv1.Outcome_OUTCOME_DROPPED:
		c.Kind = outcomes.KindError
	default:
		// Cancelled (client gone, hedge lost), a 4xx the request deserved,
		// unknown: nothing said of the endpoint.
		c.Kind = outcomes.KindIgnored
	}
	return c
}

// plausible reports whether r's first token is one a provider could
// produce: durations within [0, MaxCallDuration], the first token before
// the end and not faster than MinTTFT after a large uncached prompt. (The
// generation speed is checked against MaxThroughput where it is measured.)
func plausible(r *switchboardv1.CallReport) bool {
	d := r.GetDuration().AsDuration()
	if d < 0 || d > MaxCallDuration {
		return false
	}
	if r.GetTtft() == nil {
		return true
	}
	ttft := r.GetTtft().AsDuration()
	if ttft < 0 || ttft > MaxCallDuration || r.GetDuration() != nil && ttft > d {
		return false
	}
	u := r.GetUsage()
	prompt := u.GetInputTokens()
	if prompt == 0 {
		prompt = r.GetPromptTokens()
	}
	return prompt-u.GetCachedInputTokens() < FloorPromptTokens || ttft >= MinTTFT
}

func (ob *Observer) countImplausible(own bool) {
	if !own {
		return
	}
	ob.mu.Lock()
	ob.implausible++
	ob.mu.Unlock()
}

// Implausible returns how many reports' timing was not believed: a first
// token that plausible refuses (no TTFT nor throughput sample), or a
// generation speed beyond MaxThroughput (no throughput sample). A rising
// count means an edge reports garbage or lies.
func (ob *Observer) Implausible() int64 {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return ob.implausible
}

// ProbeCost returns the probes seen and what they cost in USD, in total.
// Probes are never billed to a tenant; this is what the operator pays.
func (ob *Observer) ProbeCost() (probes int64, usd float64) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	for _, c := range ob.probeCost {
		usd += c
	}
	return ob.probes, usd
}

// Unknown returns how many reports named an endpoint not in the catalog.
func (ob *Observer) Unknown() int64 {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return ob.unknown
}
