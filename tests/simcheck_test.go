package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	"github.com/switchboard-ai/switchboard/services/decider/simulate"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// The check of the routing simulation against the real system: the trace
// of sim/check runs through the simulation in virtual time (simSeeds seeds)
// and once through a real edge, decider (embedded etcd) and provsim on
// loopback, provsim's time multiplied by a scale; which provider served
// each size bucket, and the TTFT p50 and p90 per bucket, must agree.
const (
	checkDir = "../sim/check"
	simSeeds = 20
)

// checkForm is how much of the trace the check replays, and how fast.
type checkForm struct {
	name string
	// trace is the trace file in sim/check.
	trace string
	// scale multiplies provsim's time and every time setting of the edge
	// and decider.
	scale float64
	// maxPrompt leaves out the trace's requests from this many prompt
	// tokens (0: none).
	maxPrompt int64
	// probeSizes and probeInterval (in the simulation's time) are both
	// runs' probes; nil sizes are the decider's defaults.
	probeSizes    []int64
	probeInterval time.Duration
}

var (
	// fullForm replays the whole trace: about 15 s without the race
	// detector; the table in docs/simulation.md is its output.
	fullForm = checkForm{name: "full", trace: "trace.jsonl", scale: 0.2, probeInterval: time.Minute}
	// shortForm is the form under the race detector (make test), which
	// makes moving a prompt of hundreds of KB tens of times slower: a
	// trace of its own with prompts under 32k tokens, probes of one size per
	// bucket it reaches, at half of real time so that the detector's
	// overhead stays small beside the first-token times.
	shortForm = checkForm{name: "short", trace: "trace-short.jsonl", scale: 0.5, probeSizes: []int64{2048, 16384},
		probeInterval: 30 * time.Second}
)

// formToRun is the full form, or the short one under the race detector
// unless SWITCHBOARD_SIMCHECK=full asks for the full one.
func formToRun() checkForm {
	if os.Getenv("SWITCHBOARD_SIMCHECK") == "full" || !raceEnabled {
		return fullForm
	}
	return shortForm
}

func (f checkForm) probeSizeFlag() string {
	parts := make([]string, len(f.probeSizes))
	for i, n := range f.probeSizes {
		parts[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(parts, ",")
}

func (f checkForm) scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * f.scale) }

// Tolerances, and why (docs/simulation.md has the measured table):
//   - shareSlack: the real run is one draw; its share of a provider in a
//     bucket must lie within the range the simulation gives over simSeeds
//     seeds, widened by two requests of the bucket (12 requests each): the
//     two runs' random draws differ, probes start at slightly different
//     moments, and one request that flips between two nearly equal
//     endpoints moves a share by 1/12.
//   - ttftRel: a real p50 or p90 must lie within the range of the
//     simulation's seeds, widened by 15 % (a p90 of 12 values is the
//     second slowest: one draw);
//   - and, above, by what the loopback path adds, which the simulation does
//     not model — the edge's and decider's own work, report batching, and
//     the scheduling delays of a machine shared with other work — measured
//     in the same run by control requests to a provider that answers at
//     once, with a prompt of the bucket's median size: their p90, times
//     overheadFactor because the trace's requests meet hedges, probes and
//     each other where the control requests, one at a time, do not (on a
//     loaded machine the trace's extra delay measured about twice the
//     control's), multiplied by 1/scale like every real time.
const (
	shareSlack     = 2.0 / 12
	ttftRel        = 0.15
	overheadFactor = 2
)

// checkProfile is the part of a simulation profile the check needs to
// configure provsim and the catalog the same way; the features provsim
// cannot play are decoded only to refuse them.
type checkProfile struct {
	Models []struct {
		ID        string          `yaml:"id"`
		ListPrice map[string]any  `yaml:"list_price"`
		Providers []checkProvider `yaml:"providers"`
	} `yaml:"models"`
}

type checkProvider struct {
	Name          string         `yaml:"name"`
	Price         map[string]any `yaml:"price"`
	ContextLength int64          `yaml:"context_length"`
	TTFT          struct {
		Curve []struct {
			Tokens string `yaml:"tokens"`
			TTFT   string `yaml:"ttft"`
		} `yaml:"curve"`
		CachedTokenWeight *float64 `yaml:"cached_token_weight"`
		Spread            float64  `yaml:"spread"`
		Tail              any      `yaml:"tail"`
	} `yaml:"ttft"`
	OutputTokensPerSecond float64 `yaml:"output_tokens_per_second"`
	// Not played by provsim the way the simulation draws them.
	Cache    any `yaml:"cache"`
	Capacity any `yaml:"capacity"`
	Errors   any `yaml:"errors"`
	Slow     any `yaml:"slow"`
}

// point is one point of a first-token curve.
type point struct {
	tokens float64
	ttft   time.Duration
}

func parseTokenCount(t *testing.T, s string) float64 {
	t.Helper()
	mult := 1.0
	if rest, ok := strings.CutSuffix(s, "k"); ok {
		s, mult = rest, tokens.K
	}
	v, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err, "token count %q", s)
	return v * mult
}

// at reads the curve at n tokens by linear interpolation, as the simulation does.
func at(curve []point, n float64) time.Duration {
	if n <= curve[0].tokens || len(curve) == 1 {
		return curve[0].ttft
	}
	for i := 1; i < len(curve); i++ {
		a, b := curve[i-1], curve[i]
		if n <= b.tokens || i == len(curve)-1 {
			return a.ttft + time.Duration(float64(b.ttft-a.ttft)*(n-a.tokens)/(b.tokens-a.tokens))
		}
	}
	return curve[len(curve)-1].ttft
}

// provsimModel derives provsim's behaviour from a simulated provider: per
// size bucket the straight line through the curve at the bucket's bounds,
// which is the simulation's curve itself when the curve has its points on
// the bounds (checked), the same lognormal spread, the same output speed.
func provsimModel(t *testing.T, model string, p checkProvider) provsim.ModelConfig {
	t.Helper()
	require.Nil(t, p.TTFT.Tail, "%s: provsim has no Pareto tail", p.Name)
	for name, v := range map[string]any{"cache": p.Cache, "capacity": p.Capacity, "errors": p.Errors, "slow": p.Slow} {
		require.Nil(t, v, "%s: the check plays no %s", p.Name, name)
	}
	curve := make([]point, len(p.TTFT.Curve))
	for i, c := range p.TTFT.Curve {
		d, err := time.ParseDuration(c.TTFT)
		require.NoError(t, err)
		curve[i] = point{parseTokenCount(t, c.Tokens), d}
	}
	require.NotEmpty(t, curve, p.Name)
	last := curve[len(curve)-1].tokens
	bounds := []float64{0, 8 * tokens.K, 32 * tokens.K, 128 * tokens.K, last}
	m := provsim.ModelConfig{ID: model, TokensPerSecond: p.OutputTokensPerSecond, DefaultOutputTokens: 16,
		TTFT: provsim.TTFTConfig{Spread: p.TTFT.Spread, ByBucket: map[string]provsim.TTFTCurve{}}}
	for b := range tokens.Bucket(tokens.NumBuckets) {
		lo, hi := bounds[b], bounds[b+1]
		require.Greater(t, hi, lo, "%s: the curve must reach past 128k", p.Name)
		slope := float64(at(curve, hi)-at(curve, lo)) / (hi - lo) // per token
		base := float64(at(curve, lo)) - slope*lo
		require.GreaterOrEqual(t, base, 0.0, "%s, %s: provsim's base must not be negative", p.Name, b)
		for _, c := range curve {
			if c.tokens > lo && c.tokens < hi {
				line := time.Duration(base + slope*c.tokens)
				require.InDelta(t, float64(c.ttft), float64(line), float64(time.Millisecond),
					"%s: a curve point inside bucket %s: provsim's line would not follow it", p.Name, b)
			}
		}
		m.TTFT.ByBucket[b.String()] = provsim.TTFTCurve{Base: provsim.Duration(base), Per1KTokens: provsim.Duration(slope * tokens.K)}
	}
	return m
}

// served is one answered request: its size bucket, who answered and its TTFT
// in the simulation's time.
type served struct {
	bucket   tokens.Bucket
	provider string
	ttft     time.Duration
}

// runSimulation runs the trace through the simulation and returns each
// seed's requests.
func runSimulation(t *testing.T, form checkForm, tracePath string) [][]served {
	t.Helper()
	records := filepath.Join(t.TempDir(), "records.csv")
	var out, errOut bytes.Buffer
	require.NoError(t, simulate.Main([]string{"--profile", checkDir + "/profile.yaml", "--traffic", checkDir + "/traffic.yaml",
		"--trace", tracePath, "--policies", "smart", "--seeds", strconv.Itoa(simSeeds), "--hedge-budget-burst", "24h",
		"--probe-interval", form.probeInterval.String(), "--probe-sizes", form.probeSizeFlag(), "--records", records}, &out, &errOut), errOut.String())
	f, err := os.Open(records)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	runs := make([][]served, simSeeds)
	for _, r := range rows[1:] {
		require.Equal(t, "true", r[col["answered"]], "the check profile fails nothing")
		k, _ := strconv.Atoi(r[col["seed_index"]])
		n, _ := strconv.ParseInt(r[col["prompt_tokens"]], 10, 64)
		s, _ := strconv.ParseFloat(r[col["ttft_s"]], 64)
		runs[k] = append(runs[k], served{tokens.BucketOf(n), r[col["provider"]], time.Duration(s * float64(time.Second))})
	}
	return runs
}

type traceLine struct {
	At           float64 `json:"at"`
	PromptTokens int64   `json:"prompt_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	Stream       bool    `json:"stream"`
}

// readCheckTrace reads the check's trace, leaves out what form leaves out,
// and writes what is left into a file for the simulation.
func readCheckTrace(t *testing.T, form checkForm) ([]traceLine, string) {
	t.Helper()
	data, err := os.ReadFile(checkDir + "/" + form.trace)
	require.NoError(t, err)
	var trace []traceLine
	var kept bytes.Buffer
	for line := range strings.Lines(string(data)) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var l traceLine
		require.NoError(t, json.Unmarshal([]byte(line), &l))
		require.True(t, l.Stream, "the check streams every request")
		if form.maxPrompt > 0 && l.PromptTokens >= form.maxPrompt {
			continue
		}
		trace = append(trace, l)
		kept.WriteString(line)
	}
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(path, kept.Bytes(), 0o600))
	return trace, path
}

// profileEndpoint is a profile's provider as the catalog lists it.
type profileEndpoint struct {
	name          string
	price         map[string]any
	contextLength int64
}

// cachedAsInput gives price (in place) the simulation's default price of
// cached input tokens, the input price, unless it has one; it returns price.
func cachedAsInput(price map[string]any) map[string]any {
	if _, ok := price["cached_input"]; !ok {
		price["cached_input"] = price["input"]
	}
	return price
}

// profileCatalog is the catalog the simulation builds from a profile's
// model (Profile.Catalog): model id at listPrice, one endpoint per provider
// at its base URL (url) serving id, then the more models as given; tenant
// acme holds testKey.
func profileCatalog(t *testing.T, url func(string) string, id string, listPrice map[string]any, eps []profileEndpoint, more ...any) string {
	t.Helper()
	var list []any
	for _, e := range eps {
		list = append(list, map[string]any{"provider": e.name, "base_url": url(e.name), "upstream_model": id,
			"context_length": e.contextLength, "price": cachedAsInput(e.price)})
	}
	cat := map[string]any{
		"tenants": []any{map[string]any{"id": "acme", "api_keys_sha256": []string{catalog.HashKey(testKey)}}},
		"models":  append([]any{map[string]any{"id": id, "list_price": listPrice, "endpoints": list}}, more...),
	}
	out, err := yaml.Marshal(cat)
	require.NoError(t, err)
	return string(out)
}

// scaledDecider sets a decider up as the simulation runs one, every
// setting that is a time on provsim's scale (scaled): probes every
// probeInterval of probeSizes, a cool-down of cooldown after one refusal
// in a minute, hedges after a second. The hedge budget is unpaced, as the
// simulation's: its day starts at midnight and the real one at any hour,
// so a paced budget would allow them different amounts.
func scaledDecider(id string, scaled func(time.Duration) time.Duration, probeInterval time.Duration, probeSizes []int64,
	cooldown time.Duration) func(*deciderapp.Config) {
	return func(c *deciderapp.Config) {
		c.ID, c.StatsSnapshotInterval = id, time.Hour
		c.ProbeInterval, c.ProbeSizes, c.HedgeDelay, c.FastEnough = scaled(probeInterval), probeSizes, scaled(time.Second), scaled(time.Second)
		c.Cooldown, c.CooldownErrors, c.CooldownWindow = scaled(cooldown), 1, scaled(time.Minute)
		c.HedgeBudgetUSD, c.HedgeBudgetBurst = 5, 24*time.Hour
	}
}

// runReal replays the trace through a real edge, decider and provsim with
// every delay multiplied by form.scale, and returns what it measured, TTFTs
// scaled back.
func runReal(t *testing.T, form checkForm, trace []traceLine) ([]served, [tokens.NumBuckets][]time.Duration) {
	t.Helper()
	ctx := t.Context()
	data, err := os.ReadFile(checkDir + "/profile.yaml")
	require.NoError(t, err)
	var prof checkProfile
	require.NoError(t, yaml.Unmarshal(data, &prof))
	require.Len(t, prof.Models, 1)
	pm := prof.Models[0]

	pcfg := provsim.Config{Seed: 1, TimeScale: form.scale}
	for _, p := range pm.Providers {
		pcfg.Providers = append(pcfg.Providers, provsim.ProviderConfig{Name: p.Name, Listen: "127.0.0.1:0",
			Models: []provsim.ModelConfig{provsimModel(t, pm.ID, p)}})
	}
	// The control: a model of its own at a provider that answers at once,
	// to measure what the loopback path itself adds to a first token.
	pcfg.Providers = append(pcfg.Providers, provsim.ProviderConfig{Name: "control", Listen: "127.0.0.1:0",
		Models: []provsim.ModelConfig{{ID: "control"}}})
	scaled := form.scaled
	var eps []profileEndpoint
	for _, p := range pm.Providers {
		eps = append(eps, profileEndpoint{p.Name, p.Price, p.ContextLength})
	}
	edge := startStack(t, stackOptions{simConfig: &pcfg,
		catalog: func(url func(string) string) string {
			price := map[string]any{"input": 0.1, "cached_input": 0.1, "output": 0.1}
			return profileCatalog(t, url, pm.ID, pm.ListPrice, eps, map[string]any{"id": "check/control",
				"endpoints": []any{map[string]any{"provider": "control", "base_url": url("control"), "upstream_model": "control", "price": price}}})
		},
		tune:     scaledDecider("simcheck", scaled, form.probeInterval, form.probeSizes, 15*time.Minute),
		edgeArgs: []string{"--first-token-timeout=" + scaled(60*time.Second).String()}}).edge

	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	bodies := make([][]byte, len(trace))
	for i, l := range trace {
		// Exactly l.PromptTokens tokens by the shared rule: 3 + 4 + 1 for
		// one user message, a unique first token so that no two requests
		// share a prompt prefix, then one token per 4 bytes.
		content := fmt.Sprintf("r%03d", i) + longPrompt(int(l.PromptTokens)-9)
		require.Equal(t, l.PromptTokens, tokens.Prompt([]tokens.Message{{Role: "user", Content: content}}))
		bodies[i], err = json.Marshal(map[string]any{"model": pm.ID, "stream": true, "max_tokens": l.OutputTokens,
			"messages": []any{map[string]any{"role": "user", "content": content}}})
		require.NoError(t, err)
	}
	out := make([]served, len(trace))
	errs := make([]error, len(trace))
	var wg sync.WaitGroup
	start := time.Now()
	for i, l := range trace {
		wg.Go(func() {
			timer := time.NewTimer(time.Until(start.Add(scaled(time.Duration(l.At * float64(time.Second))))))
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			sent := time.Now()
			out[i], errs[i] = streamOne(ctx, client, edge.URL(), bodies[i])
			out[i].bucket = tokens.BucketOf(l.PromptTokens)
			out[i].ttft = time.Duration(float64(out[i].ttft) / form.scale)
			t.Logf("req %d at %.1f: %d tokens, %s in %s, sent %s late, took %s", i, l.At, l.PromptTokens, out[i].provider, out[i].ttft,
				sent.Sub(start)-scaled(time.Duration(l.At*float64(time.Second))), time.Since(sent))
		})
	}
	// Control requests every 100 ms of real time while the trace runs, in
	// turn with a prompt of the median size of each bucket of the trace.
	var controlBodies [][]byte
	var controlBuckets []tokens.Bucket
	for b := range tokens.Bucket(tokens.NumBuckets) {
		var sizes []int64
		for _, l := range trace {
			if tokens.BucketOf(l.PromptTokens) == b {
				sizes = append(sizes, l.PromptTokens)
			}
		}
		if len(sizes) == 0 {
			continue
		}
		slices.Sort(sizes)
		body, err := json.Marshal(map[string]any{"model": "check/control", "stream": true, "max_tokens": 1,
			"messages": []any{map[string]any{"role": "user", "content": "ctrl" + longPrompt(int(sizes[len(sizes)/2])-9)}}})
		require.NoError(t, err)
		controlBodies, controlBuckets = append(controlBodies, body), append(controlBuckets, b)
	}
	var overhead [tokens.NumBuckets][]time.Duration
	traceDone := make(chan struct{})
	controlDone := make(chan struct{})
	go func() {
		defer close(controlDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-traceDone:
				return
			case <-tick.C:
			}
			k := n % len(controlBodies)
			if c, err := streamOne(ctx, client, edge.URL(), controlBodies[k]); err == nil {
				overhead[controlBuckets[k]] = append(overhead[controlBuckets[k]], c.ttft)
			}
		}
	}()
	wg.Wait()
	close(traceDone)
	<-controlDone
	for i, err := range errs {
		require.NoError(t, err, "request %d", i)
	}
	t.Logf("real run: %d requests in %s", len(trace), time.Since(start).Round(time.Millisecond))
	return out, overhead
}

// streamOne sends one streamed request and returns who answered and the
// time to the first event.
func streamOne(ctx context.Context, client *http.Client, url string, body []byte) (served, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return served{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testKey)
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return served{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return served{}, fmt.Errorf("status %d after %s: %s (route %s)", resp.StatusCode, time.Since(sent), b, resp.Header.Get("X-Switchboard-Route"))
	}
	s := served{provider: resp.Header.Get("X-Switchboard-Provider")}
	br := bufio.NewReader(resp.Body)
	done := false
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "data:") {
			if s.ttft == 0 {
				s.ttft = time.Since(sent)
			}
			done = done || strings.TrimSpace(strings.TrimPrefix(line, "data:")) == "[DONE]"
		}
		if err != nil {
			break
		}
	}
	if !done || s.provider == "" || s.ttft == 0 {
		return s, fmt.Errorf("incomplete stream (provider %q)", s.provider)
	}
	return s, nil
}

func quantileOf(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	// Linear interpolation between order statistics, as the simulation's table.
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + time.Duration(float64(s[hi]-s[lo])*(pos-float64(lo)))
}

// shares is each provider's share of each bucket's requests in one run.
func shares(rs []served) [tokens.NumBuckets]map[string]float64 {
	var out [tokens.NumBuckets]map[string]float64
	var n [tokens.NumBuckets]float64
	for b := range out {
		out[b] = map[string]float64{}
	}
	for _, r := range rs {
		out[r.bucket][r.provider]++
		n[r.bucket]++
	}
	for b := range out {
		for p := range out[b] {
			out[b][p] /= n[b]
		}
	}
	return out
}

type bucketProvider struct {
	bucket   tokens.Bucket
	provider string
}

// ttftsBy groups first-token times by bucket and provider.
func ttftsBy(rs []served) map[bucketProvider][]time.Duration {
	out := map[bucketProvider][]time.Duration{}
	for _, r := range rs {
		k := bucketProvider{r.bucket, r.provider}
		out[k] = append(out[k], r.ttft)
	}
	return out
}

// minRealAnswers is the fewest real answers of a provider in a bucket whose
// TTFT quantiles are compared.
const minRealAnswers = 4

// TestModelAgainstRealSystem: the simulation's routing choices and TTFT
// distribution agree with a real edge, decider and provsim on the same
// trace and provider profile, within the tolerances above.
//
// Routing: each provider's share of each bucket. TTFT: per bucket and
// provider (a bucket's own quantiles mix providers, so they would move with
// every request that changes hands), the real p50 and p90 against the
// simulation's distribution pooled over its seeds: the real p50 of n answers
// must lie between the pooled quantiles 0.5 ± 1/√n (two standard errors of
// an empirical median's rank), the p90 between 0.9 ± 0.6/√n, each widened
// by ttftRel and, above, by the measured loopback allowance.
func TestModelAgainstRealSystem(t *testing.T) {
	form := formToRun()
	trace, tracePath := readCheckTrace(t, form)
	simRuns := runSimulation(t, form, tracePath)
	answers, overhead := runReal(t, form, trace)
	// What the loopback path added to a first token while the trace ran,
	// in the simulation's time.
	var allowance [tokens.NumBuckets]time.Duration
	var overheads strings.Builder
	for b := range allowance {
		allowance[b] = time.Duration(overheadFactor * float64(quantileOf(overhead[b], 0.9)) / form.scale)
		if len(overhead[b]) > 0 {
			fmt.Fprintf(&overheads, " %s: p50 %s, p90 %s of %d;", tokens.Bucket(b), quantileOf(overhead[b], 0.5).Round(time.Millisecond),
				quantileOf(overhead[b], 0.9).Round(time.Millisecond), len(overhead[b]))
		}
	}
	realShares := shares(answers)
	simShares := make([][tokens.NumBuckets]map[string]float64, len(simRuns))
	var pooled []served
	for k, r := range simRuns {
		simShares[k] = shares(r)
		pooled = append(pooled, r...)
	}
	simTTFT, realTTFT := ttftsBy(pooled), ttftsBy(answers)

	secs := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) }
	pct := func(v float64) string { return strconv.FormatFloat(100*v, 'f', 0, 64) + " %" }
	var table strings.Builder
	table.WriteString("| bucket | provider | share: simulation mean [min, max] of " + strconv.Itoa(simSeeds) + " seeds | share: real | " +
		"TTFT p50 (s): simulation [tolerated] | real | TTFT p90 (s): simulation [tolerated] | real |\n|---|---|---|---|---|---|---|---|\n")
	var failures []string
	for b := range tokens.Bucket(tokens.NumBuckets) {
		var providers []string
		for _, sh := range append(simShares, realShares) {
			for p := range sh[b] {
				if !slices.Contains(providers, p) {
					providers = append(providers, p)
				}
			}
		}
		slices.Sort(providers)
		for _, p := range providers {
			vals := make([]float64, len(simShares))
			mean := 0.0
			for k, sh := range simShares {
				vals[k] = sh[b][p]
				mean += vals[k] / float64(len(simShares))
			}
			lo, hi := slices.Min(vals)-shareSlack, slices.Max(vals)+shareSlack
			got := realShares[b][p]
			row := fmt.Sprintf("| %s | %s | %s [%s, %s] | %s", b, p, pct(mean), pct(slices.Min(vals)), pct(slices.Max(vals)), pct(got))
			if got < lo-1e-9 || got > hi+1e-9 {
				row += " (NO)"
				failures = append(failures, fmt.Sprintf("%s %s: real share %s outside [%s, %s]", b, p, pct(got), pct(lo), pct(hi)))
			}
			k := bucketProvider{b, p}
			for _, q := range []struct {
				name     string
				at, band float64
			}{{"p50", 0.5, 1}, {"p90", 0.9, 0.6}} {
				obs := realTTFT[k]
				if len(obs) < minRealAnswers || len(simTTFT[k]) == 0 {
					row += " | - | -"
					continue
				}
				d := q.band / math.Sqrt(float64(len(obs)))
				lo := time.Duration(float64(quantileOf(simTTFT[k], max(q.at-d, 0))) * (1 - ttftRel))
				hi := time.Duration(float64(quantileOf(simTTFT[k], min(q.at+d, 1)))*(1+ttftRel)) + allowance[b]
				got := quantileOf(obs, q.at)
				row += fmt.Sprintf(" | %s [%s, %s] | %s", secs(quantileOf(simTTFT[k], q.at)), secs(lo), secs(hi), secs(got))
				if got < lo || got > hi {
					row += " (NO)"
					failures = append(failures, fmt.Sprintf("%s %s TTFT %s: real %s outside [%s, %s]", b, p, q.name, secs(got), secs(lo), secs(hi)))
				}
			}
			table.WriteString(row + " |\n")
		}
	}
	t.Logf("%s form, %d requests, time scale %g (TTFT in the simulation's seconds, the real ones scaled back); "+
		"loopback overhead of control requests (real time) by bucket:%s\n%s",
		form.name, len(trace), form.scale, overheads.String(), table.String())
	require.Empty(t, failures, "the simulation and the real system disagree")
}
