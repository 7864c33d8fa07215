package routing

import (
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/outcomes"
	"github.com/switchboard-ai/switchboard/services/decider/internal/stats"
)

type endpoint struct {
	id             string
	provider       string
	rates          catalog.Rates
	contextLength  int64
	maxOutput      int64 // largest output the endpoint produces; 0 when unknown
	quantization   string
	denyCollection bool
	zdr            bool
	params         map[string]bool
	region         string                  // where it serves, for the fallback policy; "" when unknown
	explicitCache  bool                    // caches what a request's breakpoints mark, and prices the writes (api: anthropic)
	proto          *switchboardv1.Endpoint // template without per-request fields; never mutated
	st             *stats.Endpoint         // resolved once, so Decide skips the map lookup
	oc             *outcomes.Endpoint      // likewise
}

type model struct {
	id        string
	endpoints []*endpoint
	ids       []string // endpoint ids, for the affinity lookup
	list      *catalog.Rates
	st        *stats.Model
	policy    Policy  // the catalog's routing.policy, "" for the deployment's
	timeValue float64 // routing.time_value_usd_per_hour, 0 to derive it
	margin    float64 // routing.competitive_margin, 0 for the default
	fallback  fallbackPolicy
}

// Index is the routing view of one catalog: its models, endpoints,
// providers and tenants' defaults, each bound once to its live statistics.
// Immutable once built; the decider's one catalog snapshot holds it
// (gate.Views), and a Router reads the current one on every call.
type Index struct {
	models map[string]*model
	// names resolves a client's model name (an id or an alias) to its id.
	names     *catalog.Resolver
	providers map[string]bool
	list      []*switchboardv1.Model
	tenants   map[string]tenantDefaults // tenants with default routing settings
}

// Sources are the live statistics an index binds the catalog's models and
// endpoints to.
type Sources struct {
	// Stats holds the measured speeds. (Optional) Defaults to a new store.
	Stats *stats.Store
	// Outcomes holds the endpoints' recent outcomes. (Optional) Defaults to a new tracker.
	Outcomes *outcomes.Tracker
	// Stamps dates each model's first listing (ListModels' create_time)
	// across the indexes built from it. (Optional) Defaults to stamping
	// every model of this index with the time it is built.
	Stamps *Stamps
}

// Stamps remembers when each model of the last index built was first
// listed: a model the previous catalog listed keeps its stamp, a new one
// (or one dropped and listed again) is stamped with the clock's time.
type Stamps struct {
	now  func() time.Time
	mu   sync.Mutex
	last map[string]*timestamppb.Timestamp
}

// NewStamps returns stamps taken from now. (Optional) now defaults to
// time.Now.
func NewStamps(now func() time.Time) *Stamps {
	if now == nil {
		now = time.Now
	}
	return &Stamps{now: now}
}

// of returns the stamps of c's models and keeps them for the next call.
func (s *Stamps) of(c *catalog.Catalog) map[string]*timestamppb.Timestamp {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := timestamppb.New(s.now())
	next := make(map[string]*timestamppb.Timestamp, len(c.Models))
	for _, m := range c.Models {
		if t := s.last[m.ID]; t != nil {
			next[m.ID] = t
		} else {
			next[m.ID] = now
		}
	}
	s.last = next
	return next
}

// NewIndex builds c's routing index, bound to src.
func NewIndex(c *catalog.Catalog, src Sources) *Index {
	if src.Stats == nil {
		src.Stats = stats.New(stats.Config{})
	}
	if src.Outcomes == nil {
		src.Outcomes = outcomes.New(outcomes.Config{})
	}
	if src.Stamps == nil {
		src.Stamps = NewStamps(nil)
	}
	created := src.Stamps.of(c)
	idx := &Index{
		models:    map[string]*model{},
		names:     c.Resolver(),
		providers: map[string]bool{},
		tenants:   tenantIndex(c),
	}
	for _, m := range c.Models {
		mm := &model{id: m.ID, st: src.Stats.Model(m.ID), policy: Policy(m.Routing.PolicyName()),
			timeValue: m.Routing.TimeValue(), margin: m.Routing.Margin(), fallback: newFallbackPolicy(m.Fallback)}
		lm := &switchboardv1.Model{Id: m.ID, Aliases: m.Aliases, CreateTime: created[m.ID]}
		if m.ListPrice != nil {
			lr := m.ListPrice.Rates()
			mm.list = &lr
			lm.ListPrice = &switchboardv1.Price{Input: lr.Input, CachedInput: lr.CachedInput, Output: lr.Output,
				CacheWrite: lr.CacheWrite, CacheWrite_1H: lr.CacheWrite1h}
		}
		for _, e := range m.Endpoints {
			rates := e.Price.Rates()
			ep := &endpoint{
				id:             e.ID(m.ID),
				provider:       e.Provider,
				rates:          rates,
				contextLength:  e.ContextLength,
				maxOutput:      e.MaxOutputTokens,
				quantization:   e.Quantization,
				denyCollection: e.DataCollection == "deny",
				zdr:            e.ZDR,
				region:         e.Region,
				explicitCache:  e.API == catalog.APIAnthropic,
				params:         map[string]bool{},
				st:             src.Stats.Endpoint(e.ID(m.ID)),
				oc:             src.Outcomes.Endpoint(e.ID(m.ID)),
			}
			for _, p := range e.SupportedParameters {
				ep.params[p] = true
			}
			ep.proto = &switchboardv1.Endpoint{
				Id:            ep.id,
				Provider:      e.Provider,
				BaseUrl:       e.BaseURL,
				UpstreamModel: e.UpstreamModel,
				ApiKeyEnv:     e.APIKeyEnv,
				Price: &switchboardv1.Price{Input: rates.Input, CachedInput: rates.CachedInput, Output: rates.Output,
					CacheWrite: rates.CacheWrite, CacheWrite_1H: rates.CacheWrite1h},
				Api:           endpointAPI(e.API),
				ContextLength: e.ContextLength,
				// Shared by every decision's copy (priced), never mutated.
				SupportedParameters: e.SupportedParameters,
			}
			mm.endpoints = append(mm.endpoints, ep)
			mm.ids = append(mm.ids, ep.id)
			idx.providers[e.Provider] = true
			lm.Providers = append(lm.Providers, e.Provider)
			lm.ContextLength = max(lm.ContextLength, e.ContextLength)
		}
		idx.models[m.ID] = mm
		idx.list = append(idx.list, lm)
	}
	slices.SortFunc(idx.list, func(a, b *switchboardv1.Model) int { return strings.Compare(a.Id, b.Id) })
	return idx
}

// Endpoint returns the catalog's endpoint by id: its model and rates.
func (idx *Index) Endpoint(id string) (modelID string, rates catalog.Rates, ok bool) {
	e, modelID := idx.find(id)
	if e == nil {
		return "", catalog.Rates{}, false
	}
	return modelID, e.rates, true
}

// Limits returns the catalog's context window and largest output of the
// endpoint id (each 0 when the catalog gives none); false when the catalog
// has no such endpoint.
func (idx *Index) Limits(id string) (contextLength, maxOutput int64, ok bool) {
	e, _ := idx.find(id)
	if e == nil {
		return 0, 0, false
	}
	return e.contextLength, e.maxOutput, true
}

// find returns the catalog's endpoint by id and its model id; nil when
// there is none.
func (idx *Index) find(id string) (*endpoint, string) {
	provider, modelID, found := strings.Cut(id, "/")
	if !found {
		return nil, ""
	}
	m := idx.models[modelID]
	if m == nil {
		return nil, ""
	}
	for _, e := range m.endpoints {
		if e.provider == provider {
			return e, modelID
		}
	}
	return nil, ""
}

// Resolve returns the id of the catalog model a client's model name (an
// id or an alias, without a routing suffix) means; false when none.
func (idx *Index) Resolve(name string) (id string, ok bool) { return idx.names.Resolve(name) }

// ListModels lists the catalog's models.
func (idx *Index) ListModels() []*switchboardv1.Model { return idx.list }

// Endpoint is [Index.Endpoint] of the current catalog.
func (r *Router) Endpoint(id string) (modelID string, rates catalog.Rates, ok bool) {
	return r.o.Catalog().Endpoint(id)
}

// Limits is [Index.Limits] of the current catalog.
func (r *Router) Limits(id string) (contextLength, maxOutput int64, ok bool) {
	return r.o.Catalog().Limits(id)
}

// Resolve is [Index.Resolve] of the current catalog.
func (r *Router) Resolve(name string) (id string, ok bool) { return r.o.Catalog().Resolve(name) }

// ListModels is [Index.ListModels] of the current catalog.
func (r *Router) ListModels() []*switchboardv1.Model { return r.o.Catalog().ListModels() }

// Models returns the catalog's models and their endpoints, for the prober.
func (r *Router) Models() []ModelEndpoints {
	idx := r.o.Catalog()
	out := make([]ModelEndpoints, 0, len(idx.models))
	for _, m := range idx.models {
		me := ModelEndpoints{Model: m.id}
		for _, e := range m.endpoints {
			me.Endpoints = append(me.Endpoints, e.proto)
		}
		out = append(out, me)
	}
	slices.SortFunc(out, func(a, b ModelEndpoints) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// ModelEndpoints is a model and its endpoints.
type ModelEndpoints struct {
	Model     string
	Endpoints []*switchboardv1.Endpoint
}

// endpointAPI is the catalog's endpoint API as the proto names it.
func endpointAPI(api string) switchboardv1.EndpointApi {
	if api == catalog.APIAnthropic {
		return switchboardv1.EndpointApi_ENDPOINT_API_ANTHROPIC
	}
	return switchboardv1.EndpointApi_ENDPOINT_API_OPENAI
}

// priced is est for this endpoint: the cache writes the request's
// breakpoints ask for count only where the endpoint caches by breakpoint.
func (e *endpoint) priced(est pricing.Request) pricing.Request {
	if !e.explicitCache {
		est.CacheBreakpointTokens, est.CacheBreakpoint1hTokens = 0, 0
	}
	return est
}
