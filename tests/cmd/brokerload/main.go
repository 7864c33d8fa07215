// Command brokerload runs the rate-limit load test: the whole default
// Switchboard on loopback under bursts, long-context and max-output
// requests, streams left mid-way, a daily quota running out, provider 429
// and 503 storms and a noisy tenant beside a production one, checked from
// outside (docs/loadtest.md). It exits with status 1 when a limit was
// over-admitted or a scenario's check failed, 2 on bad flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/switchboard-ai/switchboard/tests/loadtest"
)

func main() {
	fs := flag.NewFlagSet("brokerload", flag.ContinueOnError)
	short := fs.Bool("short", false, "run every scenario briefly (about 30 s in all) instead of about 3 min")
	classes := fs.Bool("classes", true, "write workload_classes: sized for the run and tenant weights into the catalog, the noisy tenant unlimited; --classes=false keeps the default contracts, equal weights, and gives the noisy tenant a limit of its own")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of tables")
	only := fs.String("only", "", "comma-separated scenarios to run (default all: "+strings.Join(loadtest.ScenarioNames(), ",")+")")
	keep := fs.Bool("keep", false, "keep the work directory (catalog, logs, etcd data)")
	var bins loadtest.Binaries
	fs.StringVar(&bins.Decider, "decider-bin", "", "run this decider binary (make build) instead of the decider inside brokerload; with --edge-bin and --provsim-bin")
	fs.StringVar(&bins.Edge, "edge-bin", "", "run this edge binary")
	fs.StringVar(&bins.Provsim, "provsim-bin", "", "run this provider simulator binary")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "brokerload: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	opts := loadtest.Options{Short: *short, Classes: *classes, Keep: *keep, Binaries: bins, Progress: os.Stderr}
	if *only != "" {
		for n := range strings.SplitSeq(*only, ",") {
			n = strings.TrimSpace(n)
			known := false
			for _, k := range loadtest.ScenarioNames() {
				known = known || k == n
			}
			if !known {
				fmt.Fprintf(os.Stderr, "brokerload: unknown scenario %q\n", n)
				os.Exit(2)
			}
			opts.Only = append(opts.Only, n)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	rep, err := loadtest.Run(ctx, opts)
	stop()
	if rep != nil {
		if *asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rep)
		} else {
			rep.Print(os.Stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "brokerload:", err)
		os.Exit(1)
	}
	if !rep.Passed || rep.OverAdmission > 0 {
		os.Exit(1)
	}
}
