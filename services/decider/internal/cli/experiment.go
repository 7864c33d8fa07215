package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func experimentStartCommand() *command {
	return &command{name: "experiment start", summary: "start a switchback experiment between two routing policies", dial: true,
		about: "Starts a switchback experiment: two routing policies alternate in fixed time blocks, and each arm's figures\n" +
			"are compared over the blocks (switchboard experiment show).",
		setup: func(fs *flag.FlagSet) func(context.Context, *run) error {
			build := StartFlags(fs)
			return func(ctx context.Context, r *run) error {
				if err := r.positional(0, 0); err != nil {
					return err
				}
				req, err := build()
				if err != nil {
					return usageError{err.Error()}
				}
				resp, err := once(ctx, r, func(ctx context.Context, c switchboardv1.DeciderClient) (*switchboardv1.StartExperimentResponse, error) {
					return c.StartExperiment(ctx, req)
				})
				if err != nil {
					return err
				}
				if r.json() {
					return writeJSON(r.env.Stdout, resp)
				}
				fmt.Fprint(r.env.Stdout, "started ")
				PrintDefinition(r.env.Stdout, resp.GetExperiment())
				return nil
			}
		}}
}

func experimentStopCommand() *command {
	return &command{name: "experiment stop", summary: "stop the running experiment (its figures stay readable)", dial: true,
		about: "Stops the running experiment: routing goes back to the usual policies at once; the figures stay readable.",
		setup: func(*flag.FlagSet) func(context.Context, *run) error {
			return func(ctx context.Context, r *run) error {
				if err := r.positional(0, 0); err != nil {
					return err
				}
				resp, err := once(ctx, r, func(ctx context.Context, c switchboardv1.DeciderClient) (*switchboardv1.StopExperimentResponse, error) {
					return c.StopExperiment(ctx, &switchboardv1.StopExperimentRequest{})
				})
				if err != nil {
					return err
				}
				if r.json() {
					return writeJSON(r.env.Stdout, resp)
				}
				fmt.Fprint(r.env.Stdout, "stopped ")
				PrintDefinition(r.env.Stdout, resp.GetExperiment())
				return nil
			}
		}}
}

func experimentShowCommand() *command {
	return &command{name: "experiment show", summary: "the experiment and each arm's figures with 95% intervals", dial: true,
		about: "Shows the experiment (running or stopped) and its figures per arm, merged over every replica: a row per\n" +
			"metric, each arm's estimate with its 95% confidence interval, its pooled figure, and the difference.",
		setup: func(*flag.FlagSet) func(context.Context, *run) error {
			return func(ctx context.Context, r *run) error {
				if err := r.positional(0, 0); err != nil {
					return err
				}
				resp, err := once(ctx, r, func(ctx context.Context, c switchboardv1.DeciderClient) (*switchboardv1.GetExperimentResponse, error) {
					return c.GetExperiment(ctx, &switchboardv1.GetExperimentRequest{})
				})
				if err != nil {
					return err
				}
				if r.json() {
					return writeJSON(r.env.Stdout, resp)
				}
				PrintExperiment(r.env.Stdout, resp)
				return nil
			}
		}}
}

// StartFlags registers the flags of `experiment start` on fs and returns
// what builds the request from them.
func StartFlags(fs *flag.FlagSet) func() (*switchboardv1.StartExperimentRequest, error) {
	arms := fs.String("arms", "smart,routing-cost", "the two routing policies compared, comma-separated")
	block := fs.Duration("block", 3*time.Hour, "length of a time block")
	burnIn := fs.Duration("burn-in", time.Hour, "start of every block whose requests are not counted")
	schedule := fs.String("schedule", "paired-random", "paired-random (one block of each arm per pair, order drawn from --seed) or alternating")
	seed := fs.Uint64("seed", 0, "seed of the paired random schedule (0: from the clock)")
	models := fs.String("models", "", "comma-separated models in the experiment (empty: every model)")
	start := fs.String("start", "", "RFC 3339 time the first block starts (empty: now)")
	end := fs.String("end", "", "RFC 3339 time the experiment ends (empty: when stopped)")
	blocks := fs.Int("blocks", 0, "end after this many blocks (instead of --end)")
	return func() (*switchboardv1.StartExperimentRequest, error) {
		var errs []error
		e := &switchboardv1.Experiment{
			Arms: splitList(*arms), Block: durationpb.New(*block), BurnIn: durationpb.New(*burnIn),
			Seed: *seed, Models: splitList(*models),
		}
		switch *schedule {
		case "paired-random":
			e.Schedule = switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_PAIRED_RANDOM
		case "alternating":
			e.Schedule = switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_ALTERNATING
		default:
			errs = append(errs, fmt.Errorf("--schedule %q: use paired-random or alternating", *schedule))
		}
		for _, t := range []struct {
			flag, val string
			dst       **timestamppb.Timestamp
		}{{"--start", *start, &e.StartTime}, {"--end", *end, &e.EndTime}} {
			if t.val == "" {
				continue
			}
			at, err := time.Parse(time.RFC3339, t.val)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", t.flag, err))
				continue
			}
			*t.dst = timestamppb.New(at)
		}
		if *blocks < 0 || *blocks > 1<<20 {
			errs = append(errs, fmt.Errorf("--blocks %d must be between 0 and %d", *blocks, 1<<20))
		}
		if *blocks > 0 && *end != "" {
			errs = append(errs, errors.New("--blocks and --end exclude each other"))
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		return &switchboardv1.StartExperimentRequest{Experiment: e, Blocks: int32(*blocks)}, nil //nolint:gosec // bounded above
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// PrintDefinition writes an experiment's definition on a few lines.
func PrintDefinition(w io.Writer, e *switchboardv1.Experiment) {
	schedule := "paired random"
	if e.GetSchedule() == switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_ALTERNATING {
		schedule = "alternating"
	}
	fmt.Fprintf(w, "experiment %s: %s, blocks of %v with %v burn-in, %s schedule (seed %d)\n",
		e.GetId(), strings.Join(e.GetArms(), " vs "), e.GetBlock().AsDuration(), e.GetBurnIn().AsDuration(), schedule, e.GetSeed())
	models := "every model"
	if len(e.GetModels()) > 0 {
		models = strings.Join(e.GetModels(), ", ")
	}
	fmt.Fprintf(w, "models: %s\nstart: %s", models, e.GetStartTime().AsTime().Format(time.RFC3339))
	if e.GetEndTime() != nil {
		fmt.Fprintf(w, ", end: %s", e.GetEndTime().AsTime().Format(time.RFC3339))
	}
	if e.GetStopTime() != nil {
		fmt.Fprintf(w, ", stopped: %s", e.GetStopTime().AsTime().Format(time.RFC3339))
	}
	fmt.Fprintln(w)
}

// PrintExperiment writes an experiment's figures: one row per metric, each
// arm's estimate (mean over its blocks) with its 95% interval and its
// pooled figure, then the difference between the arms.
func PrintExperiment(w io.Writer, r *switchboardv1.GetExperimentResponse) {
	PrintDefinition(w, r.GetExperiment())
	if r.GetCurrentBlock() >= 0 {
		fmt.Fprintf(w, "now: block %d, %s\n", r.GetCurrentBlock(), r.GetCurrentArm())
	} else {
		fmt.Fprintln(w, "now: not running")
	}
	fmt.Fprintf(w, "replicas: %s\n", strings.Join(r.GetReplicas(), ", "))
	arms := r.GetArms()
	for _, a := range arms {
		fmt.Fprintf(w, "%s: %d requests in %d blocks (%d more in burn-in, not counted)\n", a.GetPolicy(), a.GetRequests(), a.GetBlocks(), a.GetBurnInRequests())
	}
	fmt.Fprintln(w, "\nestimate = mean of the per-block figures [95% CI, Student's t over blocks]; pooled = all counted requests at once")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	head := []string{"METRIC", "UNIT"}
	for _, a := range arms {
		head = append(head, strings.ToUpper(a.GetPolicy()), "POOLED")
	}
	if len(arms) == 2 {
		head = append(head, "DIFFERENCE ("+arms[1].GetPolicy()+" − "+arms[0].GetPolicy()+")")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for i, m := range firstArmMetrics(arms) {
		row := []string{m.GetName(), m.GetUnit()}
		for _, a := range arms {
			if i >= len(a.GetMetrics()) {
				row = append(row, "-", "-")
				continue
			}
			am := a.GetMetrics()[i]
			pooled := "-"
			if am.GetBlocks() > 0 {
				pooled = formatValue(am.GetUnit(), am.GetPooled())
			}
			row = append(row, formatEstimate(am), pooled)
		}
		if len(arms) == 2 && i < len(r.GetDifferences()) {
			row = append(row, formatEstimate(r.GetDifferences()[i]))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
}

func firstArmMetrics(arms []*switchboardv1.ArmReport) []*switchboardv1.MetricEstimate {
	if len(arms) == 0 {
		return nil
	}
	return arms[0].GetMetrics()
}

// formatEstimate is "estimate [low, high]", without the interval when there
// is none, "-" without data.
func formatEstimate(m *switchboardv1.MetricEstimate) string {
	if m.GetBlocks() == 0 {
		return "-"
	}
	s := formatValue(m.GetUnit(), m.GetEstimate())
	if m.GetHasInterval() {
		s += " [" + formatValue(m.GetUnit(), m.GetCiLow()) + ", " + formatValue(m.GetUnit(), m.GetCiHigh()) + "]"
	}
	return s
}

func formatValue(unit string, v float64) string {
	switch unit {
	case "ms":
		return fmt.Sprintf("%.0f", v)
	case "tokens/s":
		return fmt.Sprintf("%.1f", v)
	case "usd":
		return fmt.Sprintf("%.4f", v)
	case "share":
		return fmt.Sprintf("%.1f%%", 100*v)
	}
	return fmt.Sprintf("%g", v)
}
