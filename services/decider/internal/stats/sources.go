package stats

import (
	"slices"
	"sync"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

// MaxShare is the largest share of a series' weight one reporter may hold
// while three or more report to it; with two, each may hold half. See the
// package documentation (Reporters).
const MaxShare = 1.0 / 3

// maxSources bounds the reporters the store tells apart: beyond it, new
// names share one source, so a caller inventing names cannot grow memory.
const maxSources = 4096

// sources names the reporters: each gets a small index, carried by its
// samples. Index 0 is the unnamed reporter (the Store's own Observe*).
type sources struct {
	ids   sync.Map // name → uint32
	mu    sync.Mutex
	names []string // by index
}

func (r *sources) init() { r.names = []string{""}; r.ids.Store("", uint32(0)) }

// id returns name's index, assigning the next one on first use.
func (r *sources) id(name string) uint32 {
	if v, ok := r.ids.Load(name); ok {
		return v.(uint32)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.ids.Load(name); ok {
		return v.(uint32)
	}
	if len(r.names) >= maxSources {
		return maxSources - 1 // the last index is every reporter beyond the bound
	}
	i := uint32(len(r.names))
	r.names = append(r.names, name)
	r.ids.Store(name, i)
	return i
}

// name returns the name of index i.
func (r *sources) name(i uint32) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if int(i) < len(r.names) {
		return r.names[i]
	}
	return ""
}

// Reporter records observations as coming from one reporter, an edge: its
// samples' share of every series is bounded by [MaxShare] (see the package
// documentation). Get one from [Store.From]; it is safe for concurrent use.
type Reporter struct {
	s      *Store
	src    uint32
	region Region // see [Reporter.In]
}

// From returns the reporter named name. Reporters are told apart by name;
// the first 4095 names get their own share, later ones share one.
func (s *Store) From(name string) Reporter { return Reporter{s: s, src: s.srcs.id(name)} }

// ObserveTTFT is [Store.ObserveTTFT] from r.
func (r Reporter) ObserveTTFT(endpointID string, b tokens.Bucket, ttft time.Duration, at time.Time) {
	r.s.observeTTFT(r.src, r.region, endpointID, b, ttft, at)
}

// ObserveThroughput is [Store.ObserveThroughput] from r.
func (r Reporter) ObserveThroughput(endpointID string, tokensPerSecond float64, at time.Time) {
	r.s.observeThroughput(r.src, endpointID, tokensPerSecond, at)
}

// ObserveCache is [Store.ObserveCache] from r.
func (r Reporter) ObserveCache(endpointID string, promptTokens, cachedTokens int64, at time.Time) {
	r.s.observeCache(r.src, endpointID, promptTokens, cachedTokens, at)
}

// ObserveOutput is [Store.ObserveOutput] from r.
func (r Reporter) ObserveOutput(modelID string, outputTokens int64, at time.Time) {
	r.s.observeOutput(r.src, modelID, outputTokens, at)
}

// share is one reporter's part of a series: its weight, its sample count
// and the factor its samples' weights are multiplied by.
type share struct {
	src    uint32
	w      float64
	n      int
	factor float64
}

// shares is a series' scratch for per-reporter sums, kept between
// recomputations so that they allocate nothing once grown.
type shares []share

// add adds weight w of src.
func (sh *shares) add(src uint32, w float64) {
	for i := range *sh {
		if (*sh)[i].src == src {
			(*sh)[i].w += w
			(*sh)[i].n++
			return
		}
	}
	*sh = append(*sh, share{src: src, w: w, n: 1, factor: 1})
}

// factorOf returns src's factor after cap.
func (sh shares) factorOf(src uint32) float64 {
	for i := range sh {
		if sh[i].src == src {
			return sh[i].factor
		}
	}
	return 1
}

// cap sets each reporter's factor so that none holds more than
// max(MaxShare, 1/k) of the total weight of the k reporters: the heaviest
// are lowered to a common weight c (water-filling), the others kept. With
// one reporter nothing changes.
func (sh shares) cap() {
	k := len(sh)
	for i := range sh {
		sh[i].factor = 1
	}
	if k < 2 {
		return
	}
	f := max(MaxShare, 1/float64(k))
	slices.SortFunc(sh, func(a, b share) int {
		switch {
		case a.w > b.w:
			return -1
		case a.w < b.w:
			return 1
		}
		return int(a.src) - int(b.src)
	})
	var total float64
	for _, s := range sh {
		total += s.w
	}
	if !(total > 0) || sh[0].w <= f*total {
		return
	}
	// The m heaviest capped at c, the rest (Σ rest) as they are, and c a
	// share f of the whole: c = f·(m·c + rest), so c = f·rest / (1 − f·m).
	// It ends by m = ⌈1/f⌉ − 1 at the latest, where c ≥ the next weight.
	rest := total - sh[0].w
	for m := 1; m < k; m++ {
		c := f * rest / (1 - f*float64(m))
		if sh[m].w <= c || f*float64(m+1) >= 1 {
			for i := range m {
				sh[i].factor = c / sh[i].w
			}
			if sh[m].w > c { // f·(m+1) = 1: every reporter at c
				for i := m; i < k; i++ {
					sh[i].factor = c / sh[i].w
				}
			}
			return
		}
		rest -= sh[m].w
	}
}

// victim returns the reporter whose oldest sample makes room when a full
// series takes a sample of src: the one holding the most samples (src's
// count including the new one), so that a reporter flooding a series
// evicts its own samples, not the others'. Ties go to the lower index.
func (sh shares) victim(src uint32) uint32 {
	best, bestN := src, 0
	for _, s := range sh {
		n := s.n
		if s.src == src {
			n++
		}
		if n > bestN || n == bestN && s.src < best {
			best, bestN = s.src, n
		}
	}
	return best
}

// oneSource reports whether every sample of s comes from one reporter, the
// common case, in which shares change nothing and cost nothing.
func oneSource[S any](s []S, src func(S) uint32) bool {
	for i := 1; i < len(s); i++ {
		if src(s[i]) != src(s[0]) {
			return false
		}
	}
	return true
}
