package sim

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func shipped(t testing.TB) (*Profile, *Traffic) {
	t.Helper()
	pd, err := os.ReadFile("../../../../sim/profile.yaml")
	require.NoError(t, err)
	td, err := os.ReadFile("../../../../sim/traffic.yaml")
	require.NoError(t, err)
	p, err := ParseProfile(pd)
	require.NoError(t, err)
	tr, err := ParseTraffic(td)
	require.NoError(t, err)
	return p, tr
}

// TestDeterministic runs the same day twice with the same seed: the tables
// must be identical byte for byte; another seed must change them.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	p, tr := shipped(t)
	tr.Requests = 1000
	table := func(seed uint64) string {
		var sums []Summary
		for _, pol := range Policies[:2] {
			res, err := Run(p, tr, nil, pol, seed, Options{})
			require.NoError(t, err)
			sums = append(sums, Summary{Policy: pol.Name, Runs: []*Result{res}})
		}
		var b bytes.Buffer
		require.NoError(t, WriteTable(&b, sums))
		return b.String()
	}
	a := table(7)
	require.Equal(t, a, table(7))
	require.NotEqual(t, a, table(8))
}

// TestVirtualClock checks that time in a run is the engine's: a day of
// arrivals, 15-minute cool-downs and minutes-long think times all pass
// without the test waiting for them, and events run in time order, those
// at the same time in the order they were scheduled.
func TestVirtualClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 10, 28, 0, 0, 0, 0, time.UTC)
	e := &engine{now: start}
	var got []int
	e.at(start.Add(time.Hour), func() { got = append(got, 3) })
	e.at(start.Add(time.Minute), func() {
		got = append(got, 1)
		e.at(start, func() { got = append(got, 2) }) // in the past: runs now, after what is due
	})
	e.at(start.Add(time.Hour), func() { got = append(got, 4) })
	var seen []time.Time
	for len(e.events) > 0 {
		ev := e.events.pop()
		e.now = ev.t
		seen = append(seen, e.now)
		ev.fn()
	}
	require.Equal(t, []int{1, 2, 3, 4}, got)
	require.Equal(t, []time.Time{start.Add(time.Minute), start.Add(time.Minute), start.Add(time.Hour), start.Add(time.Hour)}, seen)

	p, tr := shipped(t)
	tr.Requests = 300
	res, err := Run(p, tr, nil, Policies[1], 1, Options{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.End.Sub(tr.Start), 24*time.Hour, "a whole simulated day passed")
	require.Greater(t, res.Probes, int64(24*12*4*2), "probes every 5 virtual minutes")
}

// TestSmartPicksFastForLongPrompts is a day whose outcome is known: one
// provider is cheap but slow on long prompts, the other fast and dearer.
// The baseline sends everything to the cheap one; smart routing sends long
// prompts to the fast one and short ones, where the cheap one is fast
// enough, to the cheap one.
func TestSmartPicksFastForLongPrompts(t *testing.T) {
	t.Parallel()
	p, err := ParseProfile([]byte(`models:
  - id: m
    providers:
      - name: cheap
        price: {input: 0.1, output: 0.4}
        ttft: {curve: [{tokens: 0, ttft: 300ms}, {tokens: 100000, ttft: 20s}]}
        output_tokens_per_second: 50
      - name: fast
        price: {input: 0.2, output: 0.8}
        ttft: {curve: [{tokens: 0, ttft: 300ms}, {tokens: 100000, ttft: 2s}]}
        output_tokens_per_second: 50
`))
	require.NoError(t, err)
	tr, err := ParseTraffic([]byte(`model: m
requests: 2000
duration: 4h
stream_share: 0
output: {median: 100}
one_off:
  share: 1
  sizes:
    - {share: 1, min: 100, max: 2000}
    - {share: 1, min: 60000, max: 100000}
`))
	require.NoError(t, err)
	base, err := Run(p, tr, nil, Policies[0], 1, Options{})
	require.NoError(t, err)
	smart, err := Run(p, tr, nil, Policy{Name: "smart"}, 1, Options{})
	require.NoError(t, err)

	require.Equal(t, 1.0, base.Served()["cheap"])
	require.Greater(t, smart.Served()["fast"], 0.9, "long prompts go to the fast provider")
	short := 0
	for _, r := range smart.recs {
		if r.prompt <= 2000 && r.provider == "cheap" {
			short++
		}
	}
	require.Greater(t, short, 800, "short prompts stay on the cheap provider")
	b, s := base.Figures(), smart.Figures()
	// Non-streamed: the first byte comes with the whole answer, 2 s after
	// the first token (100 tokens at 50/s).
	require.Greater(t, b["ttft_p50_32k_128k"], 15.0)
	require.Less(t, s["ttft_p50_32k_128k"], 4.5)
}

// TestCapacityAndCooldown: a provider over its capacity answers 429 with
// Retry-After; the decider pauses it and requests go elsewhere.
func TestCapacityAndCooldown(t *testing.T) {
	t.Parallel()
	p, err := ParseProfile([]byte(`models:
  - id: m
    providers:
      - name: small
        price: {input: 0.1, output: 0.1}
        ttft: {curve: [{tokens: 0, ttft: 500ms}]}
        output_tokens_per_second: 50
        capacity: {requests_per_minute: 2, retry_after: 10s}
      - name: big
        price: {input: 0.3, output: 0.3}
        ttft: {curve: [{tokens: 0, ttft: 500ms}]}
        output_tokens_per_second: 50
`))
	require.NoError(t, err)
	tr, err := ParseTraffic([]byte(`model: m
requests: 3000
duration: 1h
output: {median: 50}
one_off: {share: 1, sizes: [{share: 1, min: 100, max: 1000}]}
`))
	require.NoError(t, err)
	res, err := Run(p, tr, nil, Policy{Name: "smart"}, 1, Options{ProbeInterval: -1})
	require.NoError(t, err)
	f := res.Figures()
	require.Greater(t, f["share_met_429"], 0.0)
	require.Positive(t, res.Paused+res.Benched)
	require.Zero(t, f["failed"], "a 429 is retried on the other provider")
	served := map[string]int{}
	for _, r := range res.recs {
		served[r.provider]++
	}
	require.Greater(t, served["big"], served["small"], "the small provider takes at most 2 a minute")
}

// TestTrace replays a recorded trace: a conversation's turns read the
// previous turn from the provider's cache.
func TestTrace(t *testing.T) {
	t.Parallel()
	p, err := ParseProfile([]byte(`models:
  - id: m
    providers:
      - name: only
        price: {input: 1, cached_input: 0.1, output: 1}
        ttft: {curve: [{tokens: 0, ttft: 100ms}, {tokens: 100000, ttft: 1s}]}
        output_tokens_per_second: 100
        cache: {hit_rate: 1}
`))
	require.NoError(t, err)
	tr, err := ParseTraffic([]byte("model: m\nrequests: 1\noutput: {median: 1}\none_off: {share: 1, sizes: [{share: 1, min: 1, max: 1}]}\n"))
	require.NoError(t, err)
	recs, err := ParseTrace(bytes.NewReader([]byte(`{"at": 0, "conversation": "c", "prompt_tokens": 60000, "output_tokens": 10, "stream": true}
{"at": 30, "conversation": "c", "prompt_tokens": 70000, "output_tokens": 10, "stream": true}
{"at": 40, "prompt_tokens": 1000, "output_tokens": 10}
`)))
	require.NoError(t, err)
	res, err := Run(p, tr, recs, Policy{Name: "smart"}, 1, Options{ProbeInterval: -1})
	require.NoError(t, err)
	require.Len(t, res.recs, 3)
	cached := map[int64]int64{}
	for _, r := range res.recs {
		require.True(t, r.ok)
		cached[r.prompt] = r.cached
	}
	require.Equal(t, map[int64]int64{60000: 0, 70000: 60000, 1000: 0}, cached)
}

// BenchmarkRunDay runs the shipped day of 20,000 requests under smart routing.
func BenchmarkRunDay(b *testing.B) {
	p, tr := shipped(b)
	for b.Loop() {
		if _, err := Run(p, tr, nil, Policy{Name: "smart"}, 1, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPromptHashes: the prefix hashes are FNV-1a of "system/<id>" and
// "<session>/<turn>" with the low bit set, as hash/fnv computes them, so
// a recorded run's prefixes keep their values.
func TestPromptHashes(t *testing.T) {
	t.Parallel()
	want := func(s string) uint64 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(s))
		return h.Sum64() | 1
	}
	for _, n := range []int{0, 1, 7, 12345, -3, math.MaxInt} {
		require.Equal(t, want(fmt.Sprintf("system/%d", n)), systemHash(n))
		require.Equal(t, want(fmt.Sprintf("%d/%d", n, n/2)), promptHash(n, n/2))
	}
}
