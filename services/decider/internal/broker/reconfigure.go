package broker

import (
	"fmt"
	"slices"
)

// Reconfigure replaces the configured buckets, routes, class contracts and
// tenant shares, for a catalog change. A bucket whose id is unchanged keeps its level (clamped to its new
// limit); a new bucket starts full; a removed one stops being charged, and
// open reservations still release into it harmlessly. Learned buckets and
// route pauses are kept.
func (b *Broker) Reconfigure(cfg Config) error {
	p, err := Prepare(cfg)
	if err != nil {
		return err
	}
	b.Apply(p)
	return nil
}

// Plan is a configuration Prepare checked: Apply takes it and cannot fail,
// so a catalog change checks everything before it changes anything.
type Plan struct {
	cfg Config
	ds  []def
	qc  *queueConfig
}

// Prepare checks cfg and derives its buckets and queue contracts.
func Prepare(cfg Config) (*Plan, error) {
	ds, err := defs(cfg.Buckets)
	if err != nil {
		return nil, fmt.Errorf("broker config: %w", err)
	}
	qc, err := newQueueConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("broker config: %w", err)
	}
	return &Plan{cfg: cfg, ds: ds, qc: qc}, nil
}

// Apply is Reconfigure of a checked configuration.
func (b *Broker) Apply(p *Plan) {
	b.reconfigure(p.cfg, p.ds, p.qc)
	// New limits may admit queued requests; the table mutex is released.
	b.wake()
}

func (b *Broker) reconfigure(cfg Config, ds []def, qc *queueConfig) {
	b.cfgMu.Lock()
	defer b.cfgMu.Unlock()
	b.qcfg.Store(qc) // under the table mutex: the same configuration as the table
	old := b.tab.Load()
	now := b.nowNS()
	bs := make([]*bucket, 0, len(ds))
	for _, d := range ds {
		if ob := old.byID[d.id]; ob != nil && ob.rule == d.rule && ob.source == d.source {
			ob.mu.Lock()
			ob.setParams(d, now)
			ob.mu.Unlock()
			bs = append(bs, ob)
			continue
		}
		bs = append(bs, newBucket(d, b.idx.Add(1), now))
	}
	for _, ob := range old.buckets {
		if ob.source == SourceLearned {
			bs = append(bs, ob)
		}
	}
	routes := slices.Clone(cfg.Routes)
	for _, r := range old.routeDefs {
		if r.dynamic {
			routes = append(routes, r.Route)
		}
	}
	b.tab.Store(buildTable(bs, sortRoutes(routes), old))
}

// ensureRoute returns the endpoint's route, adding a default one (so it can
// hold a pause) when the configuration did not name it.
func (b *Broker) ensureRoute(endpoint string) *route {
	if rt := b.tab.Load().routes[endpoint]; rt != nil {
		return rt
	}
	b.cfgMu.Lock()
	defer b.cfgMu.Unlock()
	old := b.tab.Load()
	if rt := old.routes[endpoint]; rt != nil {
		return rt
	}
	routes := make([]Route, 0, len(old.routeDefs)+1)
	for _, r := range old.routeDefs {
		routes = append(routes, r.Route)
	}
	nr := Route{EndpointID: endpoint}.withDefaults()
	routes = append(routes, nr)
	t := buildTable(old.buckets, sortRoutes(routes), old)
	for i := range t.routeDefs {
		if t.routeDefs[i].EndpointID == endpoint {
			t.routeDefs[i].dynamic = true
		}
	}
	b.tab.Store(t)
	return t.routes[endpoint]
}
