package experiment

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

var t0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

func def(block, burnIn time.Duration) *switchboardv1.Experiment {
	return &switchboardv1.Experiment{
		Id: "x", Arms: []string{"smart", "routing-cost"}, StartTime: timestamppb.New(t0),
		Block: durationpb.New(block), BurnIn: durationpb.New(burnIn), Seed: 7,
	}
}

func mustParse(t *testing.T, e *switchboardv1.Experiment) *Plan {
	t.Helper()
	p, err := Parse(e, Limits{MinBlock: time.Second})
	require.NoError(t, err)
	return p
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(e *switchboardv1.Experiment)
		wantErr string
	}{
		{name: "one arm", edit: func(e *switchboardv1.Experiment) { e.Arms = e.Arms[:1] }, wantErr: "exactly two arms"},
		{name: "unknown policy", edit: func(e *switchboardv1.Experiment) { e.Arms[1] = "cheapest" }, wantErr: "unknown routing policy"},
		{name: "same policy twice", edit: func(e *switchboardv1.Experiment) { e.Arms[1] = "smart" }, wantErr: "both arms"},
		{name: "block too short", edit: func(e *switchboardv1.Experiment) { e.Block = durationpb.New(time.Millisecond) }, wantErr: "shorter than the minimum"},
		{name: "burn-in as long as the block", edit: func(e *switchboardv1.Experiment) { e.BurnIn = e.Block }, wantErr: "burn-in"},
		{name: "end before start", edit: func(e *switchboardv1.Experiment) { e.EndTime = timestamppb.New(t0) }, wantErr: "not after start_time"},
		{name: "no start", edit: func(e *switchboardv1.Experiment) { e.StartTime = nil }, wantErr: "start_time is required"},
		{name: "empty model", edit: func(e *switchboardv1.Experiment) { e.Models = []string{""} }, wantErr: "empty model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := def(time.Hour, time.Minute)
			tt.edit(e)
			_, err := Parse(e, Limits{MinBlock: time.Second})
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
	e := def(time.Millisecond, 0)
	e.Arms = nil
	_, err := Parse(e, Limits{MinBlock: time.Second})
	require.ErrorContains(t, err, "two arms")
	require.ErrorContains(t, err, "minimum", "every mistake at once")
}

func TestLocateAndBurnIn(t *testing.T) {
	e := def(3*time.Hour, time.Hour)
	e.Schedule = switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_ALTERNATING
	e.EndTime = timestamppb.New(t0.Add(9 * time.Hour))
	p := mustParse(t, e)
	tests := []struct {
		name string
		at   time.Duration
		want Slot
		ok   bool
	}{
		{name: "before the start", at: -time.Nanosecond},
		{name: "start of block 0 is burn-in", at: 0, want: Slot{Block: 0, Arm: 0, BurnIn: true}, ok: true},
		{name: "last instant of the burn-in", at: time.Hour - time.Nanosecond, want: Slot{Block: 0, BurnIn: true}, ok: true},
		{name: "after the burn-in", at: time.Hour, want: Slot{Block: 0}, ok: true},
		{name: "block 1", at: 4 * time.Hour, want: Slot{Block: 1, Arm: 1}, ok: true},
		{name: "block 2 burn-in", at: 6 * time.Hour, want: Slot{Block: 2, Arm: 0, BurnIn: true}, ok: true},
		{name: "the end", at: 9 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ok := p.Locate(t0.Add(tt.at))
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, s)
		})
	}
}

// TestPairedRandomSchedule checks each pair of blocks gives one block to
// each arm, that the order varies from pair to pair, and that the same seed
// gives the same schedule (every replica agrees).
func TestPairedRandomSchedule(t *testing.T) {
	p := mustParse(t, def(time.Hour, 0))
	q := mustParse(t, def(time.Hour, 0))
	firsts := 0
	for pair := range 200 {
		a, b := p.ArmOf(2*pair), p.ArmOf(2*pair+1)
		require.Equal(t, 1, a+b, "pair %d: one block of each arm", pair)
		require.Equal(t, a, q.ArmOf(2*pair), "the same seed, the same schedule")
		firsts += a
	}
	require.InDelta(t, 100, firsts, 30, "the order within pairs is drawn, not fixed")
	other := def(time.Hour, 0)
	other.Seed = 8
	o := mustParse(t, other)
	differ := 0
	for pair := range 200 {
		if o.ArmOf(2*pair) != p.ArmOf(2*pair) {
			differ++
		}
	}
	require.Positive(t, differ, "another seed, another schedule")
}

func TestArmScope(t *testing.T) {
	e := def(time.Hour, 10*time.Minute)
	e.Schedule = switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_ALTERNATING
	e.Models = []string{"vendor/a"}
	e.StopTime = timestamppb.New(t0.Add(90 * time.Minute))
	p := mustParse(t, e)
	pol, ok := p.Arm("vendor/a", t0.Add(5*time.Minute))
	require.True(t, ok, "burn-in requests are routed by the arm too")
	require.Equal(t, routing.PolicySmart, pol)
	pol, ok = p.Arm("vendor/a", t0.Add(65*time.Minute))
	require.True(t, ok)
	require.Equal(t, routing.PolicyRoutingCost, pol)
	_, ok = p.Arm("vendor/b", t0.Add(5*time.Minute))
	require.False(t, ok, "a model outside the experiment")
	_, ok = p.Arm("vendor/a", t0.Add(90*time.Minute))
	require.False(t, ok, "stopped")
	require.True(t, p.Stopped)
}

func TestNormalize(t *testing.T) {
	now := t0.Add(time.Minute)
	e := Normalize(&switchboardv1.Experiment{Arms: []string{"smart", "routing-cost"}, Block: durationpb.New(time.Hour), Id: "mine"}, 4, now)
	require.Equal(t, now, e.GetStartTime().AsTime(), "starts now by default")
	require.Equal(t, now.Add(4*time.Hour), e.GetEndTime().AsTime(), "4 blocks")
	require.Equal(t, switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_PAIRED_RANDOM, e.GetSchedule())
	require.NotZero(t, e.GetSeed())
	require.NotEqual(t, "mine", e.GetId(), "the decider names it")
	require.NotEmpty(t, e.GetId())
}
