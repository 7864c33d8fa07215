package routing

import (
	"fmt"
	"math"
	"slices"

	"github.com/switchboard-ai/switchboard/pkg/numfmt"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// deprioritise moves endpoints that miss preferred_min_throughput or
// preferred_max_latency behind those that meet them, keeping order otherwise.
// An endpoint without data is given the benefit of the doubt.
func deprioritise(cs []*candidate, p *switchboardv1.ProviderPreferences) {
	if p == nil || (p.PreferredMinThroughput == nil && p.PreferredMaxLatency == nil) {
		return
	}
	minTPS, maxLat := p.GetPreferredMinThroughput(), p.GetPreferredMaxLatency().AsDuration()
	misses := func(c *candidate) bool {
		return (p.PreferredMinThroughput != nil && c.tps > 0 && c.tps < minTPS) ||
			(p.GetPreferredMaxLatency() != nil && c.samples > 0 && c.ttft > maxLat)
	}
	slices.SortStableFunc(cs, func(a, b *candidate) int {
		ma, mb := misses(a), misses(b)
		switch {
		case ma == mb:
			return 0
		case mb:
			return -1
		}
		return 1
	})
	for _, c := range cs {
		if misses(c) {
			c.note = noteDeprioritised
		}
	}
}

// noFallbacks keeps the first endpoint, or with provider.order the ordered
// providers only: allow_fallbacks=false means no endpoint the user did not name.
func noFallbacks(usable []*candidate, order []string) []*candidate {
	if len(order) == 0 {
		return usable[:1]
	}
	n := 0
	for _, c := range usable {
		if slices.Contains(order, c.ep.provider) {
			n++
		} else {
			break
		}
	}
	return usable[:max(n, 1)]
}

// exclusion says why an endpoint cannot take a request. It is a code and
// its figures, rendered to text only when someone reads it (an explanation
// or an error), so filtering costs no formatting on the hot path.
type exclusion struct {
	why  exclReason
	a, b float64 // the figures of the reason
	n    [3]int64
	s    string
}

type exclReason uint8

const (
	exclNone exclReason = iota
	exclNotOnly
	exclIgnored
	exclPromptPrice
	exclCompletionPrice
	exclCollects
	exclNotZDR
	exclQuantization
	exclParameter
	exclContext
	exclMaxOutput
)

// String renders the exclusion as shown in explanations and errors.
func (x exclusion) String() string {
	switch x.why {
	case exclNotOnly:
		return "not in provider.only"
	case exclIgnored:
		return "in provider.ignore"
	case exclPromptPrice:
		return fmt.Sprintf("input price %s above max_price.prompt %s", numfmt.Number(x.a), numfmt.Number(x.b))
	case exclCompletionPrice:
		return fmt.Sprintf("output price %s above max_price.completion %s", numfmt.Number(x.a), numfmt.Number(x.b))
	case exclCollects:
		return "collects data (data_collection=deny)"
	case exclNotZDR:
		return "not zero-data-retention"
	case exclQuantization:
		return fmt.Sprintf("quantization %q not in provider.quantizations", x.s)
	case exclParameter:
		return fmt.Sprintf("does not support parameter %q", x.s)
	case exclContext:
		return fmt.Sprintf("context length %d too small for %d prompt + %d output tokens", x.n[0], x.n[1], x.n[2])
	case exclMaxOutput:
		return fmt.Sprintf("max output %d tokens too small for %d (max_tokens)", x.n[0], x.n[1])
	}
	return ""
}

// exclude says why an endpoint cannot take the request; why is exclNone if it can.
func exclude(ep *endpoint, p *switchboardv1.ProviderPreferences, params []string, in, maxOut int64) exclusion {
	if len(p.GetOnly()) > 0 && !slices.Contains(p.GetOnly(), ep.provider) {
		return exclusion{why: exclNotOnly}
	}
	if slices.Contains(p.GetIgnore(), ep.provider) {
		return exclusion{why: exclIgnored}
	}
	if mp := p.GetMaxPrice(); mp != nil {
		if mp.Prompt != nil && ep.rates.Input > mp.GetPrompt() {
			return exclusion{why: exclPromptPrice, a: ep.rates.Input, b: mp.GetPrompt()}
		}
		if mp.Completion != nil && ep.rates.Output > mp.GetCompletion() {
			return exclusion{why: exclCompletionPrice, a: ep.rates.Output, b: mp.GetCompletion()}
		}
	}
	if p.GetDataCollection() == switchboardv1.DataCollection_DATA_COLLECTION_DENY && !ep.denyCollection && !ep.zdr {
		return exclusion{why: exclCollects}
	}
	if p.GetZdr() && !ep.zdr {
		return exclusion{why: exclNotZDR}
	}
	if q := p.GetQuantizations(); len(q) > 0 && !slices.Contains(q, ep.quantization) {
		return exclusion{why: exclQuantization, s: ep.quantization}
	}
	if p.GetRequireParameters() {
		for _, name := range params {
			if !ep.params[name] {
				return exclusion{why: exclParameter, s: name}
			}
		}
	}
	maxOut = max(maxOut, 0)
	if ep.maxOutput > 0 && maxOut > ep.maxOutput {
		return exclusion{why: exclMaxOutput, n: [3]int64{ep.maxOutput, maxOut}}
	}
	// in + maxOut could wrap for a hostile max_tokens; both are
	// non-negative, so the subtraction cannot.
	if ep.contextLength > 0 && (in > ep.contextLength || maxOut > ep.contextLength-in) {
		return exclusion{why: exclContext, n: [3]int64{ep.contextLength, in, maxOut}}
	}
	return exclusion{}
}

func validatePrefs(p *switchboardv1.ProviderPreferences, idx *Index) error {
	if p == nil {
		return nil
	}
	lists := [...]struct {
		field string
		names []string
	}{{"only", p.GetOnly()}, {"ignore", p.GetIgnore()}, {"order", p.GetOrder()}}
	for _, l := range lists {
		for _, n := range l.names {
			if !idx.providers[n] {
				e := errorf(KindInvalid, "provider.%s: unknown provider %q", l.field, n)
				e.Field, e.Reason = "provider."+l.field, "INVALID_VALUE"
				return e
			}
		}
	}
	if mp := p.GetMaxPrice(); mp != nil {
		for _, v := range [...]*float64{mp.Prompt, mp.Completion} {
			if v != nil && (*v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0)) {
				field := "prompt"
				if v == mp.Completion {
					field = "completion"
				}
				return errorf(KindInvalid, "provider.max_price.%s must be a non-negative number", field)
			}
		}
	}
	if _, ok := switchboardv1.Sort_name[int32(p.GetSort())]; !ok {
		return errorf(KindInvalid, "provider.sort: unknown value %d", p.GetSort())
	}
	if v := p.PreferredMinThroughput; v != nil && (*v < 0 || math.IsNaN(*v)) {
		return errorf(KindInvalid, "provider.preferred_min_throughput must be a non-negative number")
	}
	return nil
}
