package outcomes

import (
	"maps"
	"time"
)

// Saved is one endpoint's decayed sums as of At, as a replica hands its
// tracker to one that starts (Export, Import). The routed load is not in
// it: it is each replica's own.
type Saved struct {
	Endpoint                                                 string
	At                                                       time.Time
	Calls, RateLimited, Failed, Poor                         float64
	RecentCalls, RecentFailed                                float64
	Priced, InputTokens, CachedTokens, OutputTokens, Charged float64
	OutputTokensTimed, CallSeconds                           float64
	Checks                                                   map[string]float64
	Cap                                                      float64
	CapAt, PausedUntil                                       time.Time
}

// Export returns the sums of every endpoint that has seen a call.
func (t *Tracker) Export() []Saved {
	var out []Saved
	t.endpoints.Range(func(k, v any) bool {
		s := v.(*Endpoint).pub.Load()
		if s.at == 0 {
			return true
		}
		sv := Saved{Endpoint: k.(string), At: time.Unix(0, s.at),
			Calls: s.calls, RateLimited: s.limited, Failed: s.failed, Poor: s.poor,
			RecentCalls: s.fastCalls, RecentFailed: s.fastFailed,
			Priced: s.priced, InputTokens: s.input, CachedTokens: s.cached, OutputTokens: s.output, Charged: s.charged,
			OutputTokensTimed: s.outTokens, CallSeconds: s.seconds, Checks: maps.Clone(s.checks), Cap: s.cap0}
		if s.capAt != 0 {
			sv.CapAt = time.Unix(0, s.capAt)
		}
		if s.pausedUntil != 0 {
			sv.PausedUntil = time.Unix(0, s.pausedUntil)
		}
		out = append(out, sv)
		return true
	})
	return out
}

// Import takes the sums another replica exported for the endpoints this
// tracker has seen no call of yet; an endpoint it has figures of keeps its
// own (the shared reports reach both). Sums must be finite and not
// negative (the caller checks); at most maxChecks quality checks are taken.
func (t *Tracker) Import(saved []Saved) {
	for _, sv := range saved {
		if sv.Endpoint == "" || sv.At.IsZero() {
			continue
		}
		e := t.Endpoint(sv.Endpoint)
		e.mu.Lock()
		if e.s.at == 0 {
			e.s = summary{at: sv.At.UnixNano(),
				calls: sv.Calls, limited: sv.RateLimited, failed: sv.Failed, poor: sv.Poor,
				fastCalls: sv.RecentCalls, fastFailed: sv.RecentFailed,
				priced: sv.Priced, input: sv.InputTokens, cached: sv.CachedTokens, output: sv.OutputTokens, charged: sv.Charged,
				outTokens: sv.OutputTokensTimed, seconds: sv.CallSeconds, cap0: sv.Cap}
			if !sv.CapAt.IsZero() {
				e.s.capAt = sv.CapAt.UnixNano()
			}
			if !sv.PausedUntil.IsZero() {
				e.s.pausedUntil = sv.PausedUntil.UnixNano()
			}
			for name, v := range sv.Checks {
				if len(e.s.checks) >= maxChecks {
					break
				}
				if e.s.checks == nil {
					e.s.checks = map[string]float64{}
				}
				e.s.checks[name[:min(len(name), maxCheckName)]] = v
			}
			p := e.s
			p.checks = maps.Clone(e.s.checks)
			e.pub.Store(&p)
		}
		e.mu.Unlock()
	}
}
