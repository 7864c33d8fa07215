package sim

import (
	"os"
	"strings"
	"testing"
)

// summaryOf builds a policy's summary from per-seed figures (one map per
// seed); figures not given are NaN and not compared.
func summaryOf(name string, seeds ...map[string]float64) Summary {
	s := Summary{Policy: name}
	for _, f := range seeds {
		all := map[string]float64{}
		for _, k := range FrontierKeys {
			all[k] = nan
		}
		for k, v := range f {
			all[k] = v
		}
		s.Runs = append(s.Runs, &Result{Policy: name, figures: all})
	}
	return s
}

func TestDominatesNeedsNoWorseEverywhereAndBetterBeyondTheInterval(t *testing.T) {
	t.Parallel()
	base := summaryOf("base",
		map[string]float64{"usd_per_1k_requests": 1.00, "ttft_p50_under_8k": 1.0},
		map[string]float64{"usd_per_1k_requests": 1.20, "ttft_p50_under_8k": 1.1},
		map[string]float64{"usd_per_1k_requests": 0.90, "ttft_p50_under_8k": 0.9})
	// Cheaper by 0.10 on every seed (a paired difference with no spread),
	// equally fast: dominates, although the two policies' own intervals
	// overlap widely.
	cheaper := summaryOf("cheaper",
		map[string]float64{"usd_per_1k_requests": 0.90, "ttft_p50_under_8k": 1.0},
		map[string]float64{"usd_per_1k_requests": 1.10, "ttft_p50_under_8k": 1.1},
		map[string]float64{"usd_per_1k_requests": 0.80, "ttft_p50_under_8k": 0.9})
	// Cheaper, but slower by a hair on average: not no worse everywhere
	// (strictly), yet within noise there (loosely).
	cheaperSlower := summaryOf("cheaper-slower",
		map[string]float64{"usd_per_1k_requests": 0.90, "ttft_p50_under_8k": 1.02},
		map[string]float64{"usd_per_1k_requests": 1.10, "ttft_p50_under_8k": 1.08},
		map[string]float64{"usd_per_1k_requests": 0.80, "ttft_p50_under_8k": 0.93})
	// Cheaper on average but not beyond the interval: no domination.
	noisy := summaryOf("noisy",
		map[string]float64{"usd_per_1k_requests": 0.50, "ttft_p50_under_8k": 1.0},
		map[string]float64{"usd_per_1k_requests": 1.40, "ttft_p50_under_8k": 1.1},
		map[string]float64{"usd_per_1k_requests": 0.90, "ttft_p50_under_8k": 0.9})
	sums := []Summary{base, cheaper, cheaperSlower, noisy}

	names := func(ds []Domination) string {
		var out []string
		for _, d := range ds {
			out = append(out, d.By)
		}
		return strings.Join(out, ",")
	}
	if got := names(Dominators(base, sums, true)); got != "cheaper" {
		t.Errorf("strict dominators of base = %q, want cheaper", got)
	}
	if got := names(Dominators(base, sums, false)); got != "cheaper,cheaper-slower" {
		t.Errorf("loose dominators of base = %q, want cheaper,cheaper-slower", got)
	}
	d := Dominators(base, sums, true)[0]
	if len(d.Better) != 1 || !strings.HasPrefix(d.Better[0], "usd_per_1k_requests -") {
		t.Errorf("cheaper is better on %v, want only usd_per_1k_requests", d.Better)
	}
	if got := names(Dominators(cheaper, sums, true)); got != "" {
		t.Errorf("cheaper is dominated by %q, want nobody", got)
	}
}

func TestPinnedPolicyRoutesToItsProviderFirst(t *testing.T) {
	t.Parallel()
	p, ok := PolicyNamed("only:steady")
	if !ok || p.Pin != "steady" {
		t.Fatalf("PolicyNamed(only:steady) = %+v, %v", p, ok)
	}
	prof, err := ParseProfile(mustRead(t, "../../../../sim/profile.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPins([]Policy{{Name: "only:nobody", Pin: "nobody"}}, prof, prof.Models[0].ID); err == nil {
		t.Error("a pin on a provider the model lacks was accepted")
	}
	tr, err := ParseTraffic(mustRead(t, "../../../../sim/traffic.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tr.Requests = 300
	res, err := Run(prof, tr, nil, p, 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]int{}
	for _, r := range res.recs {
		if r.ok && r.retries == 0 {
			served[r.provider]++
		}
	}
	for prov, n := range served {
		if prov != "steady" {
			t.Errorf("%d first attempts answered by %s, want every one by steady", n, prov)
		}
	}
	if served["steady"] == 0 {
		t.Error("steady answered nothing")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
