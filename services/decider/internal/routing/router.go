// Package routing answers Decide: it resolves who is asking, filters a model's
// endpoints by the caller's routing options, prices this exact request on each
// endpoint and orders them. Everything it reads is an immutable index built
// from the catalog, swapped atomically, so Decide never takes a lock.
package routing

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	pb "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// DefaultOutputTokens is the output priced when a request sets no max_tokens.
const DefaultOutputTokens = 256

// Kind classifies a routing error for the RPC boundary.
type Kind int

// The kinds of routing error.
const (
	KindUnauthenticated Kind = iota + 1 // unknown or missing API key
	KindNotFound                        // unknown model
	KindInvalid                         // malformed routing options or a prompt that fits no endpoint
	KindUnavailable                     // no endpoint can take the request
)

// Error is a routing error with a message written for the end user.
type Error struct {
	Kind Kind
	Msg  string
}

// Error implements [error.Error].
func (e *Error) Error() string { return e.Msg }

func errorf(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

type keyInfo struct {
	tenant, keyID string
}

type endpoint struct {
	id             string
	provider       string
	rates          catalog.Rates
	contextLength  int64
	quantization   string
	denyCollection bool
	zdr            bool
	params         map[string]bool
	proto          *pb.Endpoint // template without per-request fields
}

type model struct {
	id        string
	endpoints []*endpoint
}

type index struct {
	models    map[string]*model
	keys      map[string]keyInfo
	tenants   map[string]bool
	providers map[string]bool
	list      []*pb.Model
}

// Router answers Decide and ListModels from the current catalog.
type Router struct {
	idx atomic.Pointer[index]
}

// New returns a router serving c.
func New(c *catalog.Catalog) *Router {
	r := &Router{}
	r.SetCatalog(c)
	return r
}

// SetCatalog replaces the catalog; requests in flight finish on the old one.
func (r *Router) SetCatalog(c *catalog.Catalog) {
	idx := &index{
		models:    map[string]*model{},
		keys:      map[string]keyInfo{},
		tenants:   map[string]bool{},
		providers: map[string]bool{},
	}
	for _, m := range c.Models {
		mm := &model{id: m.ID}
		lm := &pb.Model{Id: m.ID}
		if m.ListPrice != nil {
			lr := m.ListPrice.Rates()
			lm.ListPrice = &pb.Price{Input: lr.Input, CachedInput: lr.CachedInput, Output: lr.Output}
		}
		for _, e := range m.Endpoints {
			rates := e.Price.Rates()
			ep := &endpoint{
				id:             e.ID(m.ID),
				provider:       e.Provider,
				rates:          rates,
				contextLength:  e.ContextLength,
				quantization:   e.Quantization,
				denyCollection: e.DataCollection == "deny",
				zdr:            e.ZDR,
				params:         map[string]bool{},
			}
			for _, p := range e.SupportedParameters {
				ep.params[p] = true
			}
			ep.proto = &pb.Endpoint{
				Id:            ep.id,
				Provider:      e.Provider,
				BaseUrl:       e.BaseURL,
				UpstreamModel: e.UpstreamModel,
				ApiKeyEnv:     e.APIKeyEnv,
				Price:         &pb.Price{Input: rates.Input, CachedInput: rates.CachedInput, Output: rates.Output},
				ContextLength: e.ContextLength,
			}
			mm.endpoints = append(mm.endpoints, ep)
			idx.providers[e.Provider] = true
			lm.Providers = append(lm.Providers, e.Provider)
			lm.ContextLength = max(lm.ContextLength, e.ContextLength)
		}
		idx.models[m.ID] = mm
		idx.list = append(idx.list, lm)
	}
	slices.SortFunc(idx.list, func(a, b *pb.Model) int { return strings.Compare(a.Id, b.Id) })
	for _, t := range c.Tenants {
		idx.tenants[t.ID] = true
		for _, k := range t.APIKeysSHA256 {
			idx.keys[k] = keyInfo{tenant: t.ID, keyID: catalog.KeyID(k)}
		}
	}
	r.idx.Store(idx)
}

// Authenticate resolves an identity: an API key digest must be known; without
// one, a trusted caller's tenant_id must name a tenant.
func (r *Router) Authenticate(id *pb.Identity) (*pb.Identity, error) {
	idx := r.idx.Load()
	out := &pb.Identity{}
	if id != nil {
		out.App, out.Environment, out.Partner, out.WorkloadClass = id.App, id.Environment, id.Partner, id.WorkloadClass
	}
	if out.WorkloadClass == pb.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED {
		out.WorkloadClass = pb.WorkloadClass_WORKLOAD_CLASS_INTERACTIVE
	}
	switch {
	case id != nil && id.ApiKeySha256 != "":
		k, ok := idx.keys[strings.ToLower(id.ApiKeySha256)]
		if !ok {
			return nil, errorf(KindUnauthenticated, "invalid API key")
		}
		out.TenantId, out.ApiKeyId = k.tenant, k.keyID
	case id != nil && id.TenantId != "":
		if !idx.tenants[id.TenantId] {
			return nil, errorf(KindUnauthenticated, "unknown tenant %q", id.TenantId)
		}
		out.TenantId, out.ApiKeyId = id.TenantId, id.ApiKeyId
	default:
		return nil, errorf(KindUnauthenticated, "no API key: send Authorization: Bearer <key>")
	}
	return out, nil
}

// ListModels lists the catalog's models.
func (r *Router) ListModels() []*pb.Model { return r.idx.Load().list }

// candidate is one endpoint priced for one request.
type candidate struct {
	ep       *endpoint
	cost     float64
	cached   int64
	excluded string
}

// Decide picks the endpoint for req. The identity must already be resolved.
func (r *Router) Decide(req *pb.DecideRequest, id *pb.Identity) (*pb.DecideResponse, error) {
	idx := r.idx.Load()
	name, suffix, _ := strings.Cut(req.GetModel(), ":")
	if name == "" {
		return nil, errorf(KindInvalid, "model is required")
	}
	if suffix != "" && suffix != "floor" && suffix != "nitro" {
		return nil, errorf(KindInvalid, "unknown model suffix %q: use :floor or :nitro", ":"+suffix)
	}
	m, ok := idx.models[name]
	if !ok {
		return nil, errorf(KindNotFound, "model %q does not exist", name)
	}
	prefs := req.GetProvider()
	if err := validatePrefs(prefs, idx); err != nil {
		return nil, err
	}
	tok := req.GetTokens()
	in := max(tok.GetInputTokens(), 0)
	cached := min(max(tok.GetCachedInputTokens(), 0), in)
	out := tok.GetMaxOutputTokens()
	if out <= 0 {
		out = DefaultOutputTokens
	}
	bucket := tokens.BucketOf(in)

	cands := make([]candidate, len(m.endpoints))
	fitsNone := true
	for i, ep := range m.endpoints {
		c := candidate{ep: ep, cached: cached}
		c.cost = (float64(in-cached)*ep.rates.Input + float64(cached)*ep.rates.CachedInput + float64(out)*ep.rates.Output) / 1e6
		c.excluded = exclude(ep, prefs, req.GetParameters(), in, tok.GetMaxOutputTokens())
		if !strings.HasPrefix(c.excluded, "context") {
			fitsNone = false
		}
		cands[i] = c
	}

	reason := pb.RouteReason_ROUTE_REASON_CHEAPEST_NO_DATA
	byCost := func(a, b candidate) int {
		if c := cmpFloat(a.cost, b.cost); c != 0 {
			return c
		}
		return strings.Compare(a.ep.provider, b.ep.provider)
	}
	slices.SortStableFunc(cands, byCost)
	switch {
	case suffix == "floor":
		reason = pb.RouteReason_ROUTE_REASON_FLOOR
	case suffix == "nitro":
		// Throughput data arrives with the stats of the smart-routing policy;
		// until then the fastest is unknown and price decides.
		reason = pb.RouteReason_ROUTE_REASON_NITRO
	case prefs.GetSort() != pb.Sort_SORT_UNSPECIFIED:
		reason = pb.RouteReason_ROUTE_REASON_USER_SORT
	case len(prefs.GetOrder()) > 0:
		reason = pb.RouteReason_ROUTE_REASON_USER_ORDER
		rank := map[string]int{}
		for i, p := range prefs.GetOrder() {
			if _, dup := rank[p]; !dup {
				rank[p] = i
			}
		}
		slices.SortStableFunc(cands, func(a, b candidate) int {
			ra, oka := rank[a.ep.provider]
			rb, okb := rank[b.ep.provider]
			switch {
			case oka && okb:
				return ra - rb
			case oka:
				return -1
			case okb:
				return 1
			}
			return 0
		})
	case len(prefs.GetOnly()) > 0 || len(prefs.GetIgnore()) > 0:
		reason = pb.RouteReason_ROUTE_REASON_USER_ORDER
	}

	var usable []candidate
	for _, c := range cands {
		if c.excluded == "" {
			usable = append(usable, c)
		}
	}
	if len(usable) == 0 {
		var why []string
		for _, c := range cands {
			why = append(why, c.ep.provider+": "+c.excluded)
		}
		kind := KindUnavailable
		if fitsNone {
			kind = KindInvalid
		}
		return nil, errorf(kind, "no endpoint of %s can take this request (%s)", name, strings.Join(why, "; "))
	}
	if prefs != nil && prefs.AllowFallbacks != nil && !prefs.GetAllowFallbacks() {
		usable = noFallbacks(usable, prefs.GetOrder())
	}

	resp := &pb.DecideResponse{
		RequestId: req.GetRequestId(),
		Model:     name,
		Identity:  id,
		MaxPrice:  prefs.GetMaxPrice(),
		Hedge:     &pb.HedgePlan{Mode: pb.HedgeMode_HEDGE_MODE_NONE},
	}
	resp.Endpoint = priced(usable[0])
	for _, c := range usable[1:] {
		resp.Fallbacks = append(resp.Fallbacks, priced(c))
	}
	d := &pb.Decision{Reason: reason, Bucket: bucketProto(bucket)}
	for _, c := range cands {
		if !req.GetExplain() && c.ep != usable[0].ep {
			continue
		}
		d.Candidates = append(d.Candidates, &pb.Candidate{
			EndpointId:            c.ep.id,
			Provider:              c.ep.provider,
			CostUsd:               c.cost,
			EstimatedCachedTokens: c.cached,
			Qualified:             c.excluded == "",
			Note:                  c.excluded,
		})
	}
	d.Summary = fmt.Sprintf("bucket=%s reason=%s provider=%s cost_usd=%.6f usable=%d/%d",
		bucket, reasonName(reason), usable[0].ep.provider, usable[0].cost, len(usable), len(cands))
	resp.Decision = d
	return resp, nil
}

// noFallbacks keeps the first endpoint, or with provider.order the ordered
// providers only: allow_fallbacks=false means no endpoint the user did not name.
func noFallbacks(usable []candidate, order []string) []candidate {
	if len(order) == 0 {
		return usable[:1]
	}
	var out []candidate
	for _, c := range usable {
		if slices.Contains(order, c.ep.provider) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return usable[:1]
	}
	return out
}

func priced(c candidate) *pb.Endpoint {
	e := c.ep.proto
	return &pb.Endpoint{
		Id:               e.Id,
		Provider:         e.Provider,
		BaseUrl:          e.BaseUrl,
		UpstreamModel:    e.UpstreamModel,
		ApiKeyEnv:        e.ApiKeyEnv,
		Price:            e.Price,
		ContextLength:    e.ContextLength,
		EstimatedCostUsd: c.cost,
	}
}

// exclude says why an endpoint cannot take the request, or "" if it can.
func exclude(ep *endpoint, p *pb.ProviderPreferences, params []string, in, maxOut int64) string {
	if len(p.GetOnly()) > 0 && !slices.Contains(p.GetOnly(), ep.provider) {
		return "not in provider.only"
	}
	if slices.Contains(p.GetIgnore(), ep.provider) {
		return "in provider.ignore"
	}
	if mp := p.GetMaxPrice(); mp != nil {
		if mp.Prompt != nil && ep.rates.Input > mp.GetPrompt() {
			return fmt.Sprintf("input price %g above max_price.prompt %g", ep.rates.Input, mp.GetPrompt())
		}
		if mp.Completion != nil && ep.rates.Output > mp.GetCompletion() {
			return fmt.Sprintf("output price %g above max_price.completion %g", ep.rates.Output, mp.GetCompletion())
		}
	}
	if p.GetDataCollection() == pb.DataCollection_DATA_COLLECTION_DENY && !(ep.denyCollection || ep.zdr) {
		return "collects data (data_collection=deny)"
	}
	if p.GetZdr() && !ep.zdr {
		return "not zero-data-retention"
	}
	if q := p.GetQuantizations(); len(q) > 0 && !slices.Contains(q, ep.quantization) {
		return fmt.Sprintf("quantization %q not in provider.quantizations", ep.quantization)
	}
	if p.GetRequireParameters() {
		for _, name := range params {
			if !ep.params[name] {
				return fmt.Sprintf("does not support parameter %q", name)
			}
		}
	}
	if ep.contextLength > 0 && in+max(maxOut, 0) > ep.contextLength {
		return fmt.Sprintf("context length %d too small for %d prompt + %d output tokens", ep.contextLength, in, max(maxOut, 0))
	}
	return ""
}

func validatePrefs(p *pb.ProviderPreferences, idx *index) error {
	for field, names := range map[string][]string{"only": p.GetOnly(), "ignore": p.GetIgnore(), "order": p.GetOrder()} {
		for _, n := range names {
			if !idx.providers[n] {
				return errorf(KindInvalid, "provider.%s: unknown provider %q", field, n)
			}
		}
	}
	if mp := p.GetMaxPrice(); mp != nil {
		for field, v := range map[string]*float64{"prompt": mp.Prompt, "completion": mp.Completion} {
			if v != nil && (*v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0)) {
				return errorf(KindInvalid, "provider.max_price.%s must be a non-negative number", field)
			}
		}
	}
	if _, ok := pb.Sort_name[int32(p.GetSort())]; !ok {
		return errorf(KindInvalid, "provider.sort: unknown value %d", p.GetSort())
	}
	return nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func bucketProto(b tokens.Bucket) pb.SizeBucket {
	return pb.SizeBucket(int(b) + 1)
}

func reasonName(r pb.RouteReason) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "ROUTE_REASON_"))
}
