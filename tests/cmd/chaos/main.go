// Command chaos runs the chaos test's long form (make chaos): three etcd
// members, three decider processes and three edges in two regions and the
// provider simulator under steady load, with faults drawn from --seed for
// --duration (or --schedule's, in order), tenants' limits drawn from the
// seed (or --rpm-limit, --conc-limit, --lease-limit), quota leases on
// (--no-leases: off) and attacks from valid credentials,
// judged from the providers' side (docs/chaos.md). It prints the events and a table of what was measured,
// and exits with status 1 when a check failed, 2 on bad flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/switchboard-ai/switchboard/tests/chaos"
)

func main() {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var o chaos.Options
	fs.DurationVar(&o.Duration, "duration", 5*time.Minute, "how long the load runs; faults come every 15-35 s after the first 15 s")
	fs.Int64Var(&o.Seed, "seed", 0, "seed of the fault schedule (0: from the clock; printed either way)")
	fs.BoolVar(&o.Short, "short", false, "the fixed schedule of the end-to-end test instead (about 90 s of load, one of each fault)")
	schedule := fs.String("schedule", "", "the faults in this order instead of drawn ones, comma-separated: attacks, kill, term, pause, etcd, cut (gaps of 15-35 s drawn from --seed; the load ends 8 s after the last)")
	fs.IntVar(&o.RPMLimit, "rpm-limit", 0, "tenant rpm's limit in requests a minute (0: drawn from --seed, 30-90)")
	fs.IntVar(&o.ConcLimit, "conc-limit", 0, "tenant conc's limit in requests in flight (0: drawn from --seed, 3-6)")
	fs.IntVar(&o.LeaseLimit, "lease-limit", 0, "tenant lease's limit in requests a minute, at least 100 so that it is leased (0: drawn from --seed, 100-180)")
	fs.BoolVar(&o.NoLeases, "no-leases", false, "run the deciders without --broker-leases: every replica forwards every reservation to the owner")
	fs.DurationVar(&o.SessionTTL, "broker-session-ttl", 3*time.Second, "the deciders' --broker-session-ttl")
	fs.BoolVar(&o.NoAttacks, "no-attacks", false, "leave the attacks out: the faults alone")
	fs.BoolVar(&o.Keep, "keep", false, "keep the work directory (logs, catalog, etcd data)")
	fs.Func("decider-arg", "a flag added to every decider's, after the run's own (repeatable; e.g. --decider-arg=--shutdown-timeout=5s)", func(v string) error {
		o.DeciderArgs = append(o.DeciderArgs, v)
		return nil
	})
	asJSON := fs.Bool("json", false, "print the result as JSON instead of tables")
	fs.StringVar(&o.Binaries.Decider, "decider-bin", "bin/decider", "the decider binary (make build)")
	fs.StringVar(&o.Binaries.Edge, "edge-bin", "bin/edge", "the edge binary")
	fs.StringVar(&o.Binaries.Provsim, "provsim-bin", "bin/provsim", "the provider simulator binary")
	fs.StringVar(&o.Binaries.Etcd, "etcd-bin", "", "an etcd binary (e.g. /usr/bin/etcd) to run the three members as its processes; empty: embedded members")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	if *schedule != "" {
		var err error
		if o.Schedule, err = chaos.ParseSchedule(*schedule); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: --schedule:", err)
			os.Exit(2)
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "chaos: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	o.Progress = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res, err := chaos.Run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	} else {
		res.Print(os.Stdout)
	}
	if !res.Passed() {
		os.Exit(1)
	}
}
