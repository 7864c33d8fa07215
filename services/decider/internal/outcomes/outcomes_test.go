package outcomes

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

func newTracker(cfg Config) (*Tracker, *fakeclock.Clock) {
	c := fakeclock.New(time.Unix(1_800_000_000, 0))
	cfg.Now = c.Now
	return New(cfg), c
}

var rates = pricing.Price{Input: 1, CachedInput: 0.5, Output: 4}

func ok(in, cached, out int64, d time.Duration) Call {
	return Call{Kind: KindOK, Reported: true, Usage: pricing.Usage{Input: in, CachedInput: cached, Output: out}, Duration: d}
}

func TestRatesAndPrice(t *testing.T) {
	tr, _ := newTracker(Config{})
	for range 3 {
		tr.Observe("a/m", ok(1000, 600, 100, 2*time.Second), rates)
	}
	tr.Observe("a/m", Call{Kind: KindRateLimited}, rates)
	tr.Observe("a/m", Call{Kind: KindError}, rates)
	q := ok(1000, 0, 100, 2*time.Second)
	q.QualityFailures = []string{"malformed_tool_call", "empty"}
	tr.Observe("a/m", q, rates)
	tr.Observe("a/m", Call{Kind: KindIgnored}, rates)
	// A probe counts in the rates but not in the price.
	p := ok(5000, 0, 10, time.Second)
	p.Probe = true
	tr.Observe("a/m", p, rates)

	f := tr.Endpoint("a/m").Read(time.Unix(1_800_000_000, 0))
	require.InDelta(t, 7, f.Calls, 1e-9, "3 ok, a 429, an error, a poor answer, a probe; the cancelled call says nothing")
	require.InDelta(t, 1, f.RateLimited, 1e-9)
	require.InDelta(t, 1, f.Failed, 1e-9)
	require.InDelta(t, 1, f.Poor, 1e-9)
	require.InDelta(t, 2, f.RecentFailed, 1e-9)
	hit, okHit := f.CacheHitRate()
	require.True(t, okHit)
	require.InDelta(t, 1800.0/4000, hit, 1e-9, "cached over input of the four priced calls")
	// Each 600-cached call: 400×1 + 600×0.5 + 100×4 = 1100 µUSD; the
	// uncached one: 1000 + 400 = 1400 µUSD.
	per, _ := f.ChargedPerCall()
	require.InDelta(t, (3*1100+1400)/4/1e6, per, 1e-12)
	tps, _ := f.Throughput()
	require.InDelta(t, (4*100+10)/(4*2.0+1), tps, 1e-9, "output over the whole call time")
	require.InDelta(t, 1.0/7, tr.Endpoint("a/m").QualityChecks()["malformed_tool_call"], 1e-9)
}

func TestDecay(t *testing.T) {
	tr, clk := newTracker(Config{HalfLife: time.Minute, FastHalfLife: 10 * time.Second})
	tr.Observe("a/m", Call{Kind: KindError}, rates)
	clk.Advance(time.Minute)
	tr.Observe("a/m", ok(10, 0, 10, time.Second), rates)
	f := tr.Endpoint("a/m").Read(clk.Now())
	require.InDelta(t, 1.5, f.Calls, 1e-9, "the error one half-life old weighs a half")
	require.InDelta(t, 0.5, f.Failed, 1e-9)
	clk.Advance(time.Minute)
	f = tr.Endpoint("a/m").Read(clk.Now())
	require.InDelta(t, 0.75, f.Calls, 1e-9, "reads decay to the reader's clock")
	require.InDelta(t, 0.25, f.Failed, 1e-9)
	require.InDelta(t, 1.0/3, f.Failed/f.Calls, 1e-9, "a rate does not move with time alone")
	require.InDelta(t, 1.0/4096, f.RecentFailed, 1e-9, "the fast rate fades in seconds: 2 min = 12 fast half-lives after the error")
}

func TestLoad(t *testing.T) {
	tr, clk := newTracker(Config{LoadWindow: time.Minute})
	e := tr.Endpoint("a/m")
	// 2 requests a second for five minutes: 120 a minute.
	for range 600 {
		e.Routed(clk.Now())
		clk.Advance(500 * time.Millisecond)
	}
	require.InDelta(t, 120, e.Load(clk.Now()), 2)
	clk.Advance(time.Minute)
	require.InDelta(t, 120/2.718281828, e.Load(clk.Now()), 2, "idle for one time constant: 1/e of it")
}

func TestCapLearnedAndRises(t *testing.T) {
	tr, clk := newTracker(Config{LoadWindow: time.Minute, CapBackoff: 0.1, CapRise: 0.05})
	e := tr.Endpoint("a/m")
	require.Zero(t, e.Read(clk.Now()).Cap, "no cap before any 429")
	for range 600 {
		e.Routed(clk.Now())
		clk.Advance(500 * time.Millisecond)
	}
	load := e.Load(clk.Now())
	tr.Observe("a/m", Call{Kind: KindRateLimited}, rates)
	f := e.Read(clk.Now())
	require.InDelta(t, 0.9*load, f.Cap, 1e-9, "the load at the 429, less 10%")
	clk.Advance(10 * time.Minute)
	require.InDelta(t, 0.9*load*1.5, e.Read(clk.Now()).Cap, 1e-9, "+5% of the cap per minute without a 429")

	// A 429 with nothing routed here (a probe's) teaches no cap.
	tr.Observe("b/m", Call{Kind: KindRateLimited}, rates)
	require.Zero(t, tr.Endpoint("b/m").Read(clk.Now()).Cap)
	// A trickle keeps at least MinCap.
	c := tr.Endpoint("c/m")
	c.Routed(clk.Now())
	clk.Advance(10 * time.Minute)
	tr.Observe("c/m", Call{Kind: KindRateLimited}, rates)
	require.InDelta(t, MinCap, c.Read(clk.Now()).Cap, 1e-9)
}

func TestQualityCheckNamesBounded(t *testing.T) {
	tr, _ := newTracker(Config{})
	for i := range 100 {
		c := ok(10, 0, 10, time.Second)
		c.QualityFailures = []string{fmt.Sprintf("check-%d-%0100d", i, 0)}
		tr.Observe("a/m", c, rates)
	}
	checks := tr.Endpoint("a/m").QualityChecks()
	require.Len(t, checks, maxChecks+1, "16 names and the rest as other")
	require.InDelta(t, 84.0/100, checks["other"], 1e-9)
	for n := range checks {
		require.LessOrEqual(t, len(n), maxCheckName)
	}
}

func TestConcurrent(t *testing.T) {
	tr, clk := newTracker(Config{})
	e := tr.Endpoint("a/m")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 500 {
				tr.Observe("a/m", ok(100, 50, 10, time.Second), rates)
				tr.Observe("a/m", Call{Kind: KindRateLimited}, rates)
				e.Routed(clk.Now())
				_ = e.Read(clk.Now())
				clk.Advance(time.Millisecond)
			}
		})
	}
	wg.Wait()
	f := e.Read(clk.Now())
	require.Greater(t, f.Calls, 3000.0)
	require.InDelta(t, f.Calls/2, f.RateLimited, 1)
}

func BenchmarkRead(b *testing.B) {
	tr, clk := newTracker(Config{})
	e := tr.Endpoint("a/m")
	tr.Observe("a/m", ok(100, 50, 10, time.Second), rates)
	now := clk.Now().Add(time.Second)
	b.ReportAllocs()
	for b.Loop() {
		_ = e.Read(now)
	}
}
