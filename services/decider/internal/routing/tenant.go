package routing

import (
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// tenantDefaults are a tenant's default routing settings (the catalog's
// tenant routing field), resolved once per catalog.
type tenantDefaults struct {
	policy Policy             // "" when the tenant names none
	sort   switchboardv1.Sort // SORT_UNSPECIFIED when the tenant names none
}

// tenantIndex resolves the tenants' routing settings; tenants without any
// are left out.
func tenantIndex(c *catalog.Catalog) map[string]tenantDefaults {
	out := map[string]tenantDefaults{}
	for _, t := range c.Tenants {
		if t.Routing == nil {
			continue
		}
		var d tenantDefaults
		if t.Routing.Policy != "" {
			// The catalog validated the name.
			d.policy, _ = ParsePolicy(t.Routing.Policy)
		}
		switch t.Routing.Sort {
		case "price":
			d.sort = switchboardv1.Sort_SORT_PRICE
		case "throughput":
			d.sort = switchboardv1.Sort_SORT_THROUGHPUT
		case "latency":
			d.sort = switchboardv1.Sort_SORT_LATENCY
		}
		if d != (tenantDefaults{}) {
			out[t.ID] = d
		}
	}
	return out
}

// tenantPolicy is the tenant's default policy; ok is false when it names none.
func (r *Router) tenantPolicy(idx *Index, id *switchboardv1.Identity) (p Policy, ok bool) {
	d := idx.tenants[id.GetTenantId()]
	return d.policy, d.policy != ""
}

// withTenantSort returns the request's provider options with the tenant's
// default sort filled in when the request chose no order of its own: no
// provider.sort, no provider.order and no :floor or :nitro suffix. An
// explicit choice always wins over the account's default; only/ignore and
// the other options are kept as they are. prefs is never modified: a copy
// is made when the default applies.
func (r *Router) withTenantSort(idx *Index, prefs *switchboardv1.ProviderPreferences, suffix string, id *switchboardv1.Identity) *switchboardv1.ProviderPreferences {
	d := idx.tenants[id.GetTenantId()]
	if d.sort == switchboardv1.Sort_SORT_UNSPECIFIED || suffix != "" ||
		prefs.GetSort() != switchboardv1.Sort_SORT_UNSPECIFIED || len(prefs.GetOrder()) > 0 {
		return prefs
	}
	cp := &switchboardv1.ProviderPreferences{}
	if prefs != nil {
		cp = proto.CloneOf(prefs)
	}
	cp.Sort = d.sort
	return cp
}
