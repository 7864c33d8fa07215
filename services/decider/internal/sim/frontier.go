package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// FrontierKeys are the figures a policy is judged on when policies are
// compared for dominance: first-token time per size bucket (p50), the p90
// of long streamed calls, what clients paid and what the gateway paid for
// cancelled hedge legs. Lower is better on every one.
var FrontierKeys = []string{
	"ttft_p50_under_8k", "ttft_p50_8k_32k", "ttft_p50_32k_128k", "ttft_p50_over_128k",
	"ttft_p90_stream_over_32k", "usd_per_1k_requests", "hedge_usd_per_1k_requests",
}

// oracleName is the oracle policy's name (policy.go), never a dominator.
const oracleName = "oracle"

// Domination says why one policy dominates another: the figures on which it
// is better beyond the 95 % interval of the paired differences.
type Domination struct {
	// By is the dominating policy.
	By string
	// Better lists the figures on which By is better beyond the interval,
	// each with the mean relative difference ("usd_per_1k_requests -7.9%").
	Better []string
}

// Dominators returns the policies among sums that dominate target: no
// worse on every figure of FrontierKeys and better on at least one beyond
// the 95 % interval of the per-seed differences. Strictly, "no worse" is a
// mean over the seeds not above target's; loosely (strict false), it is a
// difference not above target's beyond the interval, so that a rival
// within noise on a figure still counts as no worse there. Seeds pair up: every policy meets the same
// traffic and the same provider luck on seed k, so the difference of two
// policies on one seed is free of the luck they share, and its interval
// is far narrower than either policy's own.
func Dominators(target Summary, sums []Summary, strict bool) []Domination {
	var out []Domination
	for _, s := range sums {
		if s.Policy == target.Policy || s.Policy == oracleName {
			// The oracle knows what no router can: it bounds the others
			// (the regret rows) rather than competing with them.
			continue
		}
		if d, ok := dominates(s, target, strict); ok {
			out = append(out, d)
		}
	}
	return out
}

// dominates reports whether a dominates b, and on which figures.
func dominates(a, b Summary, strict bool) (Domination, bool) {
	d := Domination{By: a.Policy}
	for _, key := range FrontierKeys {
		diff, hw, mb, ok := pairedDiff(a, b, key)
		if !ok {
			continue
		}
		if diff > 0 && (strict || diff > hw) {
			return Domination{}, false
		}
		if diff < 0 && -diff > hw {
			rel := ""
			if mb != 0 {
				rel = fmt.Sprintf(" %+.1f%%", 100*diff/mb)
			}
			d.Better = append(d.Better, key+rel)
		}
	}
	return d, len(d.Better) > 0
}

// pairedDiff is the mean over seeds of a's figure minus b's, the half-width
// of its 95 % interval, and b's mean; ok is false when no seed has both.
func pairedDiff(a, b Summary, key string) (diff, hw, meanB float64, ok bool) {
	var ds, bs []float64
	for k := range min(len(a.Runs), len(b.Runs)) {
		va, vb := a.Runs[k].Figures()[key], b.Runs[k].Figures()[key]
		if math.IsNaN(va) || math.IsNaN(vb) {
			continue
		}
		ds, bs = append(ds, va-vb), append(bs, vb)
	}
	if len(ds) == 0 {
		return 0, 0, 0, false
	}
	m, hw := meanInterval(ds)
	return m, hw, mean(bs), true
}

// WriteFrontier prints, for every policy, the policies that dominate it,
// or that it is on the frontier; strict as Dominators.
func WriteFrontier(w io.Writer, sums []Summary, strict bool) error {
	how := "no worse = mean not above"
	if !strict {
		how = "no worse = not above beyond the interval"
	}
	if _, err := fmt.Fprintf(w, "Frontier (%s; figures: %s; paired over seeds, 95 %% interval):\n", how, strings.Join(FrontierKeys, ", ")); err != nil {
		return err
	}
	for _, s := range sums {
		doms := Dominators(s, sums, strict)
		if len(doms) == 0 {
			if _, err := fmt.Fprintf(w, "  %-26s on the frontier\n", s.Policy); err != nil {
				return err
			}
			continue
		}
		parts := make([]string, len(doms))
		for i, d := range doms {
			parts[i] = d.By + " (" + strings.Join(d.Better, ", ") + ")"
		}
		if _, err := fmt.Fprintf(w, "  %-26s dominated by %s\n", s.Policy, strings.Join(parts, "; ")); err != nil {
			return err
		}
	}
	return nil
}
