package cooldown

import (
	"maps"
	"slices"
	"time"
)

// Bench is one endpoint's cool-down state, as a replica hands its tracker
// to one that starts (Export, Import).
type Bench struct {
	Endpoint string
	// Until is when its cool-down or pause ends; zero when not cooling.
	Until time.Time
	// Refusals are its recent refusals that have not benched it yet.
	Refusals []time.Time
}

// Export returns the endpoints cooling at now and those with refusals
// within the window, sorted by endpoint.
func (t *Tracker) Export(now time.Time) []Bench {
	t.mu.RLock()
	defer t.mu.RUnlock()
	by := map[string]*Bench{}
	get := func(ep string) *Bench {
		if b, ok := by[ep]; ok {
			return b
		}
		b := &Bench{Endpoint: ep}
		by[ep] = b
		return b
	}
	for ep, u := range t.until {
		if now.Before(u) {
			get(ep).Until = u
		}
	}
	for ep, errs := range t.errs {
		for _, e := range errs {
			if now.Sub(e) < t.opts.Window {
				b := get(ep)
				b.Refusals = append(b.Refusals, e)
			}
		}
	}
	out := make([]Bench, 0, len(by))
	for _, ep := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[ep])
	}
	return out
}

// Import takes the cool-downs and refusals another replica exported: a
// cool-down that ends later than this tracker's own for the endpoint
// replaces it, and refusals this tracker has not counted are added (at
// most as many as benching needs).
func (t *Tracker) Import(benches []Bench) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range benches {
		if b.Endpoint == "" {
			continue
		}
		if u, ok := t.until[b.Endpoint]; !b.Until.IsZero() && (!ok || b.Until.After(u)) {
			t.set(b.Endpoint, b.Until)
		}
		errs := t.errs[b.Endpoint]
		for _, r := range b.Refusals {
			if len(errs) < t.opts.Errors && !slices.ContainsFunc(errs, r.Equal) {
				errs = append(errs, r)
			}
		}
		if len(errs) > 0 {
			slices.SortFunc(errs, time.Time.Compare)
			t.errs[b.Endpoint] = errs
		}
	}
}
