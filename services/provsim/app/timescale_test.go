package app

import (
	"log/slog"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTimeScaleRetryAfter: a scaled simulator sends a scaled Retry-After,
// for a drawn fault and for a quota.
func TestTimeScaleRetryAfter(t *testing.T) {
	t.Parallel()
	sim, err := Start(t.Context(), Config{
		Seed: 1, TimeScale: 0.05,
		Providers: []ProviderConfig{{Name: "p", Listen: "127.0.0.1:0", Models: []ModelConfig{
			{ID: "fault", Faults: []FaultConfig{{Kind: FaultRateLimit, Rate: 1, RetryAfter: Duration(20 * time.Second)}}},
			{ID: "quota", Limits: LimitsConfig{RequestsPerMinute: 1}},
		}}},
	}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	p, c := sim.Provider("p"), newClient(t)

	resp := do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("fault", "hi")), nil)
	require.Equal(t, 429, resp.status)
	require.Equal(t, "1", resp.header.Get("Retry-After"))
	require.Equal(t, "1000", resp.header.Get("Retry-After-Ms"))

	require.Equal(t, 200, do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("quota", "hi")), nil).status)
	resp = do(t, c, http.MethodPost, p.URL()+"/chat/completions", chatBody(t, userMsg("quota", "hi")), nil)
	require.Equal(t, 429, resp.status)
	ms, err := time.ParseDuration(resp.header.Get("Retry-After-Ms") + "ms")
	require.NoError(t, err)
	require.Positive(t, ms)
	require.LessOrEqual(t, ms, 3*time.Second, "a minute's reset times 0.05")
}

// TestFirstTokenDelayScaleAndSpread: the delay is the curve times the time
// scale, and with a spread its logarithm is normal around the curve's with
// that standard deviation.
func TestFirstTokenDelayScaleAndSpread(t *testing.T) {
	t.Parallel()
	m := ModelConfig{ID: "m", TTFT: TTFTConfig{Base: Duration(2 * time.Second)}}
	p := newProvider(ProviderConfig{Name: "p"}, 1, 0.05, slog.New(slog.DiscardHandler), options{now: time.Now})
	require.Equal(t, 100*time.Millisecond, p.firstTokenDelay(m, 1000, 0))
	require.Equal(t, 2*time.Second, newProvider(ProviderConfig{Name: "p"}, 1, 0, nil, options{now: time.Now}).firstTokenDelay(m, 1000, 0),
		"time scale 0 is 1")

	m.TTFT.Spread = 0.5
	const n = 4000
	var sum, sum2 float64
	for range n {
		x := math.Log(float64(p.firstTokenDelay(m, 1000, 0)) / float64(100*time.Millisecond))
		sum += x
		sum2 += x * x
	}
	mean := sum / n
	sd := math.Sqrt(sum2/n - mean*mean)
	// Standard errors: 0.5/√4000 ≈ 0.008 for the mean, ≈ 0.006 for the sd.
	require.InDelta(t, 0, mean, 0.04)
	require.InDelta(t, 0.5, sd, 0.03)
}

func TestTimeScaleAndSpreadValidation(t *testing.T) {
	t.Parallel()
	_, err := ParseConfig([]byte(`
time_scale: -1
providers: [{name: a, listen: ':1', models: [{id: m, ttft: {spread: 4}}]}]`))
	require.ErrorContains(t, err, "time_scale: must be a finite number above 0")
	require.ErrorContains(t, err, "providers[0].models[0].ttft.spread: must be between 0 and 3")

	cfg, err := ParseConfig([]byte(`
time_scale: 0.05
providers: [{name: a, listen: ':1', models: [{id: m, ttft: {base: 1s, spread: 0.4}}]}]`))
	require.NoError(t, err)
	require.InDelta(t, 0.05, cfg.TimeScale, 1e-12)
	require.InDelta(t, 0.4, cfg.Providers[0].Models[0].TTFT.Spread, 1e-12)

	var stderr syncBuffer
	err = Run(t.Context(), []string{"--config", "c.yaml", "--time-scale", "0"}, &stderr)
	require.ErrorContains(t, err, "--time-scale: want a finite number above 0")
}
