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
	"github.com/switchboard-ai/switchboard/services/decider/simulate"
	provsim "github.com/switchboard-ai/switchboard/services/provsim/app"
)

// The conversations check of the routing simulation against the real
// system: sim/check/conversations.jsonl — conversations whose turns extend
// the previous turn's prompt, one-off requests, a burst — runs on the
// providers of sim/check/conversations-profile.yaml, which cache prompts at
// different prices, one of which is down for a while and one of which has a
// capacity the traffic exceeds. The figures that decide money must agree:
// who serves first turns and follow-ups, the cached tokens billed and the
// client's cost, the share served by the failing provider before, during
// and after its outage and cool-down, and the requests that met a 429, were
// retried and where they were served while the capacity is exceeded.
const (
	convProfile = checkDir + "/conversations-profile.yaml"
	convTraffic = checkDir + "/conversations-traffic.yaml"
	convTrace   = checkDir + "/conversations.jsonl"
	// convCooldown is the cool-down both runs use (the decider's --cooldown,
	// one refusal within a minute), short so that the provider that failed
	// comes back within the trace.
	convCooldown = 30 * time.Second
	// convProbeInterval and convProbeSizes are both runs' probes.
	convProbeInterval = 30 * time.Second
)

var convProbeSizes = []int64{2048, 16384}

// convBurst is when the trace's burst of one-off requests arrives, in
// seconds: 16 requests in 10 s, beside the conversations' and the other
// one-off requests' traffic.
var convBurst = [2]float64{90, 100}

// convScale is provsim's time scale: under the race detector a quarter of
// real time (the trace's 106 s of simulated time replay in about 27 s),
// without it or with SWITCHBOARD_SIMCHECK=full half of real time, where the
// loopback path's own milliseconds weigh half as much beside the providers'.
func convScale() (string, float64) {
	if os.Getenv("SWITCHBOARD_SIMCHECK") == "full" || !raceEnabled {
		return "full", 0.5
	}
	return "short", 0.25
}

// convSlack is how many requests of a group a real share may lie outside
// the simulation's range of seeds: the runs draw differently, probes start
// at slightly different moments, and one request that flips between two
// nearly equal endpoints (or lands just before or after a cool-down ends)
// moves a share by one request of its group.
const convSlack = 2

// convCall is one provider call of a request, as provsim logged it.
type convCall struct {
	provider, outcome string
	cached            int64
}

// convServed is one request of the trace as one run saw it.
type convServed struct {
	at       float64 // arrival, seconds of the simulation's time
	prompt   int64
	conv     string // "" for a one-off request
	turn     int
	provider string
	cached   int64
	usd      float64
	retried  bool
	met429   bool
}

type convTraceLine struct {
	At           float64 `json:"at"`
	Conversation string  `json:"conversation"`
	PromptTokens int64   `json:"prompt_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	Stream       bool    `json:"stream"`
}

func readConvTrace(t *testing.T) []convTraceLine {
	t.Helper()
	data, err := os.ReadFile(convTrace)
	require.NoError(t, err)
	var out []convTraceLine
	sizes := map[int64]bool{}
	for _, n := range convProbeSizes {
		sizes[n] = true
	}
	for line := range strings.Lines(string(data)) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var l convTraceLine
		require.NoError(t, json.Unmarshal([]byte(line), &l))
		require.True(t, l.Stream, "the check streams every request")
		// The real run tells requests (and probes) apart by their size.
		require.False(t, sizes[l.PromptTokens], "prompt size %d appears twice or is a probe's", l.PromptTokens)
		sizes[l.PromptTokens] = true
		out = append(out, l)
	}
	slices.SortStableFunc(out, func(a, b convTraceLine) int { return cmpFloat(a.At, b.At) })
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// turns numbers each conversation's turns in arrival order.
func turns(trace []convTraceLine) []int {
	out := make([]int, len(trace))
	n := map[string]int{}
	for i, l := range trace {
		if l.Conversation != "" {
			out[i] = n[l.Conversation]
			n[l.Conversation]++
		}
	}
	return out
}

// convProvider is the part of a simulated provider the conversations check
// plays in provsim; anything else is refused.
type convProvider struct {
	Name          string         `yaml:"name"`
	Price         map[string]any `yaml:"price"`
	ContextLength int64          `yaml:"context_length"`
	TTFT          struct {
		Curve []struct {
			Tokens string `yaml:"tokens"`
			TTFT   string `yaml:"ttft"`
		} `yaml:"curve"`
		CachedTokenWeight float64 `yaml:"cached_token_weight"`
		Spread            float64 `yaml:"spread"`
		Tail              any     `yaml:"tail"`
	} `yaml:"ttft"`
	OutputTokensPerSecond float64 `yaml:"output_tokens_per_second"`
	Cache                 struct {
		HitRate  float64 `yaml:"hit_rate"`
		Lifetime string  `yaml:"lifetime"`
	} `yaml:"cache"`
	Capacity struct {
		RequestsPerMinute int64  `yaml:"requests_per_minute"`
		TokensPerMinute   int64  `yaml:"tokens_per_minute"`
		RetryAfter        string `yaml:"retry_after"`
	} `yaml:"capacity"`
	Errors struct {
		ServerErrorRate float64 `yaml:"server_error_rate"`
		HangRate        float64 `yaml:"hang_rate"`
		Outages         []struct {
			From     string `yaml:"from"`
			Duration string `yaml:"duration"`
		} `yaml:"outages"`
	} `yaml:"errors"`
	Slow any `yaml:"slow"`
}

// outage is a scripted outage in the simulation's time since the trace's start.
type outage struct{ from, until time.Duration }

func parseDur(t *testing.T, s, def string) time.Duration {
	t.Helper()
	if s == "" {
		s = def
	}
	d, err := time.ParseDuration(s)
	require.NoError(t, err, "duration %q", s)
	return d
}

// convProvsimModel derives provsim's model from a simulated provider: the
// one straight line of its curve, cached tokens read at cached_token_weight
// of an uncached one's time (the simulation's effective size on that line),
// the same spread, speed, cache lifetime (times scale: provsim's cache
// lifetime is in real time) and capacity (provsim's capacity counts over a
// scaled minute and scales its Retry-After itself). Outages are played by
// the test, which turns a fault on and off at their times.
func convProvsimModel(t *testing.T, model string, p convProvider, scale float64) (provsim.ModelConfig, []outage) {
	t.Helper()
	require.Nil(t, p.TTFT.Tail, "%s: provsim has no Pareto tail", p.Name)
	require.Nil(t, p.Slow, "%s: the check plays no slow episodes", p.Name)
	require.Zero(t, p.Errors.ServerErrorRate+p.Errors.HangRate, "%s: the check plays scripted outages only", p.Name)
	require.Len(t, p.TTFT.Curve, 2, "%s: provsim reads cached tokens the simulation's way only on one straight line", p.Name)
	x0, x1 := parseTokenCount(t, p.TTFT.Curve[0].Tokens), parseTokenCount(t, p.TTFT.Curve[1].Tokens)
	y0, y1 := parseDur(t, p.TTFT.Curve[0].TTFT, ""), parseDur(t, p.TTFT.Curve[1].TTFT, "")
	slope := float64(y1-y0) / (x1 - x0) // per token
	base := float64(y0) - slope*x0
	require.GreaterOrEqual(t, base, 0.0, p.Name)
	require.Contains(t, []float64{0, 1}, p.Cache.HitRate, "%s: provsim's prefix cache always hits, or there is none", p.Name)
	m := provsim.ModelConfig{ID: model, TokensPerSecond: p.OutputTokensPerSecond, DefaultOutputTokens: 16,
		TTFT: provsim.TTFTConfig{Base: provsim.Duration(base), Per1KTokens: provsim.Duration(slope * tokens.K),
			Per1KCachedTokens: provsim.Duration(slope * p.TTFT.CachedTokenWeight * tokens.K), Spread: p.TTFT.Spread},
		Capacity: provsim.CapacityConfig{RequestsPerMinute: p.Capacity.RequestsPerMinute, TokensPerMinute: p.Capacity.TokensPerMinute,
			RetryAfter: provsim.Duration(parseDur(t, p.Capacity.RetryAfter, "30s"))}}
	if p.Cache.HitRate == 1 {
		m.Cache = provsim.CacheConfig{Enabled: true, TTL: provsim.Duration(float64(parseDur(t, p.Cache.Lifetime, "5m")) * scale), MaxEntries: 1 << 20}
	}
	var outs []outage
	for _, o := range p.Errors.Outages {
		from, err := time.Parse("15:04:05", o.From)
		if err != nil {
			from, err = time.Parse("15:04", o.From)
		}
		require.NoError(t, err)
		at := time.Duration(from.Hour())*time.Hour + time.Duration(from.Minute())*time.Minute + time.Duration(from.Second())*time.Second
		outs = append(outs, outage{at, at + parseDur(t, o.Duration, "")})
	}
	return m, outs
}

// runConvSimulation runs the trace through the simulation and returns each
// seed's requests, in the trace's order.
func runConvSimulation(t *testing.T, trace []convTraceLine) [][]convServed {
	t.Helper()
	records := filepath.Join(t.TempDir(), "records.csv")
	var out, errOut bytes.Buffer
	sizes := make([]string, len(convProbeSizes))
	for i, n := range convProbeSizes {
		sizes[i] = strconv.FormatInt(n, 10)
	}
	require.NoError(t, simulate.Main([]string{"--profile", convProfile, "--traffic", convTraffic, "--trace", convTrace,
		"--policies", "smart", "--seeds", strconv.Itoa(simSeeds),
		"--probe-interval", convProbeInterval.String(), "--probe-sizes", strings.Join(sizes, ","),
		"--cooldown", convCooldown.String(), "--cooldown-errors", "1", "--cooldown-window", "1m",
		"--records", records}, &out, &errOut), errOut.String())
	f, err := os.Open(records)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	index := map[int64]int{} // prompt size → place in the trace
	for i, l := range trace {
		index[l.PromptTokens] = i
	}
	turn := turns(trace)
	runs := make([][]convServed, simSeeds)
	for k := range runs {
		runs[k] = make([]convServed, len(trace))
	}
	for _, r := range rows[1:] {
		require.Equal(t, "true", r[col["answered"]], "every request has a provider that answers")
		k, _ := strconv.Atoi(r[col["seed_index"]])
		n, _ := strconv.ParseInt(r[col["prompt_tokens"]], 10, 64)
		i, ok := index[n]
		require.True(t, ok, "a record of a request the trace does not have: %v", r)
		cached, _ := strconv.ParseInt(r[col["cached_tokens"]], 10, 64)
		usd, _ := strconv.ParseFloat(r[col["client_usd"]], 64)
		retries, _ := strconv.Atoi(r[col["retries"]])
		c429, _ := strconv.Atoi(r[col["calls_429"]])
		l := trace[i]
		runs[k][i] = convServed{at: l.At, prompt: n, conv: l.Conversation, turn: turn[i], provider: r[col["provider"]], cached: cached,
			usd: usd, retried: retries > 0, met429: c429 > 0}
	}
	return runs
}

// logCalls collects provsim's debug line of every call.
type logCalls struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logCalls) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// calls returns the calls provsim logged, by prompt size.
func (l *logCalls) calls(t *testing.T) map[int64][]convCall {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int64][]convCall{}
	for line := range strings.Lines(l.buf.String()) {
		var rec struct {
			Msg      string `json:"msg"`
			Provider string `json:"provider"`
			Outcome  string `json:"outcome"`
			Prompt   int64  `json:"prompt_tokens"`
			Cached   int64  `json:"cached_tokens"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "chat completion" {
			continue
		}
		out[rec.Prompt] = append(out[rec.Prompt], convCall{rec.Provider, rec.Outcome, rec.Cached})
	}
	return out
}

// runConvReal replays the trace through a real edge, decider and provsim on
// scale, and returns each request as the simulation's records describe it:
// the provider that served it and its cached tokens from provsim's own
// account of the call, whether it met a 429 from provsim's calls of its
// size, whether it was retried from the edge's X-Switchboard-Retries.
func runConvReal(t *testing.T, scale float64, trace []convTraceLine) []convServed {
	t.Helper()
	ctx := t.Context()
	data, err := os.ReadFile(convProfile)
	require.NoError(t, err)
	var prof struct {
		Models []struct {
			ID        string         `yaml:"id"`
			ListPrice map[string]any `yaml:"list_price"`
			Providers []convProvider `yaml:"providers"`
		} `yaml:"models"`
	}
	require.NoError(t, yaml.Unmarshal(data, &prof))
	require.Len(t, prof.Models, 1)
	pm := prof.Models[0]
	scaled := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }

	pcfg := provsim.Config{Seed: 1, TimeScale: scale}
	models := map[string]provsim.ModelConfig{}
	outages := map[string][]outage{}
	rates := map[string]catalog.Rates{}
	for _, p := range pm.Providers {
		m, outs := convProvsimModel(t, pm.ID, p, scale)
		models[p.Name], outages[p.Name] = m, outs
		pcfg.Providers = append(pcfg.Providers, provsim.ProviderConfig{Name: p.Name, Listen: "127.0.0.1:0", Models: []provsim.ModelConfig{m}})
	}
	var eps []profileEndpoint
	for _, p := range pm.Providers {
		price := cachedAsInput(p.Price)
		num := func(k string) float64 {
			v, ok := price[k].(float64)
			if !ok {
				n, _ := price[k].(int)
				v = float64(n)
			}
			return v
		}
		rates[p.Name] = catalog.Rates{Input: num("input"), CachedInput: num("cached_input"), Output: num("output")}
		eps = append(eps, profileEndpoint{p.Name, price, p.ContextLength})
	}
	log := &logCalls{}
	s := startStack(t, stackOptions{simConfig: &pcfg, simLog: log,
		catalog: func(url func(string) string) string { return profileCatalog(t, url, pm.ID, pm.ListPrice, eps) },
		// The cool-down rule is the one given to the simulation.
		tune:     scaledDecider("simcheck-conv", scaled, convProbeInterval, convProbeSizes, convCooldown),
		edgeArgs: []string{"--first-token-timeout=" + scaled(60*time.Second).String()}})
	sim, edge := s.sim, s.edge

	// Each turn's messages are the previous turn's plus one user message,
	// so its prompt extends the previous prompt exactly; the first message
	// starts with a token of its own, so no two conversations (or one-off
	// requests) share a prefix.
	bodies := make([][]byte, len(trace))
	msgs := map[string][]tokens.Message{}
	last := map[string]int64{}
	for i, l := range trace {
		key := l.Conversation
		if key == "" {
			key = fmt.Sprintf("one-off %d", i)
		}
		n := l.PromptTokens - last[key] - 5 // a message adds 4 + ⌈len("user")/4⌉ tokens and its content
		if last[key] == 0 {
			n -= 3
		}
		require.Greater(t, n, int64(1), "request %d: a turn adds at least two tokens", i)
		content := fmt.Sprintf("%c%03d", 'a'+len(msgs[key])%26, i%1000) + longPrompt(int(n)-1)
		msgs[key] = append(msgs[key], tokens.Message{Role: "user", Content: content})
		last[key] = l.PromptTokens
		require.Equal(t, l.PromptTokens, tokens.Prompt(msgs[key]), "request %d", i)
		var ms []any
		for _, m := range msgs[key] {
			ms = append(ms, map[string]any{"role": m.Role, "content": m.Content})
		}
		bodies[i], err = json.Marshal(map[string]any{"model": pm.ID, "stream": true, "max_tokens": l.OutputTokens, "messages": ms})
		require.NoError(t, err)
	}

	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	retried := make([]bool, len(trace))
	served := make([]string, len(trace))
	errs := make([]error, len(trace))
	var wg sync.WaitGroup
	start := time.Now()
	// The outages: provsim's model answers 503 to every call from its start
	// to its end (SetModel keeps the cache, whose settings do not change).
	for name, outs := range outages {
		for _, o := range outs {
			down := models[name]
			down.Faults = []provsim.FaultConfig{{Kind: provsim.FaultUnavailable, Rate: 1}}
			for _, step := range []struct {
				at time.Duration
				m  provsim.ModelConfig
			}{{o.from, down}, {o.until, models[name]}} {
				wg.Go(func() {
					timer := time.NewTimer(time.Until(start.Add(scaled(step.at))))
					defer timer.Stop()
					select {
					case <-timer.C:
						require.NoError(t, sim.Provider(name).SetModel(step.m))
					case <-ctx.Done():
					}
				})
			}
		}
	}
	for i, l := range trace {
		wg.Go(func() {
			at := time.Duration(l.At * float64(time.Second))
			// Every request at its recorded time, as the simulation replays
			// a trace.
			timer := time.NewTimer(time.Until(start.Add(scaled(at))))
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			served[i], retried[i], errs[i] = streamRetries(ctx, client, edge.URL(), bodies[i])
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "request %d", i)
	}
	t.Logf("real run: %d requests in %s", len(trace), time.Since(start).Round(time.Millisecond))

	// provsim logs a call once its handler returns, which may be just after
	// the client read the answer's last byte: wait until every request's
	// answering call is in the log.
	var calls map[int64][]convCall
	require.Eventually(t, func() bool {
		calls = log.calls(t)
		for _, l := range trace {
			if !slices.ContainsFunc(calls[l.PromptTokens], func(c convCall) bool { return c.outcome == "ok" }) {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "every answered request's call is in provsim's log")
	turn := turns(trace)
	out := make([]convServed, len(trace))
	for i, l := range trace {
		s := convServed{at: l.At, prompt: l.PromptTokens, conv: l.Conversation, turn: turn[i], provider: served[i], retried: retried[i]}
		okCalls := 0
		for _, c := range calls[l.PromptTokens] {
			switch c.outcome {
			case "rate_limited":
				s.met429 = true
			case "ok":
				okCalls++
				require.Equal(t, served[i], c.provider, "request %d: the call that answered is the provider the edge named", i)
				s.cached = c.cached
				s.usd = usdOf(rates[c.provider], l.PromptTokens, c.cached, l.OutputTokens)
			}
		}
		require.Equal(t, 1, okCalls, "request %d: one call answered it (%v)", i, calls[l.PromptTokens])
		out[i] = s
	}
	return out
}

// usdOf is a call's price, as the simulation's pricing computes it.
func usdOf(r catalog.Rates, prompt, cached, output int64) float64 {
	return (float64(prompt-cached)*r.Input + float64(cached)*r.CachedInput + float64(output)*r.Output) / 1e6
}

// streamRetries sends one streamed request and returns who answered and
// whether the edge retried it.
func streamRetries(ctx context.Context, client *http.Client, url string, body []byte) (string, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := client.Do(req)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return "", false, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	provider := resp.Header.Get("X-Switchboard-Provider")
	retries, _ := strconv.Atoi(resp.Header.Get("X-Switchboard-Retries"))
	done := false
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		done = done || strings.TrimSpace(strings.TrimPrefix(line, "data:")) == "[DONE]"
		if err != nil {
			break
		}
	}
	if !done || provider == "" {
		return provider, false, fmt.Errorf("incomplete stream (provider %q)", provider)
	}
	return provider, retries > 0, nil
}

// convFigure is one compared figure: its value in one run.
type convFigure struct {
	name string
	// n is how many requests the figure is a share of (the slack is
	// convSlack of them); 0 for a figure that is not a share.
	n int
	// of computes the figure from one run.
	of func([]convServed) float64
	// slack is the tolerance of a figure that is not a share.
	slack func(sim []float64) float64
	unit  string
}

// hiShown is a tolerance's upper end as the table shows it: a share never
// above 100 %.
func hiShown(f convFigure, hi float64) float64 {
	if f.unit == "%" {
		return min(hi, 1)
	}
	return hi
}

// TestConversationsAgainstRealSystem: on conversations with prompt caching,
// a provider's outage and the cool-down it earns, and a burst over another
// provider's capacity, the simulation and a real edge, decider and provsim
// route alike and bill alike. Each figure of the real run must lie within
// the range the simulation's seeds give, widened by convSlack requests of
// the figure's group (for a cost, by the cost of convSlack of the group's
// dearest requests); cached tokens are compared as a share of the prompt
// tokens of follow-up turns, widened by the same two requests and by
// provsim's cache granularity, which the simulation does not model (a
// prefix caches in blocks of 128 tokens and counts its bytes, not the
// per-message framing the token count adds: under one block and 4 tokens a
// message per turn, about 1 % of a follow-up's prompt). And the cache rule
// itself, on the real run's own routing: every follow-up turn's cached
// tokens are exactly what the simulation's provider model gives for the
// provider that served it, less that granularity.
func TestConversationsAgainstRealSystem(t *testing.T) {
	form, scale := convScale()
	trace := readConvTrace(t)
	simRuns := runConvSimulation(t, trace)
	real := runConvReal(t, scale, trace)

	var outages []outage
	data, err := os.ReadFile(convProfile)
	require.NoError(t, err)
	var prof struct {
		Models []struct {
			Providers []convProvider `yaml:"providers"`
		} `yaml:"models"`
	}
	require.NoError(t, yaml.Unmarshal(data, &prof))
	var downName, fullName string
	for _, p := range prof.Models[0].Providers {
		_, outs := convProvsimModel(t, "m", p, 1)
		if len(outs) > 0 {
			downName, outages = p.Name, outs
		}
		if p.Capacity.RequestsPerMinute > 0 || p.Capacity.TokensPerMinute > 0 {
			fullName = p.Name
		}
	}
	require.Len(t, outages, 1, "the check's profile scripts one outage")
	require.NotEmpty(t, fullName, "the check's profile has a provider with a capacity")
	o := outages[0]

	groups := []struct {
		name string
		in   func(convServed) bool
	}{
		{"first turns", func(s convServed) bool { return s.conv != "" && s.turn == 0 }},
		{"follow-up turns", func(s convServed) bool { return s.conv != "" && s.turn > 0 }},
		{"one-off requests", func(s convServed) bool { return s.conv == "" }},
		{fmt.Sprintf("before %s's outage (0-%s)", downName, o.from), func(s convServed) bool { return s.at < o.from.Seconds() }},
		// The first refusal comes at the outage's start (the provider
		// serves most requests then), and benches it for the cool-down.
		{fmt.Sprintf("outage and cool-down (%s-%s)", o.from, o.from+convCooldown), func(s convServed) bool {
			return s.at >= o.from.Seconds() && s.at < (o.from+convCooldown).Seconds()
		}},
		{fmt.Sprintf("after (%s-)", o.from+convCooldown), func(s convServed) bool { return s.at >= (o.from + convCooldown).Seconds() }},
		{fmt.Sprintf("the burst over %s's capacity (%gs-%gs)", fullName, convBurst[0], convBurst[1]), func(s convServed) bool {
			return s.at >= convBurst[0] && s.at < convBurst[1]
		}},
		{"all requests", func(convServed) bool { return true }},
	}
	providers := []string{}
	for _, p := range prof.Models[0].Providers {
		providers = append(providers, p.Name)
	}
	var figures []convFigure
	for _, g := range groups {
		n := 0
		for _, s := range real {
			if g.in(s) {
				n++
			}
		}
		require.Positive(t, n, g.name)
		share := func(pred func(convServed) bool) func([]convServed) float64 {
			return func(rs []convServed) float64 {
				k := 0
				for _, s := range rs {
					if g.in(s) && pred(s) {
						k++
					}
				}
				return float64(k) / float64(n)
			}
		}
		for _, p := range providers {
			figures = append(figures, convFigure{name: g.name + ": share served by " + p, n: n, of: share(func(s convServed) bool { return s.provider == p }), unit: "%"})
		}
		figures = append(figures,
			convFigure{name: g.name + ": share that met a 429", n: n, of: share(func(s convServed) bool { return s.met429 }), unit: "%"},
			convFigure{name: g.name + ": share retried", n: n, of: share(func(s convServed) bool { return s.retried }), unit: "%"})
		if strings.HasPrefix(g.name, "follow-up") {
			var prompt float64
			for _, s := range real {
				if g.in(s) {
					prompt += float64(s.prompt)
				}
			}
			figures = append(figures, convFigure{name: g.name + ": cached tokens billed, share of their prompt tokens", unit: "%",
				of: func(rs []convServed) float64 {
					c := 0.0
					for _, s := range rs {
						if g.in(s) {
							c += float64(s.cached)
						}
					}
					return c / prompt
				},
				slack: func([]float64) float64 {
					// Two of the group's longest turns, and a block and
					// framing per turn.
					var sizes []float64
					framing := 0.0
					for _, s := range real {
						if g.in(s) {
							sizes = append(sizes, float64(s.prompt))
							framing += 128 + 3 + 4*float64(s.turn+1)
						}
					}
					slices.Sort(sizes)
					return (sizes[len(sizes)-1] + sizes[len(sizes)-2] + framing) / prompt
				}})
		}
		if g.name == "all requests" || strings.HasSuffix(g.name, "turns") {
			figures = append(figures, convFigure{name: g.name + ": client $ per 1,000 requests", unit: "$",
				of: func(rs []convServed) float64 {
					c := 0.0
					for _, s := range rs {
						if g.in(s) {
							c += s.usd
						}
					}
					return 1000 * c / float64(n)
				},
				slack: func([]float64) float64 {
					// convSlack of the group's dearest requests in any run,
					// as the difference they make per 1,000.
					var costs []float64
					for _, r := range append(slices.Clone(simRuns), real) {
						for _, s := range r {
							if g.in(s) {
								costs = append(costs, s.usd)
							}
						}
					}
					slices.Sort(costs)
					top := 0.0
					for _, c := range costs[max(0, len(costs)-convSlack):] {
						top += c
					}
					return 1000 * top / float64(n)
				}})
		}
	}

	var table strings.Builder
	table.WriteString("| figure | simulation: mean [min, max] of " + strconv.Itoa(simSeeds) + " seeds | tolerated | real |\n|---|---|---|---|\n")
	var failures []string
	for _, f := range figures {
		vals := make([]float64, len(simRuns))
		mean := 0.0
		for k, r := range simRuns {
			vals[k] = f.of(r)
			mean += vals[k] / float64(len(vals))
		}
		got := f.of(real)
		if f.n > 0 && mean == 0 && got == 0 {
			continue // nothing of this kind in either run
		}
		slack := float64(convSlack) / float64(f.n)
		if f.slack != nil {
			slack = f.slack(vals)
		}
		lo, hi := slices.Min(vals)-slack, slices.Max(vals)+slack
		fmtv := func(v float64) string {
			if f.unit == "%" {
				return strconv.FormatFloat(100*v, 'f', 0, 64) + " %"
			}
			return "$" + strconv.FormatFloat(v, 'f', 3, 64)
		}
		row := fmt.Sprintf("| %s | %s [%s, %s] | [%s, %s] | %s", f.name, fmtv(mean), fmtv(slices.Min(vals)), fmtv(slices.Max(vals)),
			fmtv(max(lo, 0)), fmtv(hiShown(f, hi)), fmtv(got))
		if got < lo-1e-9 || got > hi+1e-9 || math.IsNaN(got) {
			row += " (NO)"
			failures = append(failures, fmt.Sprintf("%s: real %s outside [%s, %s]", f.name, fmtv(got), fmtv(lo), fmtv(hi)))
		}
		table.WriteString(row + " |\n")
	}
	// The cache rule on the real run's own routing: each follow-up turn's
	// cached tokens are what the simulation's provider model gives for the
	// provider that served it — the conversation's last prompt that provider
	// served, if that was within its cache lifetime (counted from the
	// arrival of that turn: first tokens come a second later, and the
	// trace's gaps are 10 s or more from any lifetime) — less provsim's
	// block rounding and framing.
	lifetime := map[string]float64{}
	for _, p := range prof.Models[0].Providers {
		if p.Cache.HitRate > 0 {
			lifetime[p.Name] = parseDur(t, p.Cache.Lifetime, "5m").Seconds()
		}
	}
	type warmth struct {
		prompt int64
		at     float64
	}
	warm := map[string]map[string]warmth{} // conversation → provider → its last prompt there
	for _, s := range real {
		if s.conv == "" {
			continue
		}
		if warm[s.conv] == nil {
			warm[s.conv] = map[string]warmth{}
		}
		want := int64(0)
		if w, ok := warm[s.conv][s.provider]; ok && s.at-w.at < lifetime[s.provider] {
			want = w.prompt
		}
		slack := int64(128 + 3 + 4*(s.turn+1))
		if s.cached > want || s.cached < want-slack {
			failures = append(failures, fmt.Sprintf("%s turn %d on %s: %d cached tokens, the simulation's cache rule says %d (less up to %d)",
				s.conv, s.turn, s.provider, s.cached, want, slack))
		}
		warm[s.conv][s.provider] = warmth{s.prompt, s.at}
	}

	var lines strings.Builder
	for i, s := range real {
		fmt.Fprintf(&lines, "  %6.1f %6d %-5s t%d real %-8s cached %6d retried %-5v 429 %-5v | sim seed 1 %-8s cached %6d retried %-5v 429 %v\n",
			s.at, s.prompt, s.conv, s.turn, s.provider, s.cached, s.retried, s.met429,
			simRuns[0][i].provider, simRuns[0][i].cached, simRuns[0][i].retried, simRuns[0][i].met429)
	}
	t.Logf("%s form, %d requests, time scale %g; per request (arrival s, prompt, conversation, turn):\n%s\n%s",
		form, len(trace), scale, lines.String(), table.String())
	require.Empty(t, failures, "the simulation and the real system disagree")
}

// TestCapacityContract: the routing simulation's capacity and provsim's,
// given the same calls at the same (scaled) times, answer the same calls
// 429 with the same Retry-After: the rule both runs of
// TestConversationsAgainstRealSystem play. One provider with a capacity of
// 4 calls and 25,000 prompt tokens a minute; the trace's calls are at least
// 3 s of simulated time away from any moment a counted call leaves the
// window (0.3 s of real time at scale 0.1), so the real clock's jitter
// cannot move a call across it.
func TestCapacityContract(t *testing.T) {
	const scale = 0.1
	calls := []struct {
		at     float64
		prompt int64
	}{
		{0, 8000}, {10, 8001}, {20, 5000}, {30, 5001}, {40, 3000}, {50, 1000}, {65, 8002}, {75, 2000},
		{77, 9000}, {85, 4000}, {105, 9001}, {110, 3001}, {130, 3002},
	}
	dir := t.TempDir()
	profile := `models:
  - id: m
    providers:
      - name: full
        price: {input: 1, output: 1}
        ttft: {curve: [{tokens: 0, ttft: 100ms}]}
        output_tokens_per_second: 1000
        capacity: {requests_per_minute: 4, tokens_per_minute: 25000, retry_after: 20s}
`
	traffic := "model: m\nstart: 2026-10-28T00:00:00Z\nduration: 3m\nrequests: 1\noutput: {median: 1}\none_off:\n  share: 1\n  sizes: [{share: 1, min: 1, max: 2}]\n"
	var trace bytes.Buffer
	for _, c := range calls {
		fmt.Fprintf(&trace, `{"at": %g, "prompt_tokens": %d, "output_tokens": 1, "stream": true}`+"\n", c.at, c.prompt)
	}
	for name, body := range map[string]string{"profile.yaml": profile, "traffic.yaml": traffic, "trace.jsonl": trace.String()} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
	}
	records := filepath.Join(dir, "records.csv")
	var out, errOut bytes.Buffer
	require.NoError(t, simulate.Main([]string{"--profile", filepath.Join(dir, "profile.yaml"), "--traffic", filepath.Join(dir, "traffic.yaml"),
		"--trace", filepath.Join(dir, "trace.jsonl"), "--policies", "smart", "--probe-interval", "0", "--hedge-budget-usd", "-1",
		"--records", records}, &out, &errOut), errOut.String())
	f, err := os.Open(records)
	require.NoError(t, err)
	rows, err := csv.NewReader(f).ReadAll()
	_ = f.Close()
	require.NoError(t, err)
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	simRefused := map[int64]bool{}
	for _, r := range rows[1:] {
		n, _ := strconv.ParseInt(r[col["prompt_tokens"]], 10, 64)
		// One endpoint: a refused call is the request's only call.
		simRefused[n] = r[col["calls_429"]] != "0"
		require.Equal(t, r[col["calls_429"]] == "0", r[col["answered"]] == "true", "one call per request")
	}
	require.Len(t, simRefused, len(calls))

	sim := startStack(t, stackOptions{simConfig: &provsim.Config{TimeScale: scale, Providers: []provsim.ProviderConfig{{Name: "full", Listen: "127.0.0.1:0",
		Models: []provsim.ModelConfig{{ID: "m", DefaultOutputTokens: 1,
			Capacity: provsim.CapacityConfig{RequestsPerMinute: 4, TokensPerMinute: 25000, RetryAfter: provsim.Duration(20 * time.Second)}}}}}}}).sim
	url := sim.Provider("full").URL() + "/chat/completions"
	var want, got []string
	start := time.Now()
	for _, c := range calls {
		body, err := json.Marshal(map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user",
			"content": longPrompt(int(c.prompt) - 8)}}})
		require.NoError(t, err)
		timer := time.NewTimer(time.Until(start.Add(time.Duration(c.at * scale * float64(time.Second)))))
		<-timer.C
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		w := fmt.Sprintf("%gs %d tokens: 200", c.at, c.prompt)
		if simRefused[c.prompt] {
			w = fmt.Sprintf("%gs %d tokens: 429 after 2000ms", c.at, c.prompt) // the 20 s Retry-After, scaled
		}
		g := fmt.Sprintf("%gs %d tokens: %d", c.at, c.prompt, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			g += " after " + resp.Header.Get("Retry-After-Ms") + "ms"
		}
		want, got = append(want, w), append(got, g)
	}
	require.Equal(t, want, got, "the simulation's 429s (want) and provsim's (got)")
	require.Contains(t, want, "30s 5001 tokens: 429 after 2000ms", "the trace meets the token limit")
	require.Contains(t, want, "50s 1000 tokens: 429 after 2000ms", "and the request limit")
}
