package catalog

// Sorts are the valid values of a default provider sort, as a request's
// provider.sort names them.
var Sorts = []string{"price", "throughput", "latency"}

// TenantRouting is a tenant's default routing settings, applied to its
// requests that choose nothing themselves.
type TenantRouting struct {
	// Policy ranks the tenant's requests that set no provider.order or
	// provider.sort, before a running experiment, the model's setting and
	// the deployment default. (Optional) Empty leaves the choice to those.
	Policy string `yaml:"policy"`
	// Sort is the provider.sort of the tenant's requests that name no sort,
	// no provider.order and no :floor or :nitro suffix: "price" routes the
	// tenant by price alone, as a request's own sort would. (Optional)
	Sort string `yaml:"sort"`
}

func validateTenantRouting(r *TenantRouting, path string, bad func(string, string, ...any)) {
	if r == nil {
		return
	}
	if r.Policy != "" && !oneOf(r.Policy, RoutingPolicies) {
		bad(path+".policy", "%q must be one of %s", r.Policy, list(RoutingPolicies))
	}
	if r.Sort != "" && !oneOf(r.Sort, Sorts) {
		bad(path+".sort", "%q must be one of %s", r.Sort, list(Sorts))
	}
}
