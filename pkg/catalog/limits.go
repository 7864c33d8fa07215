package catalog

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Ramp periods: a ramp's period lies within [MinRampPeriod, MaxRampPeriod];
// a ramp that gives none has DefaultRampPeriod. The rate-limit broker takes
// its bounds from here.
const (
	MinRampPeriod     = time.Second
	MaxRampPeriod     = 24 * time.Hour
	DefaultRampPeriod = time.Minute
)

// AppKey is the key of a tenant's app-scope limit: "<tenant>/<scope_key>",
// so "<tenant>/<app>" or "<tenant>/<app>/<environment>".
func AppKey(tenant, scopeKey string) string { return tenant + "/" + scopeKey }

// ValidAppKey reports whether key names an app scope instance:
// "<tenant>/<app>" or "<tenant>/<app>/<environment>", no part empty.
func ValidAppKey(key string) bool {
	parts := strings.Split(key, "/")
	return len(parts) >= 2 && len(parts) <= 3 && !slices.Contains(parts, "")
}

// validateRamp checks a limit's ramp; lp is the limit's path.
func validateRamp(l Limit, lp string, bad func(string, string, ...any)) {
	r := l.Ramp
	if l.Unit == "concurrent_requests" {
		bad(lp+".ramp", "concurrent_requests has no ramp")
	}
	if !(r.MaxIncrease > 0) || math.IsInf(r.MaxIncrease, 0) {
		bad(lp+".ramp.max_increase", "must be a positive fraction, e.g. 0.5 for +50%% per period")
	}
	switch floor := r.Floor; {
	case floor < 0 || math.IsNaN(floor) || math.IsInf(floor, 0):
		bad(lp+".ramp.floor", "must be a non-negative number")
	case floor == 0 && l.Capacity > 0 && !(l.Capacity/10 > 0):
		bad(lp+".ramp.floor", "is required: a tenth of capacity %g is no floor", l.Capacity)
	}
	if r.Period != "" {
		switch d, err := time.ParseDuration(r.Period); {
		case err != nil || d <= 0:
			bad(lp+".ramp.period", "%q must be a positive duration such as 1m", r.Period)
		case d < MinRampPeriod || d > MaxRampPeriod:
			bad(lp+".ramp.period", "%q must be between %s and %s", r.Period, shortDuration(MinRampPeriod), shortDuration(MaxRampPeriod))
		}
	}
}

// bucketLimit is a limit and where it is, by the buckets it makes.
type bucketLimit struct {
	path   string
	limit  Limit
	shared bool // provider_project or provider_workspace: repeated on every endpoint that shares it
}

// validateBuckets checks that no two limits make the same bucket: a bucket
// is a scope instance (an endpoint, a provider project or workspace, a
// tenant, one of its keys or apps, a partner), a unit and a window, and a
// ramp is a bucket of its own per unit. A provider limit may repeat on every
// endpoint of the project or workspace, with the same values.
func (c *Catalog) validateBuckets(bad func(string, string, ...any)) {
	seen := map[string]bucketLimit{}
	add := func(scope, key string, b bucketLimit) {
		if !oneOf(b.limit.Unit, Units) {
			return // reported with the limit
		}
		base := scope + "|" + key + "|" + b.limit.Unit + "|" + b.limit.Per
		if prev, ok := seen[base]; ok && prev.shared && b.shared {
			if !sameLimit(prev.limit, b.limit) {
				bad(b.path, "differs from the %s limit on %s given at %s: a shared limit has one value", scope, key, prev.path)
			}
			return
		}
		ids := []string{base}
		if b.limit.Ramp != nil {
			ids = append(ids, scope+"|"+key+"|"+b.limit.Unit+"|ramp")
		}
		for _, id := range ids {
			if prev, ok := seen[id]; ok {
				bad(b.path, "limits the same %s bucket of %s as %s (one limit per unit and window, one ramp per unit)", scope, key, prev.path)
				return
			}
		}
		for _, id := range ids {
			seen[id] = b
		}
	}
	for i, m := range c.Models {
		for j, e := range m.Endpoints {
			for k, l := range e.Limits {
				b := bucketLimit{path: fmt.Sprintf("models[%d].endpoints[%d].limits[%d]", i, j, k), limit: l}
				switch l.Scope {
				case "", "model_route":
					add("model_route", e.ID(m.ID), b)
				case "provider_project":
					b.shared = true
					add(l.Scope, cmp.Or(e.ProviderProject, e.Provider), b)
				case "provider_workspace":
					b.shared = true
					add(l.Scope, cmp.Or(e.ProviderWorkspace, e.Provider), b)
				}
			}
		}
	}
	for i, t := range c.Tenants {
		for j, l := range t.Limits {
			b := bucketLimit{path: fmt.Sprintf("tenants[%d].limits[%d]", i, j), limit: l}
			switch l.Scope {
			case "", "tenant":
				add("tenant", t.ID, b)
			case "api_key":
				for _, k := range t.APIKeysSHA256 {
					add(l.Scope, KeyID(k), b)
				}
				for _, k := range t.APIKeys {
					add(l.Scope, KeyID(k.SHA256), b)
				}
			case "app":
				if l.ScopeKey == "" {
					continue // reported with the limit
				}
				if key := AppKey(t.ID, l.ScopeKey); !ValidAppKey(key) {
					bad(b.path+".scope_key", "%q must be \"<app>\" or \"<app>/<environment>\" (the app's key %q has no empty part and at most three)", l.ScopeKey, key)
				} else {
					add(l.Scope, key, b)
				}
			}
		}
	}
	for i, p := range c.Partners {
		for j, l := range p.Limits {
			add("partner", p.ID, bucketLimit{path: fmt.Sprintf("partners[%d].limits[%d]", i, j), limit: l})
		}
	}
}

// sameLimit reports whether two limits configure the same bucket alike.
func sameLimit(a, b Limit) bool {
	if a.Unit != b.Unit || a.Per != b.Per || a.Capacity != b.Capacity || a.Burst != b.Burst || a.ResetAt != b.ResetAt {
		return false
	}
	if (a.RefundOnExpiry == nil) != (b.RefundOnExpiry == nil) || (a.RefundOnExpiry != nil && *a.RefundOnExpiry != *b.RefundOnExpiry) {
		return false
	}
	if (a.Ramp == nil) != (b.Ramp == nil) {
		return false
	}
	if a.Ramp == nil {
		return true
	}
	return a.Ramp.MaxIncrease == b.Ramp.MaxIncrease && a.Ramp.Floor == b.Ramp.Floor && rampPeriod(a.Ramp) == rampPeriod(b.Ramp)
}

// rampPeriod is a validated ramp's period, its default applied.
func rampPeriod(r *Ramp) time.Duration {
	if r.Period == "" {
		return DefaultRampPeriod
	}
	d, _ := time.ParseDuration(r.Period)
	return d
}

// shortDuration writes d without its zero minutes and seconds: 24h, not 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
