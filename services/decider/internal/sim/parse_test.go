package sim

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const goodProfile = `models:
  - id: m
    list_price: {input: 1, output: 2}
    providers:
      - name: fast
        price: {input: 1, cached_input: 0.1, output: 2}
        context_length: 128k
        ttft:
          curve:
            - {tokens: 0, ttft: 200ms}
            - {tokens: 100000, ttft: 2s}
        output_tokens_per_second: 100
`

func TestParseProfile(t *testing.T) {
	t.Parallel()
	p, err := ParseProfile([]byte(goodProfile))
	require.NoError(t, err)
	pr := p.Models[0].Providers[0]
	require.Equal(t, Tokens(128*1024), pr.ContextLength)
	require.Equal(t, 0.1, *pr.Price.CachedInput)
	require.Equal(t, 5*time.Minute, pr.Cache.Lifetime.D(), "default cache lifetime")
	require.Equal(t, 30*time.Second, pr.Capacity.RetryAfter.D(), "default Retry-After")
	require.Equal(t, 50.0, pr.TTFT.Tail.MaxFactor, "default tail cap")
	require.Zero(t, pr.Queue.Concurrency, "no queue unless asked")

	p, err = ParseProfile([]byte(goodProfile + `        queue: {concurrency: 8}
        random_slow: [{per_hour: 0.5, duration: {median: 10m}, factor: 3}]
        cache: {hit_rate: 0.9, cancelled_leg_warms: true}
`))
	require.NoError(t, err)
	pr = p.Models[0].Providers[0]
	require.Equal(t, Queue{Concurrency: 8, Slope: 1}, pr.Queue, "default slope")
	require.Equal(t, 4*time.Hour, pr.RandomSlow[0].Duration.Max.D(), "default longest episode")
	require.True(t, pr.Cache.CancelledLegWarms)

	p, err = ParseProfile([]byte(goodProfile + "        errors: {outages: [{from: \"00:01:30\", duration: 20s}]}\n"))
	require.NoError(t, err)
	require.Equal(t, []Outage{{From: ClockTime(90 * time.Second), Duration: Duration(20 * time.Second)}}, p.Models[0].Providers[0].Errors.Outages,
		"a time of day with seconds")
}

// TestParseProfileErrors checks that each mistake is reported with its line
// and field, every one at once.
func TestParseProfileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(string) string
		want []string // substrings of the error, in order
	}{
		{"empty", func(string) string { return "" }, []string{"profile: profile: is empty"}},
		{"no models", func(string) string { return "models: []\n" }, []string{"line 1: models: at least one model is required"}},
		{"unknown field", func(s string) string { return strings.Replace(s, "context_length", "context_size", 1) },
			[]string{"line 7", "context_size"}},
		{"bad duration", func(s string) string { return strings.Replace(s, "200ms", "fast", 1) },
			[]string{"line 10", `"fast" is not a duration`}},
		{"bad tokens", func(s string) string { return strings.Replace(s, "128k", "lots", 1) },
			[]string{"line 7", `"lots" is not a token count`}},
		{"missing input price", func(s string) string {
			return strings.Replace(s, "{input: 1, cached_input: 0.1, output: 2}", "{output: 2}", 1)
		},
			[]string{"line 6: models[0].providers[0].price.input: is required"}},
		{"negative price", func(s string) string { return strings.Replace(s, "cached_input: 0.1", "cached_input: -0.1", 1) },
			[]string{"line 6: models[0].providers[0].price.cached_input: must be a non-negative number"}},
		{"curve not ascending", func(s string) string { return strings.Replace(s, "tokens: 100000", "tokens: 0", 1) },
			[]string{"line 11: models[0].providers[0].ttft.curve[1].tokens: must be larger than the previous point's"}},
		{"every mistake at once", func(s string) string {
			s = strings.Replace(s, "output_tokens_per_second: 100", "output_tokens_per_second: 0", 1)
			return strings.Replace(s, "name: fast", "name: \"\"", 1)
		}, []string{"line 5: models[0].providers[0].name: is required", "line 12: models[0].providers[0].output_tokens_per_second: must be positive"}},
		{"duplicate provider", func(s string) string {
			return s + `      - name: fast
        price: {input: 1, output: 2}
        ttft: {curve: [{tokens: 0, ttft: 1s}]}
        output_tokens_per_second: 10
`
		}, []string{`line 13: models[0].providers[1].name: provider "fast" appears twice`}},
		{"share out of range", func(s string) string { return s + "        cache: {hit_rate: 1.5}\n" },
			[]string{"line 13: models[0].providers[0].cache.hit_rate: must be a share in [0, 1]"}},
		{"slow episode", func(s string) string { return s + "        slow: [{from: \"25:00\", duration: 1h, factor: 2}]\n" },
			[]string{"line 13", `"25:00" is not a time of day`}},
		{"queue", func(s string) string { return s + "        queue: {concurrency: -1, slope: 200}\n" },
			[]string{"line 13: models[0].providers[0].queue.concurrency: must not be negative",
				"line 13: models[0].providers[0].queue.slope: must be in [0, 100]"}},
		{"queue slope without concurrency", func(s string) string { return s + "        queue:\n          slope: 2\n" },
			[]string{"line 14: models[0].providers[0].queue.concurrency: must be positive when queue.slope is set"}},
		{"random slow episodes", func(s string) string {
			return s + `        random_slow:
          - per_hour: 0
            duration: {median: 0s, spread: 4, max: 25h}
            factor: 2
            factor_max: 1
`
		}, []string{"line 14: models[0].providers[0].random_slow[0].per_hour: must be in (0, 60]",
			"line 15: models[0].providers[0].random_slow[0].duration.median: must be positive",
			"line 15: models[0].providers[0].random_slow[0].duration.spread: must be in [0, 3]",
			"line 15: models[0].providers[0].random_slow[0].duration.max: must be in [0, 24h]",
			"line 17: models[0].providers[0].random_slow[0].factor_max: must be at least factor and at most 1000"}},
		{"outage without duration", func(s string) string { return s + "        errors: {outages: [{from: \"00:01\"}]}\n" },
			[]string{"line 13: models[0].providers[0].errors.outages[0].duration: must be positive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseProfile([]byte(tt.edit(goodProfile)))
			require.Error(t, err)
			msg := err.Error()
			at := 0
			for _, w := range tt.want {
				i := strings.Index(msg[at:], w)
				require.GreaterOrEqual(t, i, 0, "want %q in %q", w, msg)
				at += i + len(w)
			}
		})
	}
}

const goodTraffic = `model: m
requests: 100
stream_share: 0.5
output: {median: 200}
one_off:
  share: 0.5
  sizes:
    - {share: 1, min: 10, max: 100k}
conversations:
  turns: {min: 2, max: 5}
  first_prompt: {min: 60000, max: 70000}
  last_prompt: {min: 120000, max: 130000}
  think_time: {median: 20s}
`

func TestParseTraffic(t *testing.T) {
	t.Parallel()
	tr, err := ParseTraffic([]byte(goodTraffic))
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, tr.Duration.D())
	require.Equal(t, time.Date(2026, 10, 28, 0, 0, 0, 0, time.UTC), tr.Start)
	require.Equal(t, Tokens(100*1024), tr.OneOff.Sizes[0].Max)
	require.Equal(t, 30*time.Minute, tr.Conversations.ThinkTime.Max.D())
}

func TestParseTrafficSharedSystem(t *testing.T) {
	t.Parallel()
	tr, err := ParseTraffic([]byte(goodTraffic + "  shared_system: {share: 0.8, prompts: 3, tokens: 20k}\n"))
	require.NoError(t, err)
	require.Equal(t, &SharedSystem{Share: 0.8, Prompts: 3, Tokens: 20 * 1024}, tr.Conversations.SharedSystem)
	// Every conversation that draws one starts with one of the three, no
	// larger than its first prompt; the rest with none.
	seen := map[int]int{}
	for _, s := range tr.sessions(1) {
		if s.conversation {
			seen[s.system.id]++
			if s.system.id > 0 {
				require.LessOrEqual(t, s.system.tokens, s.turns[0].prompt)
			}
		}
	}
	require.Len(t, seen, 4, "none, and each of the three")
}

func TestParseTrafficErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(string) string
		want string
	}{
		{"no model", func(s string) string { return strings.Replace(s, "model: m", "model: \"\"", 1) }, "line 1: model: is required"},
		{"no requests", func(s string) string { return strings.Replace(s, "requests: 100", "requests: 0", 1) }, "line 2: requests: must be in [1, 10000000]"},
		{"stream share", func(s string) string { return strings.Replace(s, "stream_share: 0.5", "stream_share: 2", 1) }, "line 3: stream_share: must be a share in [0, 1]"},
		{"band", func(s string) string { return strings.Replace(s, "min: 10, max: 100k", "min: 100k, max: 10", 1) }, "line 8: one_off.sizes[0]: min must be positive and max at least min"},
		{"conversations missing", func(s string) string { return s[:strings.Index(s, "conversations:")] }, "conversations: is required unless one_off.share is 1"},
		{"range", func(s string) string {
			return strings.Replace(s, "turns: {min: 2, max: 5}", "turns: {min: 5, max: 2}", 1)
		}, "line 10: conversations.turns: min must be positive and max at least min"},
		{"think time", func(s string) string { return strings.Replace(s, "median: 20s", "median: 0s", 1) }, "line 13: conversations.think_time.median: must be positive"},
		{"sort", func(s string) string { return s + "user_options: {share: 0.1, sort: cheapest}\n" }, "line 14: user_options.sort: must be price, latency or throughput"},
		{"unknown field", func(s string) string { return s + "rate: 5\n" }, "line 14: field rate not found"},
		{"shared system share", func(s string) string { return s + "  shared_system: {share: 2, tokens: 20k}\n" }, "conversations.shared_system.share: must be a share in [0, 1]"},
		{"shared system tokens", func(s string) string { return s + "  shared_system: {share: 0.5}\n" }, "conversations.shared_system.tokens: must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTraffic([]byte(tt.edit(goodTraffic)))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestParseTrace(t *testing.T) {
	t.Parallel()
	recs, err := ParseTrace(strings.NewReader(`{"at": 5, "conversation": "a", "prompt_tokens": 60000, "output_tokens": 300, "stream": true}

{"at": 1.5, "prompt_tokens": "2k", "output_tokens": 10, "sort": "latency"}
`))
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, 1.5, recs[0].At, "sorted by arrival")
	require.Equal(t, Tokens(2048), recs[0].PromptTokens)
	require.Equal(t, "a", recs[1].Conversation)
}

func TestParseTraceErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		line           int
	}{
		{"not json", "{\"at\": 1, \"prompt_tokens\": 5, \"output_tokens\": 1}\nnope\n", "trace: line 2", 2},
		{"unknown field", `{"at": 1, "prompt_tokens": 5, "output_tokens": 1, "tenant": "x"}`, `trace: line 1: record: json: unknown field "tenant"`, 1},
		{"negative at", `{"at": -1, "prompt_tokens": 5, "output_tokens": 1}`, "trace: line 1: record: at must be seconds in [0, one year]", 1},
		{"no prompt", `{"at": 1, "output_tokens": 1}`, "trace: line 1: record: prompt_tokens must be positive", 1},
		{"bad sort", `{"at": 1, "prompt_tokens": 5, "output_tokens": 1, "sort": "cost"}`, "trace: line 1: record: sort must be price, latency or throughput", 1},
		{"two objects", `{"at": 1, "prompt_tokens": 5, "output_tokens": 1} {}`, "trace: line 1: record: one JSON object per line", 1},
		{"huge tokens", `{"at": 1, "prompt_tokens": 1e300, "output_tokens": 1}`, "is not a token count", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTrace(strings.NewReader(tt.in))
			require.ErrorContains(t, err, tt.want)
			var fe *FieldError
			require.True(t, errors.As(err, &fe))
			require.Equal(t, tt.line, fe.Line)
		})
	}
}

// TestShippedInputs parses the profile and traffic make sim runs.
func TestShippedInputs(t *testing.T) {
	t.Parallel()
	pd, err := os.ReadFile("../../../../sim/profile.yaml")
	require.NoError(t, err)
	td, err := os.ReadFile("../../../../sim/traffic.yaml")
	require.NoError(t, err)
	p, err := ParseProfile(pd)
	require.NoError(t, err)
	tr, err := ParseTraffic(td)
	require.NoError(t, err)
	require.Equal(t, 20000, tr.Requests)
	require.Len(t, p.Models[0].Providers, 4)
}
