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
	var out, errOut bytes.Buffer
	err := Main([]string{"--profile", "../../../../sim/profile.yaml", "--traffic", "../../../../sim/traffic.yaml",
		"--requests", "500", "--policies", "cheapest-input,smart", "--seed", "3"}, &out, &errOut)
	require.NoError(t, err)
	require.Contains(t, out.String(), "500 requests of deepseek/deepseek-v4.1-flash, seed 3")
	require.Contains(t, out.String(), "TTFT p50, 32k-128k prompts (s)            18.00            3.30")
	require.Contains(t, out.String(), "cheapest-input  smart")
}

func TestCommandRecords(t *testing.T) {
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
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	require.NoError(t, Main([]string{"--profile", "../../../../sim/profile.yaml", "--traffic", "../../../../sim/traffic.yaml",
		"--requests", "2000", "--policies", "cheapest-input,smart", "--plots", dir}, &out, &errOut))
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
	var out, errOut bytes.Buffer
	err := Main([]string{"--profile", "nope.yaml", "--traffic", "../../../../sim/traffic.yaml", "--seeds", "0",
		"--policies", "smart,fastest"}, &out, &errOut)
	require.ErrorContains(t, err, "--seeds must be in [1, 100]")
	require.ErrorContains(t, err, `unknown policy "fastest"`)
	require.ErrorContains(t, err, "nope.yaml")
	require.Empty(t, out.String())
}

func TestCommandProbeInterval(t *testing.T) {
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
	require.NotEqual(t, "0.000", probeCost())
	var out, errOut bytes.Buffer
	require.ErrorContains(t, Main([]string{"--probe-interval", "-1s"}, &out, &errOut), "--probe-interval must not be negative")
	require.ErrorContains(t, Main([]string{"--probe-sizes", "2048,x"}, &out, &errOut), `--probe-sizes: "x" is not a positive number`)
	small := probeCost("--probe-sizes", "1024")
	require.NotEqual(t, "0.000", small)
	require.NotEqual(t, probeCost(), small, "one small probe size costs less than the three default ones")
}
