package sim

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
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
	policies := fs.String("policies", "", "comma-separated policies (default all: "+policyNames()+")")
	requests := fs.Int("requests", 0, "override the traffic file's request count")
	budget := fs.Float64("hedge-budget-usd", 5, "daily hedge budget; negative disables hedging")
	probeEvery := fs.Duration("probe-interval", 5*time.Minute, "how often each endpoint is probed at each size, as the decider's --probe-interval; 0 disables probes")
	probeSizes := fs.String("probe-sizes", "", "comma-separated probe prompt sizes in tokens, as the decider's --probe-sizes (default the decider's: 2048,20480,61440,153600)")
	records := fs.String("records", "", "also write one CSV row per simulated request to this file, for plots")
	plots := fs.String("plots", "", "also draw SVG plots into this directory: TTFT distributions per size, cost against TTFT p50")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
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
	opts := Options{HedgeBudgetUSD: *budget, ProbeInterval: *probeEvery, ProbeSizes: sizes}
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
	fmt.Fprintf(out, ", hedge budget $%g/day.\n\n", *budget)
	if err := WriteTable(out, sums); err != nil {
		return err
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
