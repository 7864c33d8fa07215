// Package experiment owns switchback experiments: two routing policies
// (arms) alternate in fixed time blocks, and every request is measured under
// the arm of the block it arrived in. The package holds the experiment's
// definition and schedule (plan.go), the mergeable per-block figures built
// from the activity records (aggregate.go, hist.go), the estimates with
// their confidence intervals (report.go), and the copy of both kept in etcd
// so the experiment outlives a restart and every replica's figures can be
// merged (manager.go). docs/architecture.md explains the method.
package experiment

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

// Plan is a validated experiment definition: which arm runs when, for
// which models. It is immutable; a stop makes a new Plan.
type Plan struct {
	// ID names the experiment.
	ID string
	// Arms are the two policies compared.
	Arms [2]routing.Policy
	// Start is when block 0 starts.
	Start time.Time
	// Block is the length of a block; BurnIn the discarded start of each.
	Block, BurnIn time.Duration
	// Schedule chooses each block's arm; Seed draws the paired random one.
	Schedule switchboardv1.ExperimentSchedule
	Seed     uint64
	// End is when the experiment ends (the earlier of its end time and its
	// stop); zero runs until stopped.
	End time.Time
	// Stopped says the experiment was stopped (End is then the stop).
	Stopped bool
	models  map[string]bool // nil: every model
	def     *switchboardv1.Experiment
}

// Limits bound a definition.
type Limits struct {
	// MinBlock is the shortest block accepted. (Optional) Defaults to 1 minute.
	MinBlock time.Duration
}

func (l Limits) minBlock() time.Duration {
	if l.MinBlock <= 0 {
		return time.Minute
	}
	return l.MinBlock
}

// Parse validates a stored or requested definition. Every mistake is
// reported at once.
func Parse(e *switchboardv1.Experiment, l Limits) (*Plan, error) {
	var errs []error
	p := &Plan{ID: e.GetId(), Schedule: e.GetSchedule(), Seed: e.GetSeed(), def: e}
	if p.Schedule == switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_UNSPECIFIED {
		p.Schedule = switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_PAIRED_RANDOM
	}
	if _, ok := switchboardv1.ExperimentSchedule_name[int32(p.Schedule)]; !ok {
		errs = append(errs, fmt.Errorf("unknown schedule %d", p.Schedule))
	}
	if len(e.GetArms()) != 2 {
		errs = append(errs, fmt.Errorf("an experiment has exactly two arms, not %d", len(e.GetArms())))
	} else {
		for i, a := range e.GetArms() {
			pol, err := routing.ParsePolicy(a)
			if err != nil {
				errs = append(errs, fmt.Errorf("arm %d: %w", i+1, err))
			}
			p.Arms[i] = pol
		}
		if p.Arms[0] == p.Arms[1] && p.Arms[0] != "" {
			errs = append(errs, fmt.Errorf("both arms are %q: compare two different policies", p.Arms[0]))
		}
	}
	if !e.GetStartTime().IsValid() {
		errs = append(errs, errors.New("start_time is required"))
	}
	p.Start = e.GetStartTime().AsTime()
	p.Block, p.BurnIn = e.GetBlock().AsDuration(), e.GetBurnIn().AsDuration()
	if p.Block < l.minBlock() {
		errs = append(errs, fmt.Errorf("block %v is shorter than the minimum %v", p.Block, l.minBlock()))
	}
	if p.BurnIn < 0 || p.BurnIn >= p.Block {
		errs = append(errs, fmt.Errorf("burn-in %v must be at least 0 and shorter than the block %v", p.BurnIn, p.Block))
	}
	if e.GetEndTime() != nil {
		p.End = e.GetEndTime().AsTime()
		if !p.End.After(p.Start) {
			errs = append(errs, fmt.Errorf("end_time %v is not after start_time %v", p.End, p.Start))
		}
	}
	if e.GetStopTime() != nil {
		stop := e.GetStopTime().AsTime()
		if p.End.IsZero() || stop.Before(p.End) {
			p.End = stop
		}
		p.Stopped = true
	}
	if len(e.GetModels()) > 0 {
		p.models = map[string]bool{}
		for _, m := range e.GetModels() {
			if m == "" {
				errs = append(errs, errors.New("models: an empty model id"))
			}
			p.models[m] = true
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// Definition returns the definition the plan was parsed from.
func (p *Plan) Definition() *switchboardv1.Experiment { return p.def }

// Normalize fills in a requested definition's defaults (start now, a seed
// from the clock, the end after blocks blocks) and its id and create time.
func Normalize(e *switchboardv1.Experiment, blocks int32, now time.Time) *switchboardv1.Experiment {
	out := &switchboardv1.Experiment{
		Arms: slices.Clone(e.GetArms()), StartTime: e.GetStartTime(), Block: e.GetBlock(), BurnIn: e.GetBurnIn(),
		Schedule: e.GetSchedule(), Seed: e.GetSeed(), Models: slices.Clone(e.GetModels()), EndTime: e.GetEndTime(),
		CreateTime: timestamppb.New(now),
	}
	if out.StartTime == nil {
		out.StartTime = timestamppb.New(now)
	}
	if out.Schedule == switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_UNSPECIFIED {
		out.Schedule = switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_PAIRED_RANDOM
	}
	if out.Seed == 0 {
		out.Seed = uint64(now.UnixNano())
	}
	if out.BurnIn == nil {
		out.BurnIn = durationpb.New(0)
	}
	if blocks > 0 && out.Block.IsValid() {
		out.EndTime = timestamppb.New(out.StartTime.AsTime().Add(time.Duration(blocks) * out.Block.AsDuration()))
	}
	out.Id = fmt.Sprintf("%s-%x", now.UTC().Format("20060102T150405Z"), rand.Uint32()) //nolint:gosec // a name, not a secret
	return out
}

// InScope reports whether the experiment covers model.
func (p *Plan) InScope(model string) bool { return p.models == nil || p.models[model] }

// Models are the models covered, nil for every model.
func (p *Plan) Models() []string {
	if p.models == nil {
		return nil
	}
	out := make([]string, 0, len(p.models))
	for m := range p.models {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// Slot is where a time falls in the experiment.
type Slot struct {
	// Block is the block's index from 0.
	Block int
	// Arm is the index in Plan.Arms of the block's policy.
	Arm int
	// BurnIn says the time is in the block's burn-in.
	BurnIn bool
}

// Locate returns the slot of t, and false before the start and from the
// end on.
func (p *Plan) Locate(t time.Time) (Slot, bool) {
	if t.Before(p.Start) || (!p.End.IsZero() && !t.Before(p.End)) {
		return Slot{}, false
	}
	since := t.Sub(p.Start)
	b := int(since / p.Block)
	return Slot{Block: b, Arm: p.ArmOf(b), BurnIn: since-time.Duration(b)*p.Block < p.BurnIn}, true
}

// ArmOf is the arm of block b (0 or 1). Every replica computes the same
// schedule from the definition alone, so they switch together without
// talking to each other.
func (p *Plan) ArmOf(b int) int {
	if p.Schedule == switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_ALTERNATING {
		return b % 2
	}
	// Paired random: one block of each arm per pair, the order drawn per
	// pair from the seed. A strictly alternating schedule with a block
	// length that divides a day gives each arm the same hours every day,
	// so the daily cycle of traffic would pass for a difference between
	// the arms; a coin per block would leave the arms unequal in time.
	first := int(mix(p.Seed^mix(uint64(b/2))) & 1)
	return first ^ (b % 2)
}

// mix is SplitMix64's finaliser: a well-spread hash of x, so the coin of
// each pair is a pure function of the seed and the pair (no allocation on
// the decision path).
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Arm returns the policy of model at now, and false when the experiment
// does not cover it (another model, before the start, after the end).
// Requests in a burn-in are routed by their block's arm too: the burn-in is
// when the new arm settles, only its figures are discarded.
func (p *Plan) Arm(model string, now time.Time) (routing.Policy, bool) {
	if !p.InScope(model) {
		return "", false
	}
	s, ok := p.Locate(now)
	if !ok {
		return "", false
	}
	return p.Arms[s.Arm], true
}
