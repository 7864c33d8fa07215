package sim

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCommandTable(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	err := Main([]string{"--profile", "../../../../sim/profile.yaml", "--traffic", "../../../../sim/traffic.yaml",
		"--requests", "500", "--policies", "cheapest-input,smart", "--seed", "3"}, &out, &errOut)
	require.NoError(t, err)
	require.Contains(t, out.String(), "500 requests of deepseek/deepseek-v4.1-flash, seed 3")
	require.Contains(t, out.String(), "TTFT p50, 32k-128k prompts (s)            18.00            3.30")
	require.Contains(t, out.String(), "cheapest-input  smart")
}

func TestCommandRecords(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "records.csv")
	var out, errOut bytes.Buffer
	require.NoError(t, Main([]string{"--profile", "../../../../sim/profile.yaml", "--traffic", "../../../../sim/traffic.yaml",
		"--requests", "200", "--policies", "smart", "--seeds", "2", "--records", path}, &out, &errOut))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1+2*200, "a header and a row per request of each seed")
	require.Equal(t, "policy", rows[0][0])
	require.Equal(t, "smart", rows[1][0])
}

func TestCommandPlots(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	require.NoError(t, Main([]string{"--profile", "../../../../sim/profile.yaml", "--traffic", "../../../../sim/traffic.yaml",
		"--requests", "600", "--policies", "cheapest-input,smart", "--plots", dir}, &out, &errOut))
	for _, name := range []string{"ttft-32k-128k.svg", "ttft-over-128k.svg", "ttft-under-8k.svg", "cost-vs-p50.svg"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		dec := xml.NewDecoder(bytes.NewReader(data))
		for {
			_, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, "%s is well-formed XML", name)
		}
		require.Contains(t, string(data), ">cheapest-input", name)
		require.Contains(t, string(data), ">smart", name)
	}
	data, err := os.ReadFile(filepath.Join(dir, "ttft-32k-128k.svg"))
	require.NoError(t, err)
	require.Equal(t, 2, bytes.Count(data, []byte("<polyline")), "one curve per policy")
}

func TestCommandErrors(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	err := Main([]string{"--profile", "nope.yaml", "--traffic", "../../../../sim/traffic.yaml", "--seeds", "0",
		"--policies", "smart,fastest"}, &out, &errOut)
	require.ErrorContains(t, err, "--seeds must be in [1, 100]")
	require.ErrorContains(t, err, `unknown policy "fastest"`)
	require.ErrorContains(t, err, "nope.yaml")
	require.Empty(t, out.String())
}

func TestCommandProbeInterval(t *testing.T) {
	t.Parallel()
	probeCost := func(args ...string) string {
		var out, errOut bytes.Buffer
		require.NoError(t, Main(append([]string{"--profile", "../../../../sim/profile.yaml", "--traffic", "../../../../sim/traffic.yaml",
			"--requests", "200", "--policies", "smart"}, args...), &out, &errOut))
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.Contains(line, "probe cost ($)") {
				return strings.Fields(line)[len(strings.Fields(line))-1]
			}
		}
		t.Fatalf("no probe cost in %s", out.String())
		return ""
	}
	require.Equal(t, "0.000", probeCost("--probe-interval", "0"))
	byDefault := probeCost() // a whole run: once, for both assertions
	require.NotEqual(t, "0.000", byDefault)
	var out, errOut bytes.Buffer
	require.ErrorContains(t, Main([]string{"--probe-interval", "-1s"}, &out, &errOut), "--probe-interval must not be negative")
	require.ErrorContains(t, Main([]string{"--probe-sizes", "2048,x"}, &out, &errOut), `--probe-sizes: "x" is not a positive number`)
	small := probeCost("--probe-sizes", "1024")
	require.NotEqual(t, "0.000", small)
	require.NotEqual(t, byDefault, small, "one small probe size costs less than the three default ones")
}

// TestCommandOracleRegret: with the oracle among the policies the table
// has the regret rows, the oracle's own differences are zero, and every
// hedging policy has a line of hedged shares per hour.
func TestCommandOracleRegret(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.NoError(t, Main([]string{"--profile", "../../../../sim/profile.yaml", "--traffic", "../../../../sim/traffic.yaml",
		"--requests", "600", "--policies", "cheapest-input,smart,oracle", "--seeds", "2"}, &out, &errOut))
	text := out.String()
	for _, label := range []string{"client $ over oracle, streaming >32k", "TTFT p50 over oracle, streaming >32k", "TTFT p90 over oracle, streaming >32k",
		"regret: $ at no worse p50 and p90", "regret: p50 / p90 at no higher $"} {
		require.Contains(t, text, label)
	}
	var costRow string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "client $ over oracle") {
			costRow = line
		}
	}
	f := strings.Fields(costRow)
	require.Equal(t, "+0.0%", f[len(f)-1], "the oracle against itself")
	require.Contains(t, text, "Hedged share of streaming >32k requests by UTC hour")
	require.Contains(t, text, "\n  smart: ")
	require.Contains(t, text, "\n  oracle: ")
	require.NotContains(t, text, "\n  cheapest-input: ", "no hedges, no line")
	require.Contains(t, text, "hedge budget $5/day (paced, burst 1h0m0s)")
}

func TestRegret(t *testing.T) {
	t.Parallel()
	oracle := Summary{Policy: "oracle", Runs: []*Result{
		{figures: map[string]float64{regretCost: 1, regretP50: 2, regretP90: 5}},
		{figures: map[string]float64{regretCost: 2, regretP50: 3, regretP90: 6}}}}
	pair := func(cost, p50, p90 [2]float64) Summary {
		return Summary{Policy: "p", Runs: []*Result{
			{figures: map[string]float64{regretCost: cost[0], regretP50: p50[0], regretP90: p90[0]}},
			{figures: map[string]float64{regretCost: cost[1], regretP50: p50[1], regretP90: p90[1]}}}}
	}
	// 10 % dearer on both seeds, no slower: a cost regret of 10 %, no latency regret.
	c, cok, l, lok := regret(pair([2]float64{1.1, 2.2}, [2]float64{2, 3}, [2]float64{5, 6}), oracle)
	require.True(t, cok)
	require.Equal(t, "+10.0%", c)
	require.False(t, lok)
	require.Equal(t, "dearer", l)
	// As cheap, 50 % slower at p50: a latency regret, no cost regret.
	c, cok, l, lok = regret(pair([2]float64{1, 2}, [2]float64{3, 4.5}, [2]float64{5, 6}), oracle)
	require.False(t, cok)
	require.Equal(t, "slower", c)
	require.True(t, lok)
	require.Equal(t, "+50.0% / +0.0%", l)
}
