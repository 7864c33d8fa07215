package loadtest

import (
	"fmt"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
)

// limit is one configured limit the harness checks from outside.
type limit struct {
	unit     string  // requests, input_tokens, output_tokens, total_tokens
	per      string  // second, minute, day
	capacity float64 // per window
	burst    float64
	scope    string // empty: the default of where it is written
}

func (l limit) yaml() string {
	s := fmt.Sprintf("{unit: %s, per: %s, capacity: %g", l.unit, l.per, l.capacity)
	if l.burst > 0 {
		s += fmt.Sprintf(", burst: %g", l.burst)
	}
	if l.scope != "" {
		s += ", scope: " + l.scope
	}
	return s + "}"
}

// window is the length of the limit's window.
func (l limit) window() time.Duration {
	switch l.per {
	case "second":
		return time.Second
	case "minute":
		return time.Minute
	case "hour":
		return time.Hour
	default:
		return 24 * time.Hour
	}
}

// bound is the most the limit may admit over a span of length d that starts
// with the bucket at any level: all of capacity plus burst at once, then
// the steady refill over d. A daily limit does not refill: its bound is
// for a span that crosses no reset (dailyResets counts them).
func (l limit) bound(d time.Duration) float64 {
	full := l.capacity + l.burst
	if l.per == "day" {
		return full
	}
	return full + l.capacity*d.Seconds()/l.window().Seconds()
}

// dailyResets is how many times 00:00 UTC falls in (from, to].
func dailyResets(from, to time.Time) int {
	day := func(t time.Time) int64 { return t.UTC().Unix() / 86400 }
	if !to.After(from) {
		return 0
	}
	return int(day(to) - day(from))
}

func (l limit) String() string {
	s := fmt.Sprintf("%g %s/%s", l.capacity, l.unit, l.per)
	if l.burst > 0 {
		s += fmt.Sprintf(" +%g burst", l.burst)
	}
	return s
}

// endpoint is one catalog endpoint: a simulated provider serving the
// scenario's upstream model.
type endpoint struct {
	provider string
	project  string // provider_project; empty: the provider's name
	price    [3]float64
	limits   []limit
}

// model is one catalog model, used by one scenario, so that the
// simulator's per-model counters are that scenario's traffic alone.
type model struct {
	id        string // catalog id, vendor/<upstream>
	upstream  string
	endpoints []endpoint
}

// tenant is one catalog tenant with its API key and the workload class
// its clients send.
type tenant struct {
	id     string
	key    string
	class  string
	weight float64
	limits []limit
}

// simModel is one provider's configuration of one upstream model.
type simModel struct {
	provider string
	yaml     string // the model's YAML, without its id
}

// plan is everything configured for a run: the simulator's providers, the
// catalog and what the scenarios know about them.
type plan struct {
	classes bool
	models  []model
	tenants []tenant
	sim     []simModel // in provider order of first appearance
}

func (p *plan) tenant(id string) *tenant {
	for i := range p.tenants {
		if p.tenants[i].id == id {
			return &p.tenants[i]
		}
	}
	panic("loadtest: no tenant " + id) // a programming error of the scenario table
}

func (p *plan) model(id string) *model {
	for i := range p.models {
		if p.models[i].id == id {
			return &p.models[i]
		}
	}
	panic("loadtest: no model " + id)
}

// providerNames lists the simulated providers.
func (p *plan) providerNames() []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range p.sim {
		if !seen[m.provider] {
			seen[m.provider] = true
			out = append(out, m.provider)
		}
	}
	return out
}

// simYAML is the simulator's configuration, seeded for reproducible
// faults: each provider on its address in listen, or a free loopback port.
func (p *plan) simYAML(listen map[string]string) string {
	var b strings.Builder
	b.WriteString("seed: 11\nproviders:\n")
	var order []string
	byProvider := map[string][]simModel{}
	for _, m := range p.sim {
		if _, ok := byProvider[m.provider]; !ok {
			order = append(order, m.provider)
		}
		byProvider[m.provider] = append(byProvider[m.provider], m)
	}
	for _, name := range order {
		addr := listen[name]
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		fmt.Fprintf(&b, "  - name: %s\n    listen: %s\n    models:\n", name, addr)
		for _, m := range byProvider[name] {
			b.WriteString(m.yaml)
		}
	}
	return b.String()
}

// classContracts are the workload-class contracts written into the
// catalog with --classes: waits short enough for a run of minutes.
const classContracts = `workload_classes:
  interactive: {max_wait: 2s, max_depth: 64, weight: 4, retry_budget: 2}
  partner: {max_wait: 5s, max_depth: 256, weight: 3, retry_budget: 2}
  background: {max_wait: 10s, max_depth: 10000, weight: 2, retry_budget: 5}
  batch: {max_wait: 20s, max_depth: 100000, weight: 1, retry_budget: 10}
`

// classWeight are the weights of classContracts.
var classWeight = map[string]float64{"interactive": 4, "partner": 3, "background": 2, "batch": 1}

// catalogYAML is the catalog, with the simulated providers at urls.
func (p *plan) catalogYAML(urls map[string]string) string {
	var b strings.Builder
	b.WriteString("models:\n")
	for _, m := range p.models {
		fmt.Fprintf(&b, "  - id: %s\n    endpoints:\n", m.id)
		for _, e := range m.endpoints {
			fmt.Fprintf(&b, "      - provider: %s\n        base_url: %s\n        upstream_model: %s\n", e.provider, urls[e.provider], m.upstream)
			fmt.Fprintf(&b, "        price: {input: %g, cached_input: %g, output: %g}\n", e.price[0], e.price[1], e.price[2])
			if e.project != "" {
				fmt.Fprintf(&b, "        provider_project: %s\n", e.project)
			}
			writeLimits(&b, "        ", e.limits)
		}
	}
	b.WriteString("tenants:\n")
	for _, t := range p.tenants {
		fmt.Fprintf(&b, "  - id: %s\n    api_keys_sha256: [%s]\n", t.id, catalog.HashKey(t.key))
		if p.classes {
			b.WriteString("    classes: [interactive, background, partner, batch]\n")
			if t.weight > 0 {
				fmt.Fprintf(&b, "    weight: %g\n", t.weight)
			}
		}
		writeLimits(&b, "    ", t.limits)
	}
	if p.classes {
		b.WriteString(classContracts)
	}
	fmt.Fprintf(&b, "callers:\n  - {id: edges, role: edge, tokens_sha256: [%s]}\n  - {id: deciders, role: replica, tokens_sha256: [%s]}\n",
		catalog.HashKey(edgeCallerToken), catalog.HashKey(replicaCallerToken))
	return b.String()
}

func writeLimits(b *strings.Builder, indent string, ls []limit) {
	if len(ls) == 0 {
		return
	}
	b.WriteString(indent + "limits:\n")
	for _, l := range ls {
		b.WriteString(indent + "  - " + l.yaml() + "\n")
	}
}
