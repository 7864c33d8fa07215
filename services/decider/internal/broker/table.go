package broker

import (
	"strings"
	"sync/atomic"
)

// ikey finds the buckets of one scope instance without building a string.
type ikey struct {
	scope   Scope
	a, b, c string
}

func keyOf(scope Scope, key string) ikey {
	if scope == ScopeApp {
		parts := strings.SplitN(key, "/", 3)
		k := ikey{scope: scope, a: parts[0]}
		if len(parts) > 1 {
			k.b = parts[1]
		}
		if len(parts) > 2 {
			k.c = parts[2]
		}
		return k
	}
	return ikey{scope: scope, a: key}
}

// table is an immutable bucket set; see Broker.tab.
type table struct {
	buckets   []*bucket
	byID      map[string]*bucket
	index     map[ikey][]*bucket
	routes    map[string]*route
	routeDefs []routeDef
	// accounts lists the routes of each provider account (Route.Account).
	accounts map[string][]*route
}

type routeDef struct {
	Route
	dynamic bool // created for an endpoint the configuration did not name
}

// route is an endpoint with its provider buckets, in lock order, and its
// pause.
type route struct {
	Route
	buckets []*bucket
	pause   *pause
}

// pause is a route's "paused until", set from Retry-After and friends.
type pause struct {
	until  atomic.Int64 // Unix ns
	reason atomic.Int32 // RefusalReason
	streak atomic.Int32 // 429s in a row without Retry-After, for back-off
}

func buildTable(bs []*bucket, routes []Route, old *table) *table {
	t := &table{buckets: bs, byID: make(map[string]*bucket, len(bs)), index: map[ikey][]*bucket{}, routes: map[string]*route{},
		accounts: map[string][]*route{}}
	for _, bk := range bs {
		t.byID[bk.id] = bk
		k := keyOf(bk.scope, bk.key)
		t.index[k] = append(t.index[k], bk)
	}
	dynamic := map[string]bool{}
	if old != nil {
		for _, r := range old.routeDefs {
			dynamic[r.EndpointID] = r.dynamic
		}
	}
	for _, r := range routes {
		rt := &route{Route: r}
		rt.buckets = append(rt.buckets, t.index[ikey{scope: ScopeModelRoute, a: r.EndpointID}]...)
		rt.buckets = append(rt.buckets, t.index[ikey{scope: ScopeProviderWorkspace, a: r.Workspace}]...)
		rt.buckets = append(rt.buckets, t.index[ikey{scope: ScopeProviderProject, a: r.Project}]...)
		rt.buckets = sortBuckets(rt.buckets)
		if old != nil {
			if o := old.routes[r.EndpointID]; o != nil {
				rt.pause = o.pause
			}
		}
		if rt.pause == nil {
			rt.pause = &pause{}
		}
		t.routes[r.EndpointID] = rt
		if r.Account != "" {
			t.accounts[r.Account] = append(t.accounts[r.Account], rt)
		}
		t.routeDefs = append(t.routeDefs, routeDef{Route: r, dynamic: dynamic[r.EndpointID]})
	}
	return t
}

// resolve appends the buckets that apply to (id, endpoint) to dst and
// returns the endpoint's route, nil if the configuration does not name it.
// Six map lookups at most and no allocation while dst has room.
func (t *table) resolve(id *Identity, endpoint string, dst []*bucket) ([]*bucket, *route) {
	if id.APIKeyID != "" {
		dst = append(dst, t.index[ikey{scope: ScopeAPIKey, a: id.APIKeyID}]...)
	}
	if id.TenantID != "" {
		if id.App != "" {
			dst = append(dst, t.index[ikey{scope: ScopeApp, a: id.TenantID, b: id.App}]...)
			if id.Environment != "" {
				dst = append(dst, t.index[ikey{scope: ScopeApp, a: id.TenantID, b: id.App, c: id.Environment}]...)
			}
		}
		dst = append(dst, t.index[ikey{scope: ScopeTenant, a: id.TenantID}]...)
	}
	if id.Partner != "" {
		dst = append(dst, t.index[ikey{scope: ScopePartner, a: id.Partner}]...)
	}
	if endpoint == "" {
		return dst, nil
	}
	if rt := t.routes[endpoint]; rt != nil {
		return append(dst, rt.buckets...), rt
	}
	provider, _, _ := strings.Cut(endpoint, "/")
	dst = append(dst, t.index[ikey{scope: ScopeModelRoute, a: endpoint}]...)
	dst = append(dst, t.index[ikey{scope: ScopeProviderWorkspace, a: provider}]...)
	dst = append(dst, t.index[ikey{scope: ScopeProviderProject, a: provider}]...)
	return dst, nil
}
