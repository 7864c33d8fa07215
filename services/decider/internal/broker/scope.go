package broker

// Who may move a route's shared state. An edge's reconciliation (and the
// decider's own) moves what every tenant sees: the route's pause, the
// limits its headers teach, the estimate correction. A caller that acts
// for some tenants only (a service the catalog does not trust for shared
// provider state, ReconcileRequest.Scoped) moves only what the
// reservation's tenant sees: its failures and headers pause the route for
// that tenant alone (here), and neither its headers' limits nor its usage
// are learned. So a service of tenant a that invents a provider refusal
// pauses nothing for tenant b.
//
// A tenant's pause lives beside the route's, with the same rules (the
// cap, the back-off streak, an account's pause), and is not in the
// snapshot: a new owner starts without it, as the tenant's next refusal
// would set it again. There are at most as many as tenants × endpoints.

// tenantPauseKey names one tenant's pause of one route.
type tenantPauseKey struct{ endpoint, tenant string }

// tenantPause returns tenant's own pause of endpoint; nil when it has none
// and create is false.
func (b *Broker) tenantPause(endpoint, tenant string, create bool) *pause {
	k := tenantPauseKey{endpoint, tenant}
	if v, ok := b.paused.Load(k); ok {
		return v.(*pause)
	}
	if !create {
		return nil
	}
	v, _ := b.paused.LoadOrStore(k, &pause{})
	return v.(*pause)
}

// Scoped returns how many reconciliations were applied for their tenant
// only: their pauses kept to it, their headers' limits and usage not
// learned.
func (b *Broker) Scoped() int64 { return b.scoped.Load() }
