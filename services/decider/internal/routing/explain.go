package routing

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// explain builds the Decision: the compact summary always, every candidate's
// figures only when asked (they cost allocations the hot path should not pay).
func (r *Router) explain(sc *scratch, win *candidate, reason switchboardv1.RouteReason, bucket tokens.Bucket, fastest time.Duration, all, cost bool) *switchboardv1.Decision {
	d := &switchboardv1.Decision{Reason: reason, Bucket: switchboardv1.SizeBucket(int(bucket) + 1)}
	if fastest > 0 {
		d.FastestTtft = durationpb.New(fastest)
	}
	qualified := 0
	for i := range sc.cands {
		if sc.cands[i].qualified {
			qualified++
		}
	}
	d.Summary = summary(win, reason, bucket, fastest, qualified, len(sc.cands), cost, sc.sticky.outcome, sc.residency)
	if !all {
		d.Candidates = []*switchboardv1.Candidate{r.candidateProto(win, fastest, cost, false)}
		if sc.sticky.outcome == stickyKept && sc.sticky.warm == win {
			// Without explain, the winner's note costs no formatting.
			d.Candidates[0].Note = noteKept
		}
		return d
	}
	d.Candidates = make([]*switchboardv1.Candidate, 0, len(sc.cands))
	for i := range sc.cands {
		pc := r.candidateProto(&sc.cands[i], fastest, cost, true)
		r.noteSticky(pc, &sc.cands[i], sc.sticky, fastest, cost)
		d.Candidates = append(d.Candidates, pc)
	}
	return d
}

// noteKept is the winner's note, without explain, when it was kept for
// its conversation.
const noteKept = "kept: holds this conversation's prompt cache"

// noteSticky adds what the sticky step did to the note of the
// conversation's endpoint: why it was kept, or why not. Under the smart
// policy "kept" replaces the ranking's note; under routing cost the
// endpoint's figures stay, followed by it.
func (r *Router) noteSticky(pc *switchboardv1.Candidate, c *candidate, s stickyState, fastest time.Duration, cost bool) {
	if s.warm != c || s.outcome == stickyNone || s.outcome == stickyNew {
		return
	}
	if pc.Note == "" || (s.outcome == stickyKept && !cost) {
		pc.Note = r.stickyNote(s, fastest)
		return
	}
	pc.Note += "; " + r.stickyNote(s, fastest)
}

// candidateProto renders one candidate; detail writes the routing-cost
// policy's figures into its note, which only a full explanation pays for.
func (r *Router) candidateProto(c *candidate, fastest time.Duration, cost, detail bool) *switchboardv1.Candidate {
	pc := &switchboardv1.Candidate{
		EndpointId:            c.ep.id,
		Provider:              c.ep.provider,
		Samples:               int64(c.samples),
		CostUsd:               c.cost,
		EstimatedCachedTokens: c.cached,
		Qualified:             c.qualified,
		Throughput:            c.tps,
		Note:                  r.noteText(c, fastest),
	}
	if c.samples > 0 {
		pc.TypicalTtft = durationpb.New(c.ttft)
	}
	if cost && c.note != noteExcluded {
		pc.RoutingCostUsd, pc.Share = c.rcost, c.share
		if detail {
			pc.Note = r.costNote(c)
		}
	}
	return pc
}

// costNote explains a candidate under the routing-cost policy: its routing
// cost and the figures behind it, its share, and what a guard did.
func (r *Router) costNote(c *candidate) string {
	x := c.in
	s := fmt.Sprintf("routing cost %.8f USD (price %.8f, wait %.2fs, 429 %.1f%%, errors %.1f%%, quality %.1f%%%s), share %.1f%%",
		c.rcost, x.price, x.wait, 100*x.limited, 100*x.failed, 100*x.poor, checksText(c.ep.oc.QualityChecks()), 100*c.share)
	switch c.guard {
	case guardCapped:
		if x.capRPM > 0 && x.load >= x.capRPM {
			s += fmt.Sprintf("; over its learned cap (%.1f requests/min routed, cap %.1f)", x.load, x.capRPM)
		} else {
			s += "; paused until " + c.fig.PausedUntil.UTC().Format(time.RFC3339) + " as its 429's Retry-After asked"
		}
	case guardErrors:
		s += "; error rate far above its peers': no traffic until it recovers"
	case guardQuality:
		s += "; answers fail quality checks far more than its peers': test traffic only"
	case guardNone:
		if c.backoff > 0 && c.backoff < 1 {
			s += fmt.Sprintf("; backed off to %.0f%% of its weight (recent failures)", 100*c.backoff)
		}
		if x.capRPM > 0 {
			s += fmt.Sprintf("; learned cap %.1f requests/min (%.1f routed)", x.capRPM, x.load)
		}
	}
	if c.note == noteWinner {
		s = "chosen; " + s
	}
	return s
}

func (r *Router) noteText(c *candidate, fastest time.Duration) string {
	if c.cooling && c.note != noteExcluded {
		s := "cooling down until " + c.coolUntil.UTC().Format(time.RFC3339)
		if c.lastResort {
			s += "; used only because every usable endpoint is cooling down"
		} else {
			s += "; kept behind the others as a fallback"
		}
		return s
	}
	switch c.note {
	case noteWinner:
		return "chosen"
	case noteExplored:
		return fmt.Sprintf("chosen to explore: %d samples in this bucket, fewer than %d", c.samples, r.o.MinSamples)
	case noteQualified:
		return "fast enough"
	case noteTooSlow:
		return fmt.Sprintf("too slow: %s is over %gx the fastest %s and over %s", c.ttft.Round(time.Millisecond), r.o.SpeedFactor, fastest.Round(time.Millisecond), r.o.FastEnough)
	case noteNoData:
		return "no speed data for this size yet"
	case notePriceGuard:
		return fmt.Sprintf("fast enough but above the usual price and not %g%% under the list price", (1-r.o.PriceGuard)*100)
	case noteExcluded:
		return c.excluded.String()
	case noteDeprioritised:
		return "misses preferred_min_throughput or preferred_max_latency"
	case noteNoThroughput:
		if c.tpsRank <= 0 {
			return "no throughput figure yet, nor for any other endpoint: ranked by price"
		}
		return fmt.Sprintf("no throughput figure yet: ranked as the median of the measured endpoints, %.1f tokens/s", c.tpsRank)
	}
	return ""
}

// checksText lists the quality checks an endpoint's answers failed, by
// name with their rates, e.g. " [empty 1.0%, malformed_tool_call 4.0%]".
func checksText(checks map[string]float64) string {
	if len(checks) == 0 {
		return ""
	}
	parts := make([]string, 0, len(checks))
	for _, name := range slices.Sorted(maps.Keys(checks)) {
		parts = append(parts, fmt.Sprintf("%s %.1f%%", name, 100*checks[name]))
	}
	return " [" + strings.Join(parts, ", ") + "]"
}

// reasonWord is reason as the summary names it
// (switchboardv1.EnumName, e.g. "cheapest_qualifying").
func reasonWord(reason switchboardv1.RouteReason) string {
	if n := switchboardv1.EnumName(reason); n != "" {
		return n
	}
	return reason.String()
}

// summary is the one-line explanation sent in the x-switchboard-route header.
func summary(win *candidate, reason switchboardv1.RouteReason, bucket tokens.Bucket, fastest time.Duration, qualified, total int, cost bool, sticky stickyOutcome, residency string) string {
	b := make([]byte, 0, 200)
	if cost {
		b = append(b, "policy=routing-cost "...)
	}
	b = append(b, "bucket="...)
	b = append(b, bucket.String()...)
	b = append(b, " reason="...)
	b = append(b, reasonWord(reason)...)
	b = append(b, " provider="...)
	b = append(b, win.ep.provider...)
	b = append(b, " cost_usd="...)
	b = strconv.AppendFloat(b, win.cost, 'f', 6, 64)
	if cost {
		b = append(b, " routing_cost_usd="...)
		b = strconv.AppendFloat(b, win.rcost, 'f', 6, 64)
		b = append(b, " share="...)
		b = strconv.AppendFloat(b, win.share, 'f', 3, 64)
	}
	if win.samples > 0 {
		b = append(b, " ttft_ms="...)
		b = strconv.AppendInt(b, win.ttft.Milliseconds(), 10)
		b = append(b, " samples="...)
		b = strconv.AppendInt(b, int64(win.samples), 10)
		if win.ttftRegion != "" {
			b = append(b, " ttft_region="...)
			b = append(b, win.ttftRegion...)
		}
	}
	if fastest > 0 {
		b = append(b, " fastest_ms="...)
		b = strconv.AppendInt(b, fastest.Milliseconds(), 10)
	}
	b = append(b, " qualified="...)
	b = strconv.AppendInt(b, int64(qualified), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(total), 10)
	if w := sticky.word(); w != "" {
		b = append(b, " sticky="...)
		b = append(b, w...)
	}
	if residency != "" {
		b = append(b, " residency="...)
		b = append(b, residency...)
	}
	return string(b)
}
