package sim

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	"github.com/switchboard-ai/switchboard/services/decider/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
)

// Main runs the simulator with command-line args, writing the table to out.
func Main(args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(errOut)
	profilePath := fs.String("profile", "sim/profile.yaml", "provider profile (YAML)")
	trafficPath := fs.String("traffic", "sim/traffic.yaml", "traffic description (YAML); with --trace, only its model and start are used")
	tracePath := fs.String("trace", "", "recorded trace (JSONL) replayed instead of drawing traffic")
	seed := fs.Uint64("seed", 1, "random seed: the same seed gives the same table")
	seeds := fs.Int("seeds", 1, "number of seeds (seed, seed+1, ...) to run; figures are the mean ± 95% interval")
	policies := fs.String("policies", "", "comma-separated policies (default all: "+policyNames()+"; only:<provider> for a static single-provider choice)")
	requests := fs.Int("requests", 0, "override the traffic file's request count")
	budget := fs.Float64("hedge-budget-usd", 5, "daily hedge budget; negative disables hedging")
	burst := fs.Duration("hedge-budget-burst", hedge.DefaultBurst, "pace the hedge budget over the UTC day, as the decider's --hedge-budget-burst: by time t of the day hedges may spend the budget's share of t plus this; 24h spends it as hedges come")
	loserWarms := fs.Bool("hedge-loser-warms-cache", false, "every provider finishes reading a cancelled hedge leg's prompt into its cache (a profile's cache.cancelled_leg_warms does it for one provider)")
	probeEvery := fs.Duration("probe-interval", 5*time.Minute, "how often each endpoint is probed at each size, as the decider's --probe-interval; 0 disables probes")
	probeSizes := fs.String("probe-sizes", "", "comma-separated probe prompt sizes in tokens, as the decider's --probe-sizes (default the decider's: 2048,20480,61440,153600)")
	cool := fs.Duration("cooldown", 0, "how long a refusing endpoint is benched, as the decider's --cooldown (default the decider's rule, the breaker: 2m)")
	coolErrors := fs.Int("cooldown-errors", 0, "refusals within --cooldown-window that bench an endpoint, as the decider's --cooldown-errors (default the breaker's 3)")
	coolWindow := fs.Duration("cooldown-window", 0, "the span of --cooldown-errors, as the decider's --cooldown-window (default 1m)")
	records := fs.String("records", "", "also write one CSV row per simulated request to this file, for plots")
	plots := fs.String("plots", "", "also draw SVG plots into this directory: TTFT distributions per size, cost against TTFT p50")
	frontier := fs.Bool("frontier", false, "also run the static single-provider policy only:<provider> for every provider of the traffic's model, and print which policies dominate which")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	if *burst <= 0 {
		errs = append(errs, errors.New("--hedge-budget-burst must be positive"))
	}
	if *probeEvery < 0 {
		errs = append(errs, errors.New("--probe-interval must not be negative"))
	}
	var sizes []int64
	for _, f := range strings.Split(*probeSizes, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("--probe-sizes: %q is not a positive number of tokens", f))
			continue
		}
		sizes = append(sizes, n)
	}
	if *cool < 0 || *coolErrors < 0 || *coolWindow < 0 {
		errs = append(errs, errors.New("--cooldown, --cooldown-errors and --cooldown-window must not be negative"))
	}
	if *seeds < 1 || *seeds > 100 {
		errs = append(errs, errors.New("--seeds must be in [1, 100]"))
	}
	pols := Policies
	if *policies != "" {
		pols = nil
		for _, n := range strings.Split(*policies, ",") {
			p, ok := PolicyNamed(strings.TrimSpace(n))
			if !ok {
				errs = append(errs, fmt.Errorf("--policies: unknown policy %q (known: %s)", n, policyNames()))
				continue
			}
			pols = append(pols, p)
		}
	}
	pdata, err := os.ReadFile(*profilePath)
	if err != nil {
		errs = append(errs, err)
	}
	tdata, err := os.ReadFile(*trafficPath)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	prof, perr := ParseProfile(pdata)
	traffic, terr := ParseTraffic(tdata)
	if err := errors.Join(perr, terr); err != nil {
		return err
	}
	if *requests > 0 {
		traffic.Requests = *requests
	}
	if *frontier {
		pols = withPins(pols, prof, traffic.Model)
	}
	if err := checkPins(pols, prof, traffic.Model); err != nil {
		return err
	}
	var trace []TraceRecord
	if *tracePath != "" {
		f, err := os.Open(*tracePath)
		if err != nil {
			return err
		}
		trace, err = ParseTrace(f)
		_ = f.Close()
		if err != nil {
			return err
		}
	}
	opts := Options{HedgeBudgetUSD: *budget, ProbeInterval: *probeEvery, ProbeSizes: sizes, HedgeBudgetBurst: *burst, HedgeLoserWarmsCache: *loserWarms,
		Cooldown: cooldown.Options{Duration: *cool, Errors: *coolErrors, Window: *coolWindow}}
	if *probeEvery == 0 {
		opts.ProbeInterval = -1
	}
	started := time.Now()
	sums := make([]Summary, len(pols))
	for i, p := range pols {
		sums[i].Policy = p.Name
		for k := range *seeds {
			res, err := Run(prof, traffic, trace, p, *seed+uint64(k), opts)
			if err != nil {
				return err
			}
			sums[i].Runs = append(sums[i].Runs, res)
		}
	}
	n := traffic.Requests
	if trace != nil {
		n = len(trace)
	}
	fmt.Fprintf(out, "Simulated %s from %s: %d requests of %s, seed %d", traffic.Duration.D(), traffic.Start.Format(time.DateOnly),
		n, traffic.Model, *seed)
	if *seeds > 1 {
		fmt.Fprintf(out, "..%d (mean ± 95%% interval over %d seeds)", *seed+uint64(*seeds)-1, *seeds)
	}
	pacing := "paced, burst " + burst.String()
	if *burst >= hedge.Unpaced {
		pacing = "unpaced"
	}
	fmt.Fprintf(out, ", hedge budget $%g/day (%s)", *budget, pacing)
	if *loserWarms {
		fmt.Fprint(out, ", cancelled hedge legs warm the cache")
	}
	fmt.Fprint(out, ".\n\n")
	if err := WriteTable(out, sums); err != nil {
		return err
	}
	if *frontier {
		fmt.Fprintln(out)
		if err := WriteFrontier(out, sums, true); err != nil {
			return err
		}
		fmt.Fprintln(out)
		if err := WriteFrontier(out, sums, false); err != nil {
			return err
		}
	}
	if *records != "" {
		if err := writeRecordsFile(*records, sums); err != nil {
			return err
		}
	}
	if *plots != "" {
		if err := writePlots(*plots, sums); err != nil {
			return err
		}
	}
	fmt.Fprintf(errOut, "simulated %d policy-days in %s\n", len(pols)**seeds, time.Since(started).Round(time.Millisecond))
	return nil
}

// withPins adds only:<provider> for every provider of model that pols
// does not have yet.
func withPins(pols []Policy, prof *Profile, model string) []Policy {
	for _, m := range prof.Models {
		if m.ID != model {
			continue
		}
		for _, pr := range m.Providers {
			name := pinPrefix + pr.Name
			if !slices.ContainsFunc(pols, func(p Policy) bool { return p.Name == name }) {
				pols = append(pols, Policy{Name: name, Pin: pr.Name})
			}
		}
	}
	return pols
}

// checkPins refuses a static single-provider policy whose provider the
// traffic's model does not have.
func checkPins(pols []Policy, prof *Profile, model string) error {
	var errs []error
	for _, p := range pols {
		if p.Pin == "" {
			continue
		}
		found := false
		for _, m := range prof.Models {
			found = found || m.ID == model && slices.ContainsFunc(m.Providers, func(pr Provider) bool { return pr.Name == p.Pin })
		}
		if !found {
			errs = append(errs, fmt.Errorf("--policies: %s: model %s has no provider %q", p.Name, model, p.Pin))
		}
	}
	return errors.Join(errs...)
}

func policyNames() string {
	names := make([]string, len(Policies))
	for i, p := range Policies {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

func writeRecordsFile(path string, sums []Summary) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteRecords(f, sums); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func writePlots(dir string, sums []Summary) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	plots := []struct {
		name string
		draw func(io.Writer) error
	}{
		{"ttft-32k-128k.svg", func(w io.Writer) error { return WriteTTFTPlot(w, sums, tokens.Bucket32KTo128K) }},
		{"ttft-over-128k.svg", func(w io.Writer) error { return WriteTTFTPlot(w, sums, tokens.BucketOver128K) }},
		{"ttft-under-8k.svg", func(w io.Writer) error { return WriteTTFTPlot(w, sums, tokens.BucketUnder8K) }},
		{"cost-vs-p50.svg", func(w io.Writer) error { return WriteCostPlot(w, sums) }},
	}
	for _, p := range plots {
		f, err := os.Create(filepath.Join(dir, p.name))
		if err != nil {
			return err
		}
		if err := p.draw(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("draw %s: %w", p.name, err)
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}
