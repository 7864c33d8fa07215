// Command edgebench measures the data plane side by side: a fake upstream
// called directly, a stock httputil.ReverseProxy in front of it, and the
// whole default Switchboard (decider with embedded etcd, broker, reports
// and activity log; edge) in front of it, all on loopback, with the same
// closed-loop load. It prints requests per second, latency, time to the
// first chunk, CPU per request of each process, and memory per open
// stream at the edge; with --profile-dir it keeps CPU and allocation
// profiles of the edge and the decider under load. `make bench` runs it.
//
// The fake upstream and the proxy are this binary run again as child
// processes, so each one's CPU is read from /proc apart from the load
// generator's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/childproc"
)

// config is the benchmark's command line.
type config struct {
	duration, warmup    time.Duration
	rounds              int
	concurrency         []int
	streams             int
	rpc                 bool
	slowInterval        time.Duration
	slowDuration        time.Duration
	deciderBin, edgeBin string
	profileDir          string
	profileSeconds      int
	startTimeout        time.Duration
	keep                bool
	serve               string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("edgebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&cfg.duration, "duration", 2*time.Second, "measurement per target, load and round")
	fs.DurationVar(&cfg.warmup, "warmup", 300*time.Millisecond, "load before each measurement, not counted")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds; each runs every load against every target, in a rotated order")
	conc := fs.String("concurrency", "1,64", "comma-separated closed-loop concurrencies, each run streaming and not")
	fs.IntVar(&cfg.streams, "streams", 1000, "concurrent slow streams for the memory and tail-latency phase (0 skips it)")
	fs.BoolVar(&cfg.rpc, "rpc", true, "also call the decider straight, as the edge does: what its one call per request costs by itself")
	fs.DurationVar(&cfg.slowInterval, "slow-interval", 500*time.Millisecond, "time between the chunks of a slow stream")
	fs.DurationVar(&cfg.slowDuration, "slow-duration", 4*time.Second, "measurement of the slow-stream phase, per target")
	fs.StringVar(&cfg.deciderBin, "decider-bin", "bin/decider", "the decider binary (make build)")
	fs.StringVar(&cfg.edgeBin, "edge-bin", "bin/edge", "the edge binary (make build)")
	fs.StringVar(&cfg.profileDir, "profile-dir", "", "take CPU and allocation profiles of the edge and the decider under c=64 streaming into this directory")
	fs.IntVar(&cfg.profileSeconds, "profile-seconds", 3, "length of the profiles")
	fs.DurationVar(&cfg.startTimeout, "start-timeout", time.Minute, "longest wait for the system to answer")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the work directory (logs, catalog, etcd data)")
	fs.StringVar(&cfg.serve, "serve", "", "start the three targets, write a request file per target and load into this directory for another load generator (vegeta's format), and wait for SIGINT instead of measuring")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	var errs []error
	for f := range strings.SplitSeq(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("--concurrency: %q is not a positive number", f))
			continue
		}
		cfg.concurrency = append(cfg.concurrency, n)
	}
	if cfg.duration <= 0 || cfg.warmup < 0 || cfg.rounds < 1 || cfg.streams < 0 || cfg.slowInterval < 0 || cfg.profileSeconds < 1 {
		errs = append(errs, errors.New("--duration and --rounds must be positive; --warmup, --streams and --slow-interval not negative; --profile-seconds at least 1"))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	return cfg, errors.Join(errs...)
}

func main() {
	if ran, err := runRole(); ran {
		if err != nil {
			fmt.Fprintln(os.Stderr, "edgebench:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "edgebench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err = run(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "edgebench:", err)
		os.Exit(1)
	}
}

// Target names.
const (
	direct      = "direct"
	proxy       = "proxy"
	switchboard = "switchboard"
)

// results holds every sample: per load, per target, one per round.
type results struct {
	loads   []load
	samples map[load]map[string][]sample
	slow    map[string]sample // the slow-stream phase, per target
	rpc     map[rpcKey][]sample
	memory  memoryFigures
}

// memoryFigures is memory per open stream in the slow-stream phase.
type memoryFigures struct {
	streams                 int   // requests open when memory was read
	edgeRSS, edgeHeap       int64 // bytes per open stream
	proxyRSS                int64
	edgeHeapErr, edgeRSSErr error
}

// run starts everything, measures, prints to w and stops everything.
func run(ctx context.Context, cfg config, w io.Writer) (*results, error) {
	dir, err := os.MkdirTemp("", "edgebench-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if cfg.keep {
			fmt.Fprintf(w, "\nwork directory kept: %s\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	up, err := startRole(ctx, roleUp, cfg.slowInterval.String(), dir)
	if err != nil {
		return nil, err
	}
	defer up.Stop()
	px, err := startRole(ctx, roleProxy, "http://"+up.Addr, dir)
	if err != nil {
		return nil, err
	}
	defer px.Stop()
	sys, err := startSystem(ctx, cfg, dir, up.Addr)
	if err != nil {
		return nil, err
	}
	defer sys.stop()

	targets := []target{
		{name: direct, url: "http://" + up.Addr + "/v1/chat/completions", slow: "http://" + up.Addr + "/slow/v1/chat/completions",
			model: benchModel, slowM: benchModel, key: "sk-fake", pids: map[string]int{"upstream": up.Pid()}},
		{name: proxy, url: "http://" + px.Addr + "/v1/chat/completions", slow: "http://" + px.Addr + "/slow/v1/chat/completions",
			model: benchModel, slowM: benchModel, key: "sk-fake", pids: map[string]int{"proxy": px.Pid()}},
		{name: switchboard, url: "http://" + sys.edge.Addr + "/v1/chat/completions", slow: "http://" + sys.edge.Addr + "/v1/chat/completions",
			model: benchModel, slowM: slowModel, key: sys.key, pids: map[string]int{"edge": sys.edge.Pid(), "decider": sys.decider.Pid()}},
	}
	if cfg.serve != "" {
		return nil, serveTargets(ctx, cfg.serve, targets, w)
	}
	res := &results{samples: map[load]map[string][]sample{}, slow: map[string]sample{}, rpc: map[rpcKey][]sample{}}
	for _, c := range cfg.concurrency {
		for _, stream := range []bool{true, false} {
			l := load{conc: c, stream: stream}
			res.loads = append(res.loads, l)
			res.samples[l] = map[string][]sample{}
		}
	}
	printHeader(w, cfg)
	for round := range cfg.rounds {
		fmt.Fprintf(w, "round %d/%d ...\n", round+1, cfg.rounds)
		for _, l := range res.loads {
			for i := range targets {
				t := targets[(i+round)%len(targets)] // a rotated order, so no target always runs first
				s, err := drive(ctx, t, l, cfg.warmup, cfg.duration, nil)
				if err != nil {
					return res, err
				}
				res.samples[l][t.name] = append(res.samples[l][t.name], s)
			}
		}
	}
	if cfg.streams > 0 {
		fmt.Fprintf(w, "%d slow streams ...\n", cfg.streams)
		if err := slowPhase(ctx, cfg, targets, sys, px, res); err != nil {
			return res, err
		}
	}
	printResults(w, cfg, res)
	if cfg.rpc {
		if err := rpcPhase(ctx, cfg, sys, w, res); err != nil {
			return res, err
		}
	}
	if cfg.profileDir != "" {
		if err := profile(ctx, cfg, targets[2], sys, w); err != nil {
			return res, err
		}
	}
	return res, nil
}

// slowPhase holds cfg.streams streams open at once against each target,
// and reads the memory of the edge and the proxy midway.
func slowPhase(ctx context.Context, cfg config, targets []target, sys *system, px *childproc.Child, res *results) error {
	l := load{conc: cfg.streams, stream: true, slow: true}
	warmup := max(cfg.warmup, time.Second) // for every client to connect
	for _, t := range targets {
		var midway func(int)
		switch t.name {
		case switchboard:
			heap0, err0 := goMemory(ctx, sys.edge.Debug)
			rss0, errR := rss(sys.edge.Pid())
			midway = func(open int) {
				res.memory.streams = open
				heap1, err1 := goMemory(ctx, sys.edge.Debug)
				rss1, errR1 := rss(sys.edge.Pid())
				res.memory.edgeHeapErr = errors.Join(err0, err1)
				res.memory.edgeRSSErr = errors.Join(errR, errR1)
				if open > 0 {
					res.memory.edgeHeap = (heap1 - heap0) / int64(open)
					res.memory.edgeRSS = (rss1 - rss0) / int64(open)
				}
			}
		case proxy:
			rss0, _ := rss(px.Pid())
			midway = func(open int) {
				if rss1, err := rss(px.Pid()); err == nil && open > 0 {
					res.memory.proxyRSS = (rss1 - rss0) / int64(open)
				}
			}
		}
		s, err := drive(ctx, t, l, warmup, cfg.slowDuration, midway)
		if err != nil {
			return err
		}
		res.slow[t.name] = s
	}
	return nil
}

func printHeader(w io.Writer, cfg config) {
	fmt.Fprintf(w, "edgebench: %d round(s), %s per target and load after a %s warm-up; targets alternate within each round\n",
		cfg.rounds, cfg.duration, cfg.warmup)
	fmt.Fprintf(w, "machine: %d CPUs, %s, %s %s/%s\n\n", runtime.NumCPU(), cpuModel(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
