package broker

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// Spec is one configured limit, the broker's view of a catalog limit with
// the fields the catalog does not have yet (Key, ResetAt, Ramp). One Spec
// becomes one bucket, or two when it has both a Window and a Ramp.
type Spec struct {
	// Scope is the level of the hierarchy. (Required)
	Scope Scope
	// Key names the scope instance. (Required) By scope: api_key → the key id
	// (catalog.KeyID); app → "<tenant>/<app>" for every environment of the
	// app, or "<tenant>/<app>/<environment>" for one; tenant → tenant id;
	// partner → partner id; provider_workspace and provider_project → the
	// Workspace or Project of the routes that share it; model_route → the
	// endpoint id ("<provider>/<model>").
	Key string
	// Unit is what is counted. (Required)
	Unit Unit
	// Window is the period: second, minute or hour for a token bucket, day for
	// a daily reset. (Required) except for concurrent_requests, which has none,
	// and for a ramp-only spec.
	Window Window
	// Capacity is what fits in one window, or the number of requests in
	// flight. (Required, > 0) unless the spec is ramp-only.
	Capacity float64
	// Burst is extra room above Capacity. (Optional) Defaults to 0.
	Burst float64
	// ResetAt is the UTC time of day at which a daily bucket resets, as an
	// offset from midnight, e.g. 7*time.Hour for a provider that resets at
	// 07:00 UTC. (Optional, day only) Defaults to 00:00 UTC.
	ResetAt time.Duration
	// Ramp adds a ramp limit on the same unit. (Optional)
	Ramp *Ramp
	// Source is where the limit comes from. (Optional) Defaults to configured.
	Source Source
	// RefundOnExpiry says whether an expired reservation's charge is given
	// back to these buckets. (Optional) Nil follows Options.RefundOnExpiry.
	RefundOnExpiry *bool
}

// Ramp caps how fast admissions may grow: what a period admits may not
// exceed max(Floor, (1+MaxIncrease) × what the previous period admitted).
type Ramp struct {
	// MaxIncrease is the largest growth from one period to the next as a
	// fraction: 0.5 is +50%. (Required, > 0)
	MaxIncrease float64
	// Floor is what a period may always admit, so traffic can start from
	// idle. (Optional) Defaults to a tenth of the spec's Capacity; required
	// for a ramp-only spec.
	Floor float64
	// Period is the ramp's period, aligned on the Unix epoch. (Optional)
	// Defaults to one minute.
	Period time.Duration
}

// Route says which shared provider buckets a dispatch to one endpoint
// charges besides the endpoint's own (model_route) buckets.
type Route struct {
	// EndpointID is the endpoint's id, "<provider>/<model>". (Required)
	EndpointID string
	// Model is the canonical model id. (Optional)
	Model string
	// Provider is the provider's name. (Optional) Defaults to the part of
	// EndpointID before the first '/'.
	Provider string
	// Workspace keys the provider_workspace buckets the endpoint charges.
	// (Optional) Defaults to Provider.
	Workspace string
	// Project keys the provider_project buckets the endpoint charges.
	// (Optional) Defaults to Provider.
	Project string
	// Account names the provider account the endpoint is called with: a
	// refusal by the account (a spend limit, billing, a disabled key)
	// pauses every route of the same Account. (Optional) Defaults to
	// Provider and Project.
	Account string
}

func (r Route) withDefaults() Route {
	if r.Provider == "" {
		r.Provider, _, _ = strings.Cut(r.EndpointID, "/")
	}
	if r.Workspace == "" {
		r.Workspace = r.Provider
	}
	if r.Project == "" {
		r.Project = r.Provider
	}
	if r.Account == "" {
		r.Account = r.Provider + "|" + r.Project
	}
	return r
}

// Config is the broker's whole configuration.
type Config struct {
	// Buckets are the configured limits.
	Buckets []Spec
	// Routes are the endpoints; an endpoint missing here charges its
	// model_route buckets and the provider buckets keyed by its provider name.
	Routes []Route
	// Classes are the workload classes' queue contracts; a class missing
	// here gets DefaultContract.
	Classes []ClassContract
	// Tenants are the tenants' fair-share weights and burst credits; a
	// tenant missing here has weight 1 and the default burst.
	Tenants []TenantShare
}

// def is a validated bucket definition: what a bucket is, without state.
type def struct {
	id       string
	scope    Scope
	key      string
	unit     Unit
	window   Window
	rule     Rule
	source   Source
	capacity float64
	burst    float64
	offset   int64   // daily: reset time of day; ramp: unused
	period   int64   // window or ramp period, ns
	growth   float64 // ramp: 1 + MaxIncrease
	floor    float64 // ramp
	refund   refund  // what expiry gives back
}

// refund is a bucket's own expiry rule, or none (the broker's default).
type refund uint8

const (
	refundDefault refund = iota // Options.RefundOnExpiry
	refundYes
	refundNo
)

func refundOf(b *bool) refund {
	switch {
	case b == nil:
		return refundDefault
	case *b:
		return refundYes
	}
	return refundNo
}

// max is the most the bucket ever holds.
func (d def) max() float64 { return d.capacity + d.burst }

// bucketID is the stable id of a bucket, used in charges, snapshots and
// reconfiguration: "<scope>:<key>:<unit>[:<window>|:ramp][:learned]".
func bucketID(scope Scope, key string, unit Unit, window Window, rule Rule, source Source) string {
	var b strings.Builder
	b.WriteString(scope.String())
	b.WriteByte(':')
	b.WriteString(key)
	b.WriteByte(':')
	b.WriteString(unit.String())
	switch {
	case rule == RuleRamp:
		b.WriteString(":ramp")
	case window != WindowNone:
		b.WriteByte(':')
		b.WriteString(window.String())
	}
	if source == SourceLearned {
		b.WriteString(":learned")
	}
	return b.String()
}

// isRampID reports whether id, a bucketID, is a ramp bucket's, configured
// or learned.
func isRampID(id string) bool {
	return strings.HasSuffix(strings.TrimSuffix(id, ":learned"), ":ramp")
}

const day = int64(24 * time.Hour)

// defs validates specs and turns them into bucket definitions, every mistake
// reported at once.
func defs(specs []Spec) ([]def, error) {
	var errs []error
	var out []def
	seen := map[string]int{}
	for i, s := range specs {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%w: bucket spec %d: %s", ErrInvalid, i, fmt.Sprintf(format, args...)))
		}
		n := len(errs)
		checkSpec(s, bad)
		floor, period := checkRamp(s, bad)
		if len(errs) > n {
			continue
		}
		for _, d := range specDefs(s, floor, period) {
			d.id = bucketID(d.scope, d.key, d.unit, d.window, d.rule, d.source)
			if j, dup := seen[d.id]; dup {
				bad("bucket %s is also configured by spec %d", d.id, j)
				continue
			}
			seen[d.id] = i
			out = append(out, d)
		}
	}
	return out, errors.Join(errs...)
}

// checkSpec reports to bad what is wrong with s but its ramp.
func checkSpec(s Spec, bad func(format string, args ...any)) {
	if s.Scope < ScopeAPIKey || s.Scope > ScopeModelRoute {
		bad("unknown scope %d", s.Scope)
	}
	if s.Key == "" {
		bad("%s scope needs a key", s.Scope)
	}
	if s.Scope == ScopeApp && !catalog.ValidAppKey(s.Key) {
		bad("app key %q must be <tenant>/<app> or <tenant>/<app>/<environment>", s.Key)
	}
	if s.Unit < UnitRequests || s.Unit > UnitConcurrentRequests {
		bad("unknown unit %d", s.Unit)
	}
	rampOnly := s.Ramp != nil && s.Window == WindowNone
	switch {
	case s.Window > WindowDay:
		bad("unknown window %d", s.Window)
	case s.Unit == UnitConcurrentRequests && s.Window != WindowNone:
		bad("concurrent_requests has no window")
	case s.Unit == UnitConcurrentRequests && s.Ramp != nil:
		bad("concurrent_requests has no ramp")
	case s.Unit != UnitConcurrentRequests && s.Window == WindowNone && s.Ramp == nil:
		bad("%s needs a window", s.Unit)
	}
	if !rampOnly && (!(s.Capacity > 0) || math.IsInf(s.Capacity, 0)) {
		bad("capacity must be a positive number")
	}
	if !finiteNonNeg(s.Burst) {
		bad("burst must be a non-negative number")
	}
	if s.ResetAt != 0 && s.Window != WindowDay {
		bad("reset time applies to daily limits only")
	}
	if s.ResetAt < 0 || s.ResetAt >= 24*time.Hour {
		bad("reset time must be within one day")
	}
}

// checkRamp reports to bad what is wrong with s's ramp and returns its
// floor and period with their defaults; zeros without a ramp.
func checkRamp(s Spec, bad func(format string, args ...any)) (floor float64, period int64) {
	r := s.Ramp
	if r == nil {
		return 0, 0
	}
	if !(r.MaxIncrease > 0) || math.IsInf(r.MaxIncrease, 0) {
		bad("ramp max increase must be a positive fraction")
	}
	floor = r.Floor
	if floor == 0 && s.Window != WindowNone {
		floor = s.Capacity / 10
	}
	if !(floor > 0) || math.IsInf(floor, 0) {
		bad("ramp floor must be a positive number")
	}
	period = int64(rampPeriod(r))
	if period < int64(catalog.MinRampPeriod) || period > int64(catalog.MaxRampPeriod) {
		bad("ramp period must be between %s and %s", catalog.MinRampPeriod, catalog.MaxRampPeriod)
	}
	return floor, period
}

// rampPeriod is r's period, or the default.
func rampPeriod(r *Ramp) time.Duration {
	if r.Period == 0 {
		return catalog.DefaultRampPeriod
	}
	return r.Period
}

// sameSpec reports whether two specs configure the same buckets alike: a
// shared provider limit repeated on several endpoints.
func sameSpec(a, b Spec) bool {
	ar, br := a.Ramp, b.Ramp
	a.Ramp, b.Ramp = nil, nil
	ae, be := refundOf(a.RefundOnExpiry), refundOf(b.RefundOnExpiry)
	a.RefundOnExpiry, b.RefundOnExpiry = nil, nil
	if a != b || ae != be || (ar == nil) != (br == nil) {
		return false
	}
	return ar == nil || (ar.MaxIncrease == br.MaxIncrease && ar.Floor == br.Floor && rampPeriod(ar) == rampPeriod(br))
}

// specDefs is the buckets a valid spec gives: one by its window or
// concurrency, and one more for its ramp. Ids are left for the caller.
func specDefs(s Spec, floor float64, period int64) []def {
	var out []def
	base := def{scope: s.Scope, key: s.Key, unit: s.Unit, window: s.Window, source: s.Source, capacity: s.Capacity, burst: s.Burst,
		refund: refundOf(s.RefundOnExpiry)}
	switch {
	case s.Unit == UnitConcurrentRequests:
		base.rule = RuleConcurrency
		out = append(out, base)
	case s.Window == WindowDay:
		base.rule = RuleDailyReset
		base.period = day
		base.offset = int64(s.ResetAt)
		out = append(out, base)
	case s.Window != WindowNone:
		base.rule = RuleTokenBucket
		base.period = int64(s.Window.Duration())
		out = append(out, base)
	}
	if s.Ramp != nil {
		out = append(out, def{scope: s.Scope, key: s.Key, unit: s.Unit, rule: RuleRamp, source: s.Source,
			period: period, growth: 1 + s.Ramp.MaxIncrease, floor: floor, refund: refundOf(s.RefundOnExpiry)})
	}
	return out
}

// Account is the provider account a catalog endpoint is called with: its
// provider, its provider project (the organisation or project a spend limit
// and billing belong to) and the credential it names (a key the provider
// may disable on its own). Endpoints of different models share it when all
// three agree.
func Account(e catalog.Endpoint) string {
	project := e.ProviderProject
	if project == "" {
		project = e.Provider
	}
	return e.Provider + "|" + project + "|" + e.APIKeyEnv
}

// FromCatalog builds the broker configuration from a validated catalog:
//
//   - every endpoint's route names its provider account ([Account]);
//   - every endpoint becomes a Route whose Workspace and Project are its
//     provider's name (the catalog has no field for them yet);
//   - an endpoint limit is a model_route bucket keyed by the endpoint id, or,
//     with scope provider_project or provider_workspace, a bucket keyed by the
//     provider's name and so shared by every endpoint of that provider; the
//     same shared limit repeated on several endpoints is one bucket, and two
//     different values for it are an error;
//   - a tenant limit is a tenant bucket keyed by the tenant id, or, with scope
//     api_key, one bucket per API key of the tenant (each key gets the limit).
//     Other scopes on a tenant (app, partner, provider ones) need a key the
//     catalog cannot express yet and are an error;
//   - every workload class gets its contract (ClassesFromCatalog), and
//     every tenant its fair-share weight and burst.
//
// A configuration it returns is one New and Reconfigure take.
func FromCatalog(c *catalog.Catalog) (Config, error) {
	cfg := Config{Classes: ClassesFromCatalog(c)}
	var errs []error
	shared := map[string]Spec{} // by bucket id
	for _, m := range c.Models {
		for _, e := range m.Endpoints {
			r := Route{EndpointID: e.ID(m.ID), Model: m.ID, Provider: e.Provider,
				Project: e.ProviderProject, Workspace: e.ProviderWorkspace, Account: Account(e)}.withDefaults()
			cfg.Routes = append(cfg.Routes, r)
			errs = append(errs, endpointSpecs(&cfg, shared, m.ID, e, r)...)
		}
	}
	for _, t := range c.Tenants {
		errs = append(errs, tenantSpecs(&cfg, t)...)
		share := TenantShare{Tenant: t.ID, Weight: 1, Burst: t.Burst}
		if t.Weight != nil {
			share.Weight = *t.Weight
		}
		cfg.Tenants = append(cfg.Tenants, share)
	}
	for _, p := range c.Partners {
		for i, l := range p.Limits {
			s, err := specFromLimit(l, ScopePartner)
			if err != nil {
				errs = append(errs, fmt.Errorf("partners[%s].limits[%d]: %w", p.ID, i, err))
				continue
			}
			s.Scope, s.Key = ScopePartner, p.ID
			cfg.Buckets = append(cfg.Buckets, s)
		}
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	if _, err := defs(cfg.Buckets); err != nil {
		return Config{}, err
	}
	if _, err := newQueueConfig(cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// ClassesFromCatalog returns the contract of every workload class, the
// catalog's settings over the defaults (catalog.DefaultContracts), so each
// class has one whether or not the catalog names it.
func ClassesFromCatalog(c *catalog.Catalog) []ClassContract {
	ks := c.Contracts()
	out := make([]ClassContract, 0, len(ks))
	for _, k := range ks {
		cls, _ := ParseClass(k.Class)
		cc := ClassContract{Class: cls, MaxWait: k.MaxWait, MaxDepth: k.MaxDepth, FallbackModel: k.FallbackModel,
			Weight: k.Weight, RetryBudget: k.RetryBudget}
		if k.Overload == catalog.OverloadFallback {
			cc.Overload = OverloadFallback
		}
		if cc.RetryBudget == 0 {
			cc.RetryBudget = -1 // none; the broker reads 0 as unset
		}
		out = append(out, cc)
	}
	return out
}

// ParseClass maps a workload class's name (catalog.Classes) to its value.
func ParseClass(name string) (WorkloadClass, error) {
	switch name {
	case catalog.ClassInteractive:
		return ClassInteractive, nil
	case catalog.ClassBackground:
		return ClassBackground, nil
	case catalog.ClassPartner:
		return ClassPartner, nil
	case catalog.ClassBatch:
		return ClassBatch, nil
	}
	return ClassUnspecified, fmt.Errorf("%w: unknown workload class %q", ErrInvalid, name)
}

// endpointSpecs adds to cfg the buckets of endpoint e's limits, on route r;
// shared holds the provider buckets already added, by id.
func endpointSpecs(cfg *Config, shared map[string]Spec, model string, e catalog.Endpoint, r Route) []error {
	var errs []error
	for i, l := range e.Limits {
		path := fmt.Sprintf("models[%s].endpoints[%s].limits[%d]", model, e.Provider, i)
		s, err := specFromLimit(l, ScopeModelRoute)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		switch s.Scope {
		case ScopeModelRoute:
			s.Key = r.EndpointID
			cfg.Buckets = append(cfg.Buckets, s)
		case ScopeProviderProject, ScopeProviderWorkspace:
			s.Key = r.Project
			if s.Scope == ScopeProviderWorkspace {
				s.Key = r.Workspace
			}
			id := bucketID(s.Scope, s.Key, s.Unit, s.Window, RuleTokenBucket, SourceConfigured)
			if prev, ok := shared[id]; ok {
				if !sameSpec(prev, s) {
					errs = append(errs, fmt.Errorf("%s: %w: %s limit on %s differs from the one given on another endpoint", path, ErrInvalid, s.Scope, s.Key))
				}
				continue
			}
			shared[id] = s
			cfg.Buckets = append(cfg.Buckets, s)
		default:
			errs = append(errs, fmt.Errorf("%s: %w: scope %s is not an endpoint scope", path, ErrInvalid, s.Scope))
		}
	}
	return errs
}

// tenantSpecs adds to cfg the buckets of tenant t's limits.
func tenantSpecs(cfg *Config, t catalog.Tenant) []error {
	var errs []error
	for i, l := range t.Limits {
		path := fmt.Sprintf("tenants[%s].limits[%d]", t.ID, i)
		s, err := specFromLimit(l, ScopeTenant)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		switch s.Scope {
		case ScopeTenant:
			s.Key = t.ID
			cfg.Buckets = append(cfg.Buckets, s)
		case ScopeAPIKey:
			for _, h := range t.APIKeysSHA256 {
				s.Key = catalog.KeyID(h)
				cfg.Buckets = append(cfg.Buckets, s)
			}
		case ScopeApp:
			if l.ScopeKey == "" {
				errs = append(errs, fmt.Errorf("%s: %w: scope app needs scope_key", path, ErrInvalid))
				continue
			}
			s.Key = catalog.AppKey(t.ID, l.ScopeKey)
			cfg.Buckets = append(cfg.Buckets, s)
		default:
			errs = append(errs, fmt.Errorf("%s: %w: scope %s needs a key the catalog cannot give yet", path, ErrInvalid, s.Scope))
		}
	}
	return errs
}

// specFromLimit maps one catalog limit; the key is left for the caller.
func specFromLimit(l catalog.Limit, defaultScope Scope) (Spec, error) {
	u, err := ParseUnit(l.Unit)
	if err != nil {
		return Spec{}, err
	}
	w, err := ParseWindow(l.Per)
	if err != nil {
		return Spec{}, err
	}
	sc := defaultScope
	if l.Scope != "" {
		if sc, err = ParseScope(l.Scope); err != nil {
			return Spec{}, err
		}
	}
	s := Spec{Scope: sc, Unit: u, Window: w, Capacity: l.Capacity, Burst: l.Burst, RefundOnExpiry: l.RefundOnExpiry}
	if l.ResetAt != "" {
		if s.ResetAt, err = ParseResetAt(l.ResetAt); err != nil {
			return Spec{}, err
		}
	}
	if r := l.Ramp; r != nil {
		s.Ramp = &Ramp{MaxIncrease: r.MaxIncrease, Floor: r.Floor}
		if r.Period != "" {
			if s.Ramp.Period, err = time.ParseDuration(r.Period); err != nil {
				return Spec{}, fmt.Errorf("%w: ramp period %q", ErrInvalid, r.Period)
			}
		}
	}
	return s, nil
}

// ParseResetAt parses a daily reset time "HH:MM" or "HH:MM:SS" (UTC) into
// an offset from midnight, for the proposed catalog field reset_at.
func ParseResetAt(s string) (time.Duration, error) {
	for _, layout := range []string{"15:04", "15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second, nil
		}
	}
	return 0, fmt.Errorf("%w: reset time %q is not HH:MM (UTC)", ErrInvalid, s)
}

// sortRoutes orders routes by endpoint id, defaults applied, and keeps the
// first of duplicates.
func sortRoutes(rs []Route) []Route {
	out := make([]Route, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.withDefaults())
	}
	slices.SortStableFunc(out, func(a, b Route) int { return cmp.Compare(a.EndpointID, b.EndpointID) })
	return slices.CompactFunc(out, func(a, b Route) bool { return a.EndpointID == b.EndpointID })
}
