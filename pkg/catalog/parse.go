package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Error is one problem found in a catalog, located by line and field path.
type Error struct {
	// Line is the 1-based line of the offending field, 0 if unknown.
	Line int
	// Field is the field's path, e.g. models[0].endpoints[1].price.input.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error implements [error.Error].
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Msg)
}

// Parse parses and validates a catalog. It reports every problem at once,
// joined, each as an *Error naming its line and field.
func Parse(data []byte) (*Catalog, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	if len(root.Content) == 0 {
		return nil, &Error{Field: "catalog", Msg: "is empty"}
	}
	p := &positions{lines: map[string]int{}}
	p.walk(root.Content[0], reflect.TypeOf(Catalog{}), "")
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	var c Catalog
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	if errs := c.validate(p.lines); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c.applyDefaults()
	return &c, nil
}

// positions records the line of every field path, and unknown fields, by
// walking the YAML tree against the Go types. yaml.v3 reports lines for type
// errors but not for values that are well-typed yet invalid, hence the walk.
type positions struct {
	lines map[string]int
	errs  []error
}

func (p *positions) walk(n *yaml.Node, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode {
		// Aliases are not followed: a self-referencing alias would never end,
		// and the decoder checks what they point at.
		return
	}
	p.lines[path] = n.Line
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return // the decoder reports the type error with its line
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name != "" && name != "-" {
				fields[name] = f.Type
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := join(path, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				p.errs = append(p.errs, &Error{Line: k.Line, Field: child, Msg: "unknown field"})
				continue
			}
			p.walk(v, ft, child)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode || t.Key().Kind() != reflect.String {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := join(path, k.Value)
			p.lines[child] = k.Line
			p.walk(v, t.Elem(), child)
			p.lines[child] = k.Line // the entry is where its name is
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, c := range n.Content {
			p.walk(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// line returns the line of path, or of its nearest recorded parent.
func line(lines map[string]int, path string) int {
	for path != "" {
		if l, ok := lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

func (c *Catalog) validate(lines map[string]int) []error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, &Error{Line: line(lines, path), Field: path, Msg: fmt.Sprintf(format, args...)})
	}
	if len(c.Models) == 0 {
		bad("models", "at least one model is required")
	}
	models := map[string]string{}
	for i, m := range c.Models {
		mp := fmt.Sprintf("models[%d]", i)
		switch {
		case m.ID == "":
			bad(mp+".id", "is required")
		case strings.ContainsAny(m.ID, " \t\n:"):
			bad(mp+".id", "%q must not contain spaces or ':' (':' starts a routing suffix such as :floor)", m.ID)
		case models[m.ID] != "":
			bad(mp+".id", "%q is already defined at %s", m.ID, models[m.ID])
		default:
			models[m.ID] = mp
		}
		if m.ListPrice != nil {
			validatePrice(*m.ListPrice, mp+".list_price", bad)
		}
		validateModelRouting(m.Routing, mp+".routing", bad)
		validateFallback(m, mp, bad)
		if len(m.Endpoints) == 0 {
			bad(mp+".endpoints", "at least one endpoint is required")
		}
		providers := map[string]bool{}
		for j, e := range m.Endpoints {
			ep := fmt.Sprintf("%s.endpoints[%d]", mp, j)
			switch {
			case e.Provider == "":
				bad(ep+".provider", "is required")
			case !providerName.MatchString(e.Provider):
				bad(ep+".provider", "%q must be lowercase letters, digits, '-' or '_'", e.Provider)
			case providers[e.Provider]:
				bad(ep+".provider", "%q already serves this model", e.Provider)
			}
			providers[e.Provider] = true
			if e.BaseURL == "" {
				bad(ep+".base_url", "is required")
			} else if err := validURL(e.BaseURL); err != nil {
				bad(ep+".base_url", "%v", err)
			}
			if e.APIKeyEnv != "" && !ValidProviderKeyName(e.APIKeyEnv) {
				bad(ep+".api_key_env", "%q (endpoint %s) must be %s followed by A-Z, 0-9 or _: edges read no other credential",
					e.APIKeyEnv, e.ID(m.ID), ProviderKeyPrefix)
			}
			if e.API != "" && !slices.Contains(APIs, e.API) {
				bad(ep+".api", "%q must be one of %s", e.API, strings.Join(APIs, ", "))
			}
			validatePrice(e.Price, ep+".price", bad)
			if e.ContextLength < 0 {
				bad(ep+".context_length", "must not be negative")
			}
			if e.MaxOutputTokens < 0 {
				bad(ep+".max_output_tokens", "must not be negative")
			}
			if e.DataCollection != "" && e.DataCollection != "allow" && e.DataCollection != "deny" {
				bad(ep+".data_collection", "%q must be allow or deny", e.DataCollection)
			}
			validateLimits(e.Limits, ep+".limits", bad)
		}
	}
	keys := map[string]string{}
	keyIDs := map[string]string{} // by KeyID, which keys an api_key bucket
	tenants := map[string]bool{}
	for i, t := range c.Tenants {
		tp := fmt.Sprintf("tenants[%d]", i)
		switch {
		case t.ID == "":
			bad(tp+".id", "is required")
		case tenants[t.ID]:
			bad(tp+".id", "%q is already defined", t.ID)
		}
		tenants[t.ID] = true
		if len(t.APIKeysSHA256) == 0 && len(t.APIKeys) == 0 {
			bad(tp+".api_keys_sha256", "at least one key digest is required (here or under api_keys)")
		}
		checkKey := func(kp, k string) {
			switch {
			case !sha256Hex.MatchString(k):
				bad(kp, "must be 64 lowercase hex digits (sha256 of the key, e.g. `printf %%s \"$KEY\" | sha256sum`)")
			case keys[k] != "":
				bad(kp, "key is already used by %s", keys[k])
			case keyIDs[KeyID(k)] != "":
				bad(kp, "key id %s (the digest's first 12 hex digits) is already another key's, at %s", KeyID(k), keyIDs[KeyID(k)])
			default:
				keys[k] = tp
				keyIDs[KeyID(k)] = kp
			}
		}
		for j, k := range t.APIKeysSHA256 {
			checkKey(fmt.Sprintf("%s.api_keys_sha256[%d]", tp, j), k)
		}
		for j, k := range t.APIKeys {
			checkKey(fmt.Sprintf("%s.api_keys[%d].sha256", tp, j), k.SHA256)
		}
		validateTenantClasses(t, tp, bad)
		validateLimits(t.Limits, tp+".limits", bad)
		validateTenantRouting(t.Routing, tp+".routing", bad)
		for j, l := range t.Limits {
			lp := fmt.Sprintf("%s.limits[%d]", tp, j)
			switch l.Scope {
			case "", "tenant", "api_key":
			case "app":
				if l.ScopeKey == "" {
					bad(lp+".scope_key", "is required with scope app: \"<app>\" or \"<app>/<environment>\"")
				}
			default:
				bad(lp+".scope", "%q is not a tenant scope: use tenant, api_key or app (partner limits go under partners)", l.Scope)
			}
		}
	}
	partners := map[string]bool{}
	for i, p := range c.Partners {
		pp := fmt.Sprintf("partners[%d]", i)
		switch {
		case p.ID == "":
			bad(pp+".id", "is required")
		case partners[p.ID]:
			bad(pp+".id", "%q is already defined", p.ID)
		}
		partners[p.ID] = true
		validateLimits(p.Limits, pp+".limits", bad)
		for j, l := range p.Limits {
			if l.Scope != "" && l.Scope != "partner" {
				bad(fmt.Sprintf("%s.limits[%d].scope", pp, j), "%q: partner limits have scope partner", l.Scope)
			}
		}
	}
	for i, t := range c.Tenants {
		if t.Partner != "" && !partners[t.Partner] {
			bad(fmt.Sprintf("tenants[%d].partner", i), "%q is not a partner (add it under partners)", t.Partner)
		}
	}
	c.validateBuckets(bad)
	validateAliases(c.Models, models, lines, bad)
	validateCallers(c.Callers, tenants, bad)
	validateClasses(c.WorkloadClasses, c.Resolver(), bad)
	for i, m := range c.Models {
		for j, e := range m.Endpoints {
			for k, l := range e.Limits {
				switch l.Scope {
				case "", "model_route", "provider_project", "provider_workspace":
				default:
					bad(fmt.Sprintf("models[%d].endpoints[%d].limits[%d].scope", i, j, k), "%q is not an endpoint scope: use model_route, provider_project or provider_workspace", l.Scope)
				}
			}
		}
	}
	return errs
}

func validateCallers(cs []Caller, tenants map[string]bool, bad func(string, string, ...any)) {
	ids := map[string]string{}
	tokens := map[string]string{}
	for i, c := range cs {
		cp := fmt.Sprintf("callers[%d]", i)
		switch {
		case c.ID == "":
			bad(cp+".id", "is required")
		case ids[c.ID] != "":
			bad(cp+".id", "%q is already defined at %s", c.ID, ids[c.ID])
		default:
			ids[c.ID] = cp
		}
		if !oneOf(c.Role, Roles) {
			bad(cp+".role", "%q must be one of %s", c.Role, list(Roles))
		}
		switch {
		case c.Role == RoleService && len(c.Tenants) == 0:
			bad(cp+".tenants", "a service caller must name the tenants it acts for (or [\"*\"] for every tenant)")
		case c.Role != RoleService && len(c.Tenants) > 0:
			bad(cp+".tenants", "only a service caller has tenants; a %s caller is not limited to tenants", c.Role)
		}
		if c.SharedProviderState && c.Role != RoleService {
			bad(cp+".shared_provider_state", "only a service caller takes it; a %s caller's reports are trusted for every tenant or move no provider state", c.Role)
		}
		for j, t := range c.Tenants {
			if t != AllTenants && !tenants[t] {
				bad(fmt.Sprintf("%s.tenants[%d]", cp, j), "%q is not a tenant (add it under tenants, or use \"*\" for every tenant)", t)
			}
		}
		for j, k := range c.TokensSHA256 {
			kp := fmt.Sprintf("%s.tokens_sha256[%d]", cp, j)
			switch {
			case !sha256Hex.MatchString(k):
				bad(kp, "must be 64 lowercase hex digits (sha256 of the token, e.g. `printf %%s \"$TOKEN\" | sha256sum`)")
			case tokens[k] != "":
				bad(kp, "token is already used by %s: every caller needs its own token", tokens[k])
			default:
				tokens[k] = cp
			}
		}
	}
}

func validatePrice(p Price, path string, bad func(string, string, ...any)) {
	check := func(v *float64, field string, required bool) {
		switch {
		case v == nil && required:
			bad(path+"."+field, "is required")
		case v == nil:
		case math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0:
			bad(path+"."+field, "must be a non-negative number of USD per million tokens")
		}
	}
	check(p.Input, "input", true)
	check(p.CachedInput, "cached_input", false)
	check(p.Output, "output", true)
	check(p.CacheWrite, "cache_write", false)
	check(p.CacheWrite1h, "cache_write_1h", false)
}

func validateLimits(ls []Limit, path string, bad func(string, string, ...any)) {
	for i, l := range ls {
		lp := fmt.Sprintf("%s[%d]", path, i)
		if !oneOf(l.Unit, Units) {
			bad(lp+".unit", "%q must be one of %s", l.Unit, list(Units))
		}
		switch {
		case l.Unit == "concurrent_requests" && l.Per != "":
			bad(lp+".per", "concurrent_requests has no window")
		case l.Unit != "concurrent_requests" && !oneOf(l.Per, Windows):
			bad(lp+".per", "%q must be one of %s", l.Per, list(Windows))
		}
		if !(l.Capacity > 0) || math.IsInf(l.Capacity, 0) {
			bad(lp+".capacity", "must be a positive number")
		}
		if l.Burst < 0 || math.IsNaN(l.Burst) || math.IsInf(l.Burst, 0) {
			bad(lp+".burst", "must not be negative")
		}
		if l.Scope != "" && !oneOf(l.Scope, Scopes) {
			bad(lp+".scope", "%q must be one of %s", l.Scope, list(Scopes))
		}
		if l.ResetAt != "" {
			if l.Per != "day" {
				bad(lp+".reset_at", "only a per: day limit has a reset time")
			} else if _, err := time.Parse("15:04", l.ResetAt); err != nil {
				bad(lp+".reset_at", "%q must be a UTC time of day, HH:MM", l.ResetAt)
			}
		}
		if l.Ramp != nil {
			validateRamp(l, lp, bad)
		}
	}
}

func (c *Catalog) applyDefaults() {
	for i := range c.Models {
		m := &c.Models[i]
		for j := range m.Endpoints {
			e := &m.Endpoints[j]
			if e.UpstreamModel == "" {
				e.UpstreamModel = m.ID
			}
			if e.DataCollection == "" {
				e.DataCollection = "allow"
			}
			if e.API == "" {
				e.API = APIOpenAI
			}
			for k := range e.Limits {
				if e.Limits[k].Scope == "" {
					e.Limits[k].Scope = "model_route"
				}
			}
		}
	}
	for i := range c.Tenants {
		t := &c.Tenants[i]
		for _, k := range t.APIKeys {
			t.APIKeysSHA256 = append(t.APIKeysSHA256, k.SHA256)
		}
		for k := range c.Tenants[i].Limits {
			if c.Tenants[i].Limits[k].Scope == "" {
				c.Tenants[i].Limits[k].Scope = "tenant"
			}
		}
	}
	// A fallback model named by an alias is stored as its id, which is
	// what every decision and reservation names.
	names := c.Resolver()
	for name, wc := range c.WorkloadClasses {
		if id, ok := names.Resolve(wc.FallbackModel); ok {
			wc.FallbackModel = id
			c.WorkloadClasses[name] = wc
		}
	}
	for i := range c.Partners {
		for k := range c.Partners[i].Limits {
			c.Partners[i].Limits[k].Scope = "partner"
		}
	}
	for i := range c.Models {
		for j := range c.Models[i].Endpoints {
			e := &c.Models[i].Endpoints[j]
			if e.ProviderProject == "" {
				e.ProviderProject = e.Provider
			}
			if e.ProviderWorkspace == "" {
				e.ProviderWorkspace = e.Provider
			}
		}
	}
}
