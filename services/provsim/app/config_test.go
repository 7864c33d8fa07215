package app

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const validYAML = `
seed: 7
providers:
  - name: alpha
    listen: 127.0.0.1:0
    api_key: k
    models:
      - id: m
        ttft:
          base: 300ms
          per_1k_tokens: 120ms
          per_1k_cached_tokens: 10ms
          jitter: 0.1
          by_bucket:
            ">128k": {base: 2s, per_1k_tokens: 200ms}
        tokens_per_second: 40
        max_output_tokens: 100
        cache: {enabled: true, ttl: 1m}
        faults:
          - {kind: rate_limit, rate: 0.1, retry_after: 2s}
          - {kind: drop, rate: 0.05}
        limits: {requests_per_minute: 60, tokens_per_minute: 100000}
`

func TestParseConfig(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte(validYAML))
	require.NoError(t, err)
	require.Equal(t, int64(7), cfg.Seed)
	require.Len(t, cfg.Providers, 1)
	m := cfg.Providers[0].Models[0]
	require.Equal(t, Duration(300*time.Millisecond), m.TTFT.Base)
	require.Equal(t, TTFTCurve{Base: Duration(2 * time.Second), Per1KTokens: Duration(200 * time.Millisecond)}, m.TTFT.ByBucket[">128k"])
	// Defaults are filled in.
	require.Equal(t, int64(DefaultOutputTokens), m.DefaultOutputTokens)
	require.Equal(t, CacheConfig{Enabled: true, BlockTokens: 128, MinTokens: 1024, TTL: Duration(time.Minute), MaxEntries: 10000}, m.Cache)
	require.Equal(t, FaultConfig{Kind: FaultRateLimit, Rate: 0.1, AfterTokens: 3, RetryAfter: Duration(2 * time.Second), Status: 503}, m.Faults[0])
	require.Equal(t, FaultConfig{Kind: FaultDrop, Rate: 0.05, AfterTokens: 3, RetryAfter: Duration(time.Second), Status: 503}, m.Faults[1])
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want []string // every problem must be reported, at once
	}{
		{name: "empty", yaml: ``, want: []string{"providers: at least one provider is required"}},
		{name: "unknown field", yaml: "providers: [{name: a, listen: ':1', modles: []}]", want: []string{"field modles not found"}},
		{name: "bare number duration", yaml: "providers: [{name: a, listen: ':1', models: [{id: m, ttft: {base: 300}}]}]", want: []string{"missing unit"}},
		{
			name: "all problems at once",
			yaml: `
providers:
  - name: a
    listen: nope
    models:
      - id: m
        ttft: {base: -1s, jitter: 2, by_bucket: {"huge": {base: 1s}, "8k-32k": {per_1k_tokens: -1ms}}}
        tokens_per_second: -1
        default_output_tokens: -1
        max_output_tokens: -2
        cache: {block_tokens: -1, min_tokens: -1, ttl: -1s, max_entries: -1}
        faults:
          - {kind: explode, rate: 0.7}
          - {kind: drop, rate: 0.6, after_tokens: -1, retry_after: -1s}
          - {kind: unavailable, rate: 2, status: 404}
        limits: {requests_per_minute: -1, tokens_per_minute: -1}
        refusals:
          - {match: "", status: 500}
          - {match: poison, status: 200}
      - id: m
  - name: a
    listen: 127.0.0.1:99999
    models: []
  - listen: 127.0.0.1:9000
    models: [{}]
  - name: b
    listen: 127.0.0.1:9000
    models: [{id: x}]
`,
			want: []string{
				"providers[0].listen: address nope: missing port in address",
				"providers[0].models[0].ttft.base: must not be negative",
				"providers[0].models[0].ttft.jitter: must be between 0 and 1",
				`providers[0].models[0].ttft.by_bucket: unknown bucket "huge"`,
				`providers[0].models[0].ttft.by_bucket["8k-32k"].per_1k_tokens: must not be negative`,
				"providers[0].models[0].tokens_per_second:",
				"providers[0].models[0].default_output_tokens: must not be negative",
				"providers[0].models[0].max_output_tokens: must not be negative",
				"providers[0].models[0].cache.block_tokens: must not be negative",
				"providers[0].models[0].cache.min_tokens: must not be negative",
				"providers[0].models[0].cache.ttl: must not be negative",
				"providers[0].models[0].cache.max_entries: must not be negative",
				`providers[0].models[0].faults[0].kind: unknown fault "explode"`,
				"providers[0].models[0].faults[1].after_tokens: must not be negative",
				"providers[0].models[0].faults[1].retry_after: must not be negative",
				"providers[0].models[0].faults[2].rate: must be between 0 and 1",
				"providers[0].models[0].faults[2].status: must be a 5xx code",
				"providers[0].models[0].faults: rates add up to",
				"providers[0].models[0].limits.requests_per_minute: must not be negative",
				"providers[0].models[0].limits.tokens_per_minute: must not be negative",
				"providers[0].models[0].refusals[0].match: must not be empty",
				"providers[0].models[0].refusals[1].status: must be a 4xx or 5xx code",
				`providers[0].models[1].id: "m" already used by models[0]`,
				`providers[1].name: "a" already used by providers[0]`,
				`providers[1].listen: invalid port "99999"`,
				"providers[1].models: at least one model is required",
				"providers[2].name: required",
				"providers[2].models[0].id: required",
				`providers[3].listen: "127.0.0.1:9000" already used by providers[2]`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(tt.yaml))
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(validYAML), 0o600))
	cfg, err := LoadConfig(path)
	require.NoError(t, err)
	require.Equal(t, "alpha", cfg.Providers[0].Name)

	_, err = LoadConfig(filepath.Join(dir, "missing.yaml"))
	require.ErrorContains(t, err, "read config")

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("providers: [{}]"), 0o600))
	_, err = LoadConfig(bad)
	require.ErrorContains(t, err, bad)
	require.ErrorContains(t, err, "providers[0].name: required")
}

// TestDemoConfig keeps the demo file valid and shaped as the demo expects.
func TestDemoConfig(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig("../demo.yaml")
	require.NoError(t, err)
	require.Len(t, cfg.Providers, 4)
	for i, want := range []struct{ name, listen string }{{"alpha", "127.0.0.1:9101"}, {"beta", "127.0.0.1:9102"},
		{"gamma", "127.0.0.1:9103"}, {"delta", "127.0.0.1:9104"}} {
		p := cfg.Providers[i]
		require.Equal(t, want.name, p.Name)
		require.Equal(t, want.listen, p.Listen)
		require.Empty(t, p.APIKey)
		require.Equal(t, "deepseek-v4.1-flash", p.Models[0].ID)
		require.True(t, p.Models[0].Cache.Enabled)
		require.Empty(t, p.Models[0].Faults)
	}
	// alpha is the cheap one that is slow on long prompts: slower than beta at 100k tokens.
	alpha, beta := cfg.Providers[0].Models[0], cfg.Providers[1].Models[0]
	require.Greater(t, alpha.FirstTokenDelay(100_000, 0), 5*beta.FirstTokenDelay(100_000, 0))
}

func TestFirstTokenDelay(t *testing.T) {
	t.Parallel()
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	m := ModelConfig{TTFT: TTFTConfig{
		Base:              Duration(ms(300)),
		Per1KTokens:       Duration(ms(120)),
		Per1KCachedTokens: Duration(ms(10)),
		ByBucket: map[string]TTFTCurve{
			"32k-128k": {Base: Duration(ms(1000)), Per1KTokens: Duration(ms(200))},
		},
	}}
	tests := []struct {
		name           string
		prompt, cached int64
		want           time.Duration
	}{
		{name: "empty prompt is the base", prompt: 0, want: ms(300)},
		{name: "<8k uncached", prompt: 2048, want: ms(300 + 2*120)},
		{name: "<8k half cached", prompt: 2048, cached: 1024, want: ms(300 + 120 + 10)},
		{name: "8k-32k uses the default curve", prompt: 16 * 1024, want: ms(300 + 16*120)},
		{name: "32k-128k uses its bucket curve", prompt: 64 * 1024, want: ms(1000 + 64*200)},
		{name: "bucket curve without cached rate", prompt: 64 * 1024, cached: 32 * 1024, want: ms(1000 + 32*200)},
		{name: ">128k falls back to default curve", prompt: 128 * 1024, want: ms(300 + 128*120)},
		{name: "fractional thousands", prompt: 512, want: ms(300 + 60)},
		{name: "cached above prompt is clamped", prompt: 1024, cached: 4096, want: ms(300 + 10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, m.FirstTokenDelay(tt.prompt, tt.cached))
		})
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	d := time.Second
	tests := []struct {
		name   string
		jitter float64
		u      float64
		want   time.Duration
	}{
		{name: "no jitter", jitter: 0, u: 0.9, want: d},
		{name: "lowest draw", jitter: 0.2, u: 0, want: 800 * time.Millisecond},
		{name: "middle draw", jitter: 0.2, u: 0.5, want: d},
		{name: "high draw", jitter: 0.2, u: 0.75, want: 1100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.InDelta(t, float64(tt.want), float64(TTFTConfig{Jitter: tt.jitter}.jittered(d, tt.u)), float64(time.Microsecond))
		})
	}
}

func TestOutputLength(t *testing.T) {
	t.Parallel()
	p := func(n int64) *int64 { return &n }
	tests := []struct {
		name       string
		cfg        ModelConfig
		max        *int64
		wantN      int64
		wantReason string
	}{
		{name: "default", cfg: ModelConfig{DefaultOutputTokens: 16}, wantN: 16, wantReason: "stop"},
		{name: "max tokens", cfg: ModelConfig{DefaultOutputTokens: 16}, max: p(5), wantN: 5, wantReason: "length"},
		{name: "max above default", cfg: ModelConfig{DefaultOutputTokens: 16}, max: p(50), wantN: 50, wantReason: "length"},
		{name: "capped by model", cfg: ModelConfig{DefaultOutputTokens: 16, MaxOutputTokens: 8}, max: p(50), wantN: 8, wantReason: "length"},
		{name: "default capped by model", cfg: ModelConfig{DefaultOutputTokens: 16, MaxOutputTokens: 8}, wantN: 8, wantReason: "length"},
		{name: "near 2^63 without a model cap", cfg: ModelConfig{DefaultOutputTokens: 16}, max: p(math.MaxInt64), wantN: MaxGeneratedTokens, wantReason: "length"},
		{name: "near 2^63 above the model cap", cfg: ModelConfig{DefaultOutputTokens: 16, MaxOutputTokens: 1 << 40}, max: p(math.MaxInt64), wantN: MaxGeneratedTokens, wantReason: "length"},
		{name: "default above the bound", cfg: ModelConfig{DefaultOutputTokens: 1 << 40}, wantN: MaxGeneratedTokens, wantReason: "length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, reason := outputLength(tt.cfg, tt.max)
			require.Equal(t, tt.wantN, n)
			require.Equal(t, tt.wantReason, reason)
		})
	}
}

func TestOutputWords(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"ok"}, outputWords(""))
	require.Equal(t, []string{"ok"}, outputWords("  [[provsim:fault=drop]] "))
	require.Equal(t, []string{"say", "hi", "now"}, outputWords("say[[provsim:fault=drop]]hi\n now"))
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	var d Duration
	require.NoError(t, d.UnmarshalJSON([]byte(`"250ms"`)))
	require.Equal(t, Duration(250*time.Millisecond), d)
	require.NoError(t, d.UnmarshalJSON([]byte(`1000`)))
	require.Equal(t, Duration(1000), d)
	require.Error(t, d.UnmarshalJSON([]byte(`"soon"`)))
	require.Error(t, d.UnmarshalJSON([]byte(`{}`)))
	b, err := Duration(1500 * time.Millisecond).MarshalJSON()
	require.NoError(t, err)
	require.JSONEq(t, `"1.5s"`, string(b))
}
