package loadtest

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// point is a cumulative amount at a moment: what a provider had received
// by then, or what the activity log had admitted up to and including one
// request.
type point struct {
	// at is when the amount was read (a provider's counters: when the
	// read started) and end when the read was over (at, for an event).
	at, end time.Time
	c       counters
}

// window is the window of a series where a limit came closest to (or
// went furthest past) its bound.
type window struct {
	observed, bound float64
	length          time.Duration
}

// worstWindow checks every window between two points of a cumulative
// series against l. A window from point i to point j holds
// c[j] − c[i] (inclusive: c[j] − c[i−1] for a series of single events),
// admitted at most lag before point i (the amount was counted when it
// reached the provider, or stamped when the request arrived, but admitted
// in between), so its bound is l.bound(at[j] − at[i] + lag).
func worstWindow(ps []point, l limit, lag time.Duration, inclusive bool) (window, bool) {
	var worst window
	found := false
	for i := range ps {
		var base float64
		if inclusive {
			if i > 0 {
				base = ps[i-1].c.of(l.unit)
			}
		} else {
			base = ps[i].c.of(l.unit)
		}
		for j := i; j < len(ps); j++ {
			if !inclusive && j == i {
				continue
			}
			d := ps[j].end.Sub(ps[i].at)
			w := window{observed: ps[j].c.of(l.unit) - base, bound: l.bound(d + lag), length: d + lag}
			if !found || w.observed-w.bound > worst.observed-worst.bound {
				worst, found = w, true
			}
		}
	}
	return worst, found
}

// activitySeries turns dispatched activity records into a cumulative
// series in the order the requests arrived.
func activitySeries(recs []*switchboardv1.ActivityRecord) []point {
	var rs []*switchboardv1.ActivityRecord
	for _, r := range recs {
		if dispatched(r) && r.GetCreateTime() != nil {
			rs = append(rs, r)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].GetCreateTime().AsTime().Before(rs[j].GetCreateTime().AsTime()) })
	var out []point
	var c counters
	for _, r := range rs {
		c.requests++
		c.input += r.GetUsage().GetInputTokens()
		c.output += r.GetUsage().GetOutputTokens()
		at := r.GetCreateTime().AsTime()
		out = append(out, point{at: at, end: at, c: c})
	}
	return out
}

// longest is the longest a request of the records took at the edge.
func longest(recs []*switchboardv1.ActivityRecord) time.Duration {
	var d time.Duration
	for _, r := range recs {
		d = max(d, r.GetDuration().AsDuration())
	}
	return d
}

// sampler polls providers' counters while a scenario runs.
type sampler struct {
	mu     sync.Mutex
	series map[string][]point // by provider/upstream model
	stop   chan struct{}
	done   chan struct{}
}

// startSampler reads the counters of each provider's model in keys every
// interval until stop.
func startSampler(ctx context.Context, hc *http.Client, urls map[string]string, models map[string][]string, interval time.Duration) *sampler {
	s := &sampler{series: map[string][]point{}, stop: make(chan struct{}), done: make(chan struct{})}
	take := func() {
		for provider, url := range urls {
			at := time.Now()
			st, err := ProviderStats(ctx, hc, url)
			end := time.Now()
			if err != nil {
				continue // a missed sample only leaves a wider window
			}
			s.mu.Lock()
			for _, m := range models[provider] {
				ms := st.Models[m]
				s.series[provider+"/"+m] = append(s.series[provider+"/"+m], point{at: at, end: end,
					c: counters{requests: ms.Requests, input: ms.PromptTokens, output: ms.CompletionTokens}})
			}
			s.mu.Unlock()
		}
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				take()
			}
		}
	}()
	return s
}

func (s *sampler) finish() map[string][]point {
	close(s.stop)
	<-s.done
	return s.series
}
