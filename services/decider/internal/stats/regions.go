package stats

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

// MaxRegions bounds the regions whose own first-token figures the store
// keeps. Regions are what edges say of themselves, so the first MaxRegions
// named get figures of their own and later ones count in the global figures
// only: a caller inventing regions cannot grow memory.
const MaxRegions = 16

// Region is a region the store keeps first-token figures for, as
// [Store.Region] finds it. The zero Region is none: its figures are the
// global ones alone.
type Region uint32

// regions names the regions: the first MaxRegions get indices 1..MaxRegions,
// the others none (0). The names are a map copied on each of the (at most
// MaxRegions) additions, so that a lookup on the Decide path takes no lock
// and, unlike a sync.Map's, allocates nothing.
type regions struct {
	ids   atomic.Pointer[map[string]Region]
	mu    sync.Mutex
	names []string // by index; names[0] is ""
}

func (r *regions) init() {
	r.names = []string{""}
	r.ids.Store(&map[string]Region{})
}

// find returns name's Region, none if it has none.
func (r *regions) find(name string) Region { return (*r.ids.Load())[name] }

// id returns name's Region, assigning the next one on first use; none for ""
// or once MaxRegions are named.
func (r *regions) id(name string) Region {
	if name == "" {
		return 0
	}
	if i := r.find(name); i != 0 {
		return i
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := r.find(name); i != 0 {
		return i
	}
	if len(r.names) > MaxRegions {
		return 0
	}
	i := Region(len(r.names))
	r.names = append(r.names, name)
	ids := maps.Clone(*r.ids.Load())
	ids[name] = i
	r.ids.Store(&ids)
	return i
}

// name returns the name of i ("" for none).
func (r *regions) name(i Region) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if int(i) < len(r.names) {
		return r.names[i]
	}
	return ""
}

// regionalTTFT is one endpoint's TTFT series in one region, per bucket.
type regionalTTFT [tokens.NumBuckets]medianSeries

func newRegionalTTFT() *regionalTTFT {
	t := &regionalTTFT{}
	for i := range t {
		t[i].init()
	}
	return t
}

// Region returns the region named name, or none if no reporter has named it
// yet (or it came after the first MaxRegions). It never assigns one: a
// request's region is the caller's word, not a reporter's.
func (s *Store) Region(name string) Region { return s.regs.find(name) }

// RegionName returns the name of r ("" for none).
func (s *Store) RegionName(r Region) string { return s.regs.name(r) }

// regional returns e's series of region r, creating them if create; nil for
// none.
func (e *Endpoint) regional(r Region, create bool) *regionalTTFT {
	if r == 0 || r > MaxRegions {
		return nil
	}
	p := &e.regions[r-1]
	if t := p.Load(); t != nil || !create {
		return t
	}
	p.CompareAndSwap(nil, newRegionalTTFT())
	return p.Load()
}

// TTFTIn returns the typical TTFT of the endpoint in bucket b measured by
// the reporters of region r alone (0, 0, false if none, or r is none). It
// takes no lock and allocates nothing.
func (e *Endpoint) TTFTIn(r Region, b tokens.Bucket) (typical time.Duration, samples int, ok bool) {
	if e == nil || uint(b) >= tokens.NumBuckets {
		return 0, 0, false
	}
	t := e.regional(r, false)
	if t == nil {
		return 0, 0, false
	}
	return t[b].duration()
}

// TTFTIn is [Endpoint.TTFTIn] of endpointID.
func (s *Store) TTFTIn(endpointID string, r Region, b tokens.Bucket) (typical time.Duration, samples int, ok bool) {
	return s.lookup(endpointID).TTFTIn(r, b)
}

// In returns r reporting from region name: its TTFT samples count in that
// region's figures as well as in the global ones. "" (or a region past the
// first MaxRegions) is the global figures alone.
func (r Reporter) In(name string) Reporter {
	r.region = r.s.regs.id(name)
	return r
}

// eachRegional calls f with every regional series of e that exists.
func (e *Endpoint) eachRegional(f func(Region, *regionalTTFT)) {
	for i := range e.regions {
		if t := e.regions[i].Load(); t != nil {
			f(Region(i+1), t)
		}
	}
}
