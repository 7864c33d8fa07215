package sim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// TestTTFTGrowsWithLoad: with a queue of 2 slots, a call that starts with
// 3 calls in flight takes (3 + 1) / 2 = 2 times as long; a 429 is never in
// flight, and a call that ended leaves the queue.
func TestTTFTGrowsWithLoad(t *testing.T) {
	t.Parallel()
	p := newProvider(priced(Provider{Queue: Queue{Concurrency: 2, Slope: 1},
		Capacity: Capacity{RequestsPerMinute: 4, RetryAfter: Duration(time.Second)},
		TTFT:     TTFTModel{Curve: []CurvePoint{{TTFT: Duration(time.Second)}}}}), "p/m")
	t0 := time.Date(2026, 10, 28, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	var got []time.Duration
	for range 4 {
		got = append(got, p.call(t0, rng, 100, -1, sharedPrefix{}).ttft)
	}
	require.Equal(t, []time.Duration{time.Second, time.Second, 1500 * time.Millisecond, 2 * time.Second}, got)
	require.Equal(t, 4, p.inflight)
	require.Equal(t, outcomeRateLimited, p.call(t0, rng, 100, -1, sharedPrefix{}).outcome)
	require.Equal(t, 4, p.inflight, "a 429 is not in flight")
	require.Equal(t, 2500*time.Millisecond, p.expectedTTFT(t0, 100, 0), "what the oracle sees for the next call")
	p.end()
	p.end()
	p.end()
	require.Equal(t, time.Second, p.call(t0.Add(time.Minute), rng, 100, -1, sharedPrefix{}).ttft, "one in flight and this one: full speed")

	// Without a queue, load changes nothing.
	q := newProvider(priced(Provider{TTFT: TTFTModel{Curve: []CurvePoint{{TTFT: Duration(time.Second)}}}}), "q/m")
	for range 10 {
		require.Equal(t, time.Second, q.call(t0, rng, 100, -1, sharedPrefix{}).ttft)
	}
}

// TestQueueInARun: in a run, calls end (answered, failed, cancelled), so a
// provider's calls in flight return to zero; a queue makes the day's TTFT
// worse than the same provider without one.
func TestQueueInARun(t *testing.T) {
	t.Parallel()
	profile := func(queue string) *Profile {
		p, err := ParseProfile([]byte(`models:
  - id: m
    providers:
      - name: only
        price: {input: 0.1, output: 0.4}
        ttft: {curve: [{tokens: 0, ttft: 500ms}, {tokens: 100000, ttft: 4s}]}
        output_tokens_per_second: 20
        errors: {server_error_rate: 0.05, hang_rate: 0.01}
` + queue + `
`))
		require.NoError(t, err)
		return p
	}
	tr, err := ParseTraffic([]byte(`model: m
requests: 3000
duration: 1h
stream_share: 0.9
output: {median: 200}
one_off: {share: 1, sizes: [{share: 1, min: 40000, max: 100000}]}
`))
	require.NoError(t, err)
	run := func(p *Profile) (*engine, *Result) {
		e, err := newEngine(p, tr, nil, Policy{Name: "smart"}, 1, Options{})
		require.NoError(t, err)
		return e, e.run()
	}
	e, queued := run(profile("        queue: {concurrency: 3}"))
	for id, p := range e.providers {
		require.Zero(t, p.inflight, "every call of %s ended", id)
	}
	_, free := run(profile(""))
	require.Greater(t, queued.Figures()["ttft_p50_all"], 1.2*free.Figures()["ttft_p50_all"])
}

// TestRandomSlowdownsSameForEveryPolicy: the random episodes are drawn from
// the seed alone: two policies meet the same ones, another seed others;
// during one, TTFT is the factor times slower; a group shares them.
func TestRandomSlowdownsSameForEveryPolicy(t *testing.T) {
	t.Parallel()
	p, err := ParseProfile([]byte(`models:
  - id: m
    providers:
      - name: a
        price: {input: 0.1, output: 0.4}
        ttft: {curve: [{tokens: 0, ttft: 1s}]}
        output_tokens_per_second: 50
        random_slow: [{per_hour: 0.5, duration: {median: 20m, spread: 0.5}, factor: 3, group: upstream}]
      - name: b
        price: {input: 0.2, output: 0.4}
        ttft: {curve: [{tokens: 0, ttft: 1s}]}
        output_tokens_per_second: 50
        random_slow: [{per_hour: 0.5, duration: {median: 20m, spread: 0.5}, factor: 3, group: upstream}]
      - name: c
        price: {input: 0.3, output: 0.4}
        ttft: {curve: [{tokens: 0, ttft: 1s}]}
        output_tokens_per_second: 50
        random_slow: [{per_hour: 0.5, duration: {median: 20m, spread: 0.5}, factor: 3}]
`))
	require.NoError(t, err)
	tr, err := ParseTraffic([]byte("model: m\nrequests: 10\noutput: {median: 1}\none_off: {share: 1, sizes: [{share: 1, min: 1, max: 1}]}\n"))
	require.NoError(t, err)
	episodes := func(pol Policy, seed uint64, id string) []slowSpan {
		e, err := newEngine(p, tr, nil, pol, seed, Options{})
		require.NoError(t, err)
		return e.providers[id].episodes
	}
	a := episodes(Policy{Name: "smart"}, 1, "a/m")
	require.NotEmpty(t, a)
	require.Equal(t, a, episodes(Policy{Name: "oracle", Oracle: true}, 1, "a/m"), "the same episodes for every policy")
	require.Equal(t, a, episodes(Policy{Name: "cheapest-input", Baseline: true}, 1, "b/m"), "the same group, the same episodes")
	require.NotEqual(t, a, episodes(Policy{Name: "smart"}, 1, "c/m"), "another provider, its own")
	require.NotEqual(t, a, episodes(Policy{Name: "smart"}, 2, "a/m"), "another seed, others")

	e, err := newEngine(p, tr, nil, Policy{Name: "smart"}, 1, Options{})
	require.NoError(t, err)
	pa := e.providers["a/m"]
	var slow, normal int
	for m := range 48 * 60 {
		at := tr.Start.Add(time.Duration(m) * time.Minute)
		switch f := pa.slowdown(at); f {
		case 1:
			normal++
		case 3, 9: // one episode, or two overlapping
			slow++
			require.Equal(t, time.Duration(float64(time.Second)*f), pa.expectedTTFT(at, 1, 0))
		default:
			t.Fatalf("factor %g at %s", f, at)
		}
	}
	require.Positive(t, slow)
	require.Greater(t, normal, slow, "about 10 minutes an hour are slow")
}

// TestOraclePicksTheTrulyCheapestQualifying: the oracle knows which
// provider holds the conversation's prompt in cache and which is slow right
// now, and routes to the cheapest among those within twice the fastest.
func TestOraclePicksTheTrulyCheapestQualifying(t *testing.T) {
	t.Parallel()
	p, err := ParseProfile([]byte(`models:
  - id: m
    providers:
      - name: cheap-slow
        price: {input: 0.01, output: 0.1}
        ttft: {curve: [{tokens: 0, ttft: 10s}]}
        output_tokens_per_second: 50
      - name: warm
        price: {input: 1, cached_input: 0.01, output: 0.1}
        ttft: {curve: [{tokens: 0, ttft: 2s}]}
        output_tokens_per_second: 50
        cache: {hit_rate: 1}
      - name: cold
        price: {input: 0.5, output: 0.1}
        ttft: {curve: [{tokens: 0, ttft: 1.5s}]}
        output_tokens_per_second: 50
      - name: fast-dear
        price: {input: 2, output: 0.1}
        ttft: {curve: [{tokens: 0, ttft: 1.2s}]}
        output_tokens_per_second: 50
`))
	require.NoError(t, err)
	tr, err := ParseTraffic([]byte("model: m\nrequests: 1\noutput: {median: 1}\none_off: {share: 1, sizes: [{share: 1, min: 1, max: 1}]}\n"))
	require.NoError(t, err)
	e, err := newEngine(p, tr, nil, Policy{Name: "oracle", Oracle: true}, 1, Options{})
	require.NoError(t, err)
	s := &session{id: 7, model: "m", conversation: true, turns: []turn{{prompt: 50000, output: 10, stream: true}, {prompt: 60000, output: 10, stream: true}}}
	r := &request{s: s, turn: 1, t: s.turns[1], output: 10}
	names := func(eps []*switchboardv1.Endpoint) []string {
		var out []string
		for _, ep := range eps {
			out = append(out, ep.GetProvider())
		}
		return out
	}

	// Nothing cached: cheap-slow is over 2 × 1.2 s; of the others cold is
	// the cheapest, and the hedge goes to the next cheapest qualifying.
	plan, h := e.oraclePlan(r)
	require.Equal(t, []string{"cold", "warm", "fast-dear", "cheap-slow"}, names(plan))
	require.Equal(t, switchboardv1.HedgeMode_HEDGE_MODE_DELAYED, h.GetMode())
	require.Equal(t, "warm", h.GetEndpoint().GetProvider())

	// warm holds the previous turn: 50k of 60k at $0.01 makes it the cheapest.
	e.providers["warm/m"].warm(7, 50000, e.now, sharedPrefix{})
	plan, _ = e.oraclePlan(r)
	require.Equal(t, "warm", plan[0].GetProvider())
	require.Equal(t, "cold", plan[1].GetProvider())

	// warm in a slow episode, 2 s × 3 = 6 s: too slow now, cold again.
	e.providers["warm/m"].episodes = []slowSpan{{at: e.now, factor: 3}, {at: e.now.Add(time.Hour), factor: 1}}
	plan, _ = e.oraclePlan(r)
	require.Equal(t, []string{"cold", "fast-dear", "warm", "cheap-slow"}, names(plan), "the slow ones after, fastest first")

	// cold at its queue's limit: 1.5 s × 3 = 4.5 s, too slow; fast-dear is all that qualifies, so no hedge.
	cold := e.providers["cold/m"]
	cold.cfg.Queue = Queue{Concurrency: 1, Slope: 1}
	cold.inflight = 2
	plan, h = e.oraclePlan(r)
	require.Equal(t, "fast-dear", plan[0].GetProvider())
	require.Equal(t, switchboardv1.HedgeMode_HEDGE_MODE_NONE, h.GetMode())
}

// TestHedgeLoserWarmsCache: with the setting, the cancelled leg of a hedge
// leaves the prompt in its provider's cache, so the conversation's next
// turn there reads it; without it, only the winner's cache is warm.
func TestHedgeLoserWarmsCache(t *testing.T) {
	t.Parallel()
	p, err := ParseProfile([]byte(`models:
  - id: m
    providers:
      - name: a
        price: {input: 0.1, cached_input: 0.01, output: 0.4}
        ttft: {curve: [{tokens: 0, ttft: 500ms}, {tokens: 200000, ttft: 3s}]}
        output_tokens_per_second: 50
        cache: {hit_rate: 1}
      - name: b
        price: {input: 0.12, cached_input: 0.01, output: 0.4}
        ttft: {curve: [{tokens: 0, ttft: 500ms}, {tokens: 200000, ttft: 3s}], spread: 0.5}
        output_tokens_per_second: 50
        cache: {hit_rate: 1}
`))
	require.NoError(t, err)
	tr, err := ParseTraffic([]byte(`model: m
requests: 600
duration: 2h
stream_share: 1
output: {median: 50}
one_off: {share: 0}
conversations:
  turns: {min: 4, max: 6}
  first_prompt: {min: 130000, max: 140000}
  last_prompt: {min: 150000, max: 160000}
  think_time: {median: 10s}
`))
	require.NoError(t, err)
	warmLosers := func(o Options) (losers, warm int) {
		e, err := newEngine(p, tr, nil, Policy{Name: "oracle", Oracle: true}, 1, o)
		require.NoError(t, err)
		e.run()
		for _, r := range e.res.recs {
			if r.hedged {
				losers++
			}
		}
		for _, pv := range e.providers {
			warm += len(pv.cache)
		}
		return losers, warm
	}
	hedged, without := warmLosers(Options{HedgeBudgetBurst: 24 * time.Hour})
	require.Positive(t, hedged, "over 128k both legs start at once")
	_, with := warmLosers(Options{HedgeBudgetBurst: 24 * time.Hour, HedgeLoserWarmsCache: true})
	require.Greater(t, with, without, "sessions cached on both providers")

	// The profile's field does it for one provider.
	pv := newProvider(priced(Provider{Cache: CacheModel{HitRate: 1, Lifetime: Duration(time.Minute), CancelledLegWarms: true}}), "p/m")
	require.True(t, pv.cfg.Cache.CancelledLegWarms)
}
