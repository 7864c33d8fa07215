package catalog

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// The workload classes a request may be admitted as. Each has its own
// admission queue contract (WorkloadClass): how long a request may wait for
// capacity, how many may wait, and what happens beyond.
const (
	// ClassInteractive is a user waiting on the answer: a short wait, a
	// small queue, a predictable refusal (or a cheaper model) beyond.
	ClassInteractive = "interactive"
	// ClassBackground is production work nobody watches as it runs: a
	// longer wait and a deep queue.
	ClassBackground = "background"
	// ClassPartner is a partner's traffic: its own queue, so a partner's
	// waiting requests never delay another tenant's interactive ones.
	ClassPartner = "partner"
	// ClassBatch is bulk work that can be run late: the longest wait and
	// the deepest queue.
	ClassBatch = "batch"
)

// Classes are the workload classes, in the order of their proto numbers.
var Classes = []string{ClassInteractive, ClassBackground, ClassPartner, ClassBatch}

// Overload actions: what a class does with a request it cannot admit
// within its wait.
const (
	// OverloadReject refuses it (429 with Retry-After, or 503 when the
	// provider said it is overloaded).
	OverloadReject = "reject"
	// OverloadFallback serves it with the class's fallback_model instead.
	OverloadFallback = "fallback"
)

// OverloadActions are the valid overload actions.
var OverloadActions = []string{OverloadReject, OverloadFallback}

// maxClassWait bounds a class's max_wait: a request is an HTTP call held
// open while it waits, and no client waits longer than this on one.
const maxClassWait = 24 * time.Hour

// WorkloadClass is a class's admission contract as the catalog writes it,
// under workload_classes.<name>. Every field is optional: an unset one
// keeps the class's default (DefaultContracts).
type WorkloadClass struct {
	// MaxWait is how long a request may wait for capacity in the class's
	// queue before it is refused, e.g. "2s" or "30m"; "0s" never waits.
	MaxWait string `yaml:"max_wait"`
	// MaxDepth is how many requests of the class may wait at once, across
	// tenants; one more is refused at once. 0 never queues.
	MaxDepth *int `yaml:"max_depth"`
	// Overload is reject or fallback: what a full queue or a passed wait does.
	Overload string `yaml:"overload"`
	// FallbackModel is the catalog model a request is served with instead
	// when the overload action is fallback. (Required with overload: fallback)
	FallbackModel string `yaml:"fallback_model"`
	// Weight is the class's share of contended capacity relative to the
	// other classes (> 0).
	Weight *float64 `yaml:"weight"`
	// RetryBudget is how many retries (attempts beyond the first) one
	// request of the class may make across providers.
	RetryBudget *int `yaml:"retry_budget"`
}

// Contract is a class's admission contract with every default applied.
type Contract struct {
	// Class is the class's name (Classes).
	Class string
	// MaxWait is the longest wait in the class's queue; 0 never waits.
	MaxWait time.Duration
	// MaxDepth is how many requests may wait at once; 0 never queues.
	MaxDepth int
	// Overload is OverloadReject or OverloadFallback.
	Overload string
	// FallbackModel is the model OverloadFallback serves instead.
	FallbackModel string
	// Weight is the class's fair-share weight.
	Weight float64
	// RetryBudget is how many retries one request may make.
	RetryBudget int
}

// DefaultContracts are the classes' contracts when the catalog says
// nothing of them, in the order of Classes:
//
//	class        max_wait  max_depth  weight  retry_budget  overload
//	interactive  2s        64         4       2             reject
//	background   2m        10000      2       5             reject
//	partner      10s       256        3       2             reject
//	batch        30m       100000     1       10            reject
//
// An interactive request waits about as long as a person tolerates before
// an answer starts, and its queue is short so that what waits can still be
// served in that time. Background work rides out a provider's rate-limit
// window (a minute) with room to spare. A partner gets a wait in between
// and a queue of its own. Batch work is worth running late rather than
// not at all. Weights favour what someone waits for; retries grow with
// the wait a class can afford.
func DefaultContracts() []Contract {
	return []Contract{
		{Class: ClassInteractive, MaxWait: 2 * time.Second, MaxDepth: 64, Overload: OverloadReject, Weight: 4, RetryBudget: 2},
		{Class: ClassBackground, MaxWait: 2 * time.Minute, MaxDepth: 10_000, Overload: OverloadReject, Weight: 2, RetryBudget: 5},
		{Class: ClassPartner, MaxWait: 10 * time.Second, MaxDepth: 256, Overload: OverloadReject, Weight: 3, RetryBudget: 2},
		{Class: ClassBatch, MaxWait: 30 * time.Minute, MaxDepth: 100_000, Overload: OverloadReject, Weight: 1, RetryBudget: 10},
	}
}

// Contracts returns every class's contract, the catalog's settings over
// the defaults, in the order of Classes. Call it on a validated catalog.
func (c *Catalog) Contracts() []Contract {
	out := DefaultContracts()
	for i := range out {
		wc, ok := c.WorkloadClasses[out[i].Class]
		if !ok {
			continue
		}
		k := &out[i]
		if wc.MaxWait != "" {
			k.MaxWait, _ = time.ParseDuration(wc.MaxWait)
		}
		if wc.MaxDepth != nil {
			k.MaxDepth = *wc.MaxDepth
		}
		if wc.Overload != "" {
			k.Overload = wc.Overload
		}
		k.FallbackModel = wc.FallbackModel
		if wc.Weight != nil {
			k.Weight = *wc.Weight
		}
		if wc.RetryBudget != nil {
			k.RetryBudget = *wc.RetryBudget
		}
	}
	return out
}

// Contract returns the contract of the class named name, or false for a
// name that is not a class.
func (c *Catalog) Contract(name string) (Contract, bool) {
	for _, k := range c.Contracts() {
		if k.Class == name {
			return k, true
		}
	}
	return Contract{}, false
}

// APIKey is an API key given with the workload class its requests are
// admitted as when they ask for none.
type APIKey struct {
	// SHA256 is the lowercase hex SHA-256 digest of the key. (Required)
	SHA256 string `yaml:"sha256"`
	// Class is the key's workload class. (Optional) Defaults to the
	// tenant's default_class.
	Class string `yaml:"class"`
}

// AllowedClasses returns the classes the tenant's requests may be admitted
// as: its classes, or by default every class but partner, and partner too
// when the tenant belongs to a partner.
func (t Tenant) AllowedClasses() []string {
	if len(t.Classes) > 0 {
		return t.Classes
	}
	if t.Partner != "" {
		return Classes
	}
	return []string{ClassInteractive, ClassBackground, ClassBatch}
}

// DefaultClassOf returns the class a request of the tenant made with the
// key of digest keySHA256 is admitted as when it asks for none: the key's
// class, else the tenant's default_class, else interactive.
func (t Tenant) DefaultClassOf(keySHA256 string) string {
	for _, k := range t.APIKeys {
		if k.SHA256 == keySHA256 && k.Class != "" {
			return k.Class
		}
	}
	if t.DefaultClass != "" {
		return t.DefaultClass
	}
	return ClassInteractive
}

// validateClasses checks workload_classes; models are the catalog's model
// ids, which a fallback_model must name.
func validateClasses(wcs map[string]WorkloadClass, models *Resolver, bad func(string, string, ...any)) {
	names := make([]string, 0, len(wcs))
	for name := range wcs {
		names = append(names, name)
	}
	slices.Sort(names) // problems reported in a stable order
	for _, name := range names {
		wc := wcs[name]
		p := "workload_classes." + name
		if !oneOf(name, Classes) {
			bad(p, "%q is not a workload class: use %s", name, list(Classes))
			continue
		}
		if wc.MaxWait != "" {
			if d, err := time.ParseDuration(wc.MaxWait); err != nil || d < 0 || d > maxClassWait {
				bad(p+".max_wait", "%q must be a duration between 0s and %s, such as 2s or 30m", wc.MaxWait, maxClassWait)
			}
		}
		if wc.MaxDepth != nil && *wc.MaxDepth < 0 {
			bad(p+".max_depth", "must not be negative (0 never queues)")
		}
		if wc.Overload != "" && !oneOf(wc.Overload, OverloadActions) {
			bad(p+".overload", "%q must be one of %s", wc.Overload, list(OverloadActions))
		}
		switch {
		case wc.Overload == OverloadFallback && wc.FallbackModel == "":
			bad(p+".fallback_model", "is required with overload: fallback")
		case wc.FallbackModel != "" && wc.Overload != OverloadFallback:
			bad(p+".fallback_model", "is used only with overload: fallback; set it, or remove fallback_model")
		case wc.FallbackModel != "" && !resolves(models, wc.FallbackModel):
			bad(p+".fallback_model", "%q is not a model of this catalog (nor an alias of one)", wc.FallbackModel)
		}
		if w := wc.Weight; w != nil && (!(*w > 0) || math.IsInf(*w, 0)) {
			bad(p+".weight", "must be a positive number")
		}
		if r := wc.RetryBudget; r != nil && (*r < 0 || *r > 100) {
			bad(p+".retry_budget", "must be between 0 and 100")
		}
	}
}

// validateTenantClasses checks a tenant's fair share, its classes, its
// default class and its keys' classes; tp is the tenant's path.
func validateTenantClasses(t Tenant, tp string, bad func(string, string, ...any)) {
	if t.Weight != nil && (!(*t.Weight > 0) || math.IsInf(*t.Weight, 0)) {
		bad(tp+".weight", "must be a positive number")
	}
	if t.Burst < 0 || math.IsNaN(t.Burst) || math.IsInf(t.Burst, 0) {
		bad(tp+".burst", "must be a non-negative number of requests")
	}
	seen := map[string]bool{}
	for i, cl := range t.Classes {
		cp := fmt.Sprintf("%s.classes[%d]", tp, i)
		switch {
		case !oneOf(cl, Classes):
			bad(cp, "%q must be one of %s", cl, list(Classes))
		case seen[cl]:
			bad(cp, "%q is listed twice", cl)
		}
		seen[cl] = true
	}
	allowed := t.AllowedClasses()
	if t.DefaultClass != "" {
		switch {
		case !oneOf(t.DefaultClass, Classes):
			bad(tp+".default_class", "%q must be one of %s", t.DefaultClass, list(Classes))
		case !slices.Contains(allowed, t.DefaultClass):
			bad(tp+".default_class", "%q is not among the tenant's classes (%s)", t.DefaultClass, list(allowed))
		}
	} else if !slices.Contains(allowed, ClassInteractive) {
		bad(tp+".default_class", "is required: the default, interactive, is not among the tenant's classes (%s)", list(allowed))
	}
	for i, k := range t.APIKeys {
		if k.Class == "" {
			continue
		}
		kp := fmt.Sprintf("%s.api_keys[%d].class", tp, i)
		switch {
		case !oneOf(k.Class, Classes):
			bad(kp, "%q must be one of %s", k.Class, list(Classes))
		case !slices.Contains(allowed, k.Class):
			bad(kp, "%q is not among the tenant's classes (%s)", k.Class, list(allowed))
		}
	}
}

func resolves(r *Resolver, name string) bool {
	_, ok := r.Resolve(name)
	return ok
}
