package experiment

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/etcdtest"
	"github.com/switchboard-ai/switchboard/services/decider/internal/testing/fakeclock"
)

// clock is a settable clock.
type clock = fakeclock.Clock

// replica starts a manager named name on the etcd at endpoint, running
// until the returned stop is called (which saves, as a clean stop does).
func replica(t *testing.T, endpoint, name string, clk *clock) (m *Manager, stop func()) {
	t.Helper()
	st := etcdtest.Connect(t, endpoint)
	m = New(Options{
		Client: st.Client(), Replica: name, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: clk.Now, SaveInterval: time.Hour, Limits: Limits{MinBlock: time.Second},
	})
	rev, err := m.Load(t.Context())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx, rev); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return m, stop
}

func TestManagerAcrossReplicasAndRestarts(t *testing.T) {
	endpoint := etcdtest.Start(t)
	clk := fakeclock.New(t0)
	a, stopA := replica(t, endpoint, "a", clk)
	b, _ := replica(t, endpoint, "b", clk)

	_, err := a.Get(t.Context())
	require.ErrorIs(t, err, ErrNone)
	_, err = a.Stop(t.Context())
	require.ErrorIs(t, err, ErrNone)
	_, err = a.Start(t.Context(), &switchboardv1.StartExperimentRequest{Experiment: &switchboardv1.Experiment{Arms: []string{"smart"}}})
	require.ErrorIs(t, err, ErrInvalid)

	def, err := a.Start(t.Context(), &switchboardv1.StartExperimentRequest{
		Experiment: &switchboardv1.Experiment{
			Arms: []string{"smart", "routing-cost"}, Block: durationpb.New(10 * time.Second), BurnIn: durationpb.New(2 * time.Second),
			Schedule: switchboardv1.ExperimentSchedule_EXPERIMENT_SCHEDULE_ALTERNATING,
		},
		Blocks: 4,
	})
	require.NoError(t, err)
	require.Equal(t, t0.Add(40*time.Second), def.GetEndTime().AsTime())
	_, ok := a.Arm("any/model", t0.Add(time.Second))
	require.True(t, ok, "the replica that started it follows it at once, before its watch catches up")
	_, err = b.Start(t.Context(), &switchboardv1.StartExperimentRequest{Experiment: def})
	require.ErrorIs(t, err, ErrRunning)

	// Both replicas follow the definition from the watch.
	for _, m := range []*Manager{a, b} {
		require.Eventually(t, func() bool { _, ok := m.Arm("any/model", t0.Add(time.Second)); return ok }, 10*time.Second, 10*time.Millisecond)
		pol, _ := m.Arm("any/model", t0.Add(15*time.Second))
		require.Equal(t, routing.PolicyRoutingCost, pol)
	}
	// Replica a counts 3 requests in block 0 (one in the burn-in), b 2 in block 1.
	a.Observe([]*switchboardv1.ActivityRecord{
		rec("1", t0.Add(time.Second), 100*time.Millisecond, 110*time.Millisecond, time.Second, 10, 0.001),
		rec("2", t0.Add(3*time.Second), 100*time.Millisecond, 110*time.Millisecond, time.Second, 10, 0.001),
		rec("3", t0.Add(4*time.Second), 100*time.Millisecond, 110*time.Millisecond, time.Second, 10, 0.001),
	})
	b.Observe([]*switchboardv1.ActivityRecord{
		rec("4", t0.Add(13*time.Second), 300*time.Millisecond, 310*time.Millisecond, time.Second, 10, 0.002),
		rec("5", t0.Add(14*time.Second), 300*time.Millisecond, 310*time.Millisecond, time.Second, 10, 0.002),
	})
	require.NoError(t, b.Save(t.Context()))
	clk.Set(t0.Add(12 * time.Second))
	check := func(m *Manager, replicas []string) {
		t.Helper()
		got, err := m.Get(t.Context())
		require.NoError(t, err)
		require.Equal(t, def.GetId(), got.GetExperiment().GetId())
		require.Equal(t, replicas, got.GetReplicas())
		require.Equal(t, int64(2), got.GetArms()[0].GetRequests())
		require.Equal(t, int64(1), got.GetArms()[0].GetBurnInRequests())
		require.Equal(t, int64(2), got.GetArms()[1].GetRequests())
		require.Equal(t, "smart", got.GetArms()[0].GetPolicy())
		require.Equal(t, int64(1), got.GetCurrentBlock())
		require.Equal(t, "routing-cost", got.GetCurrentArm())
	}
	check(a, []string{"a", "b"}) // a's live figures and b's saved ones

	// A clean stop saves a's figures; a restart restores them.
	stopA()
	check(b, []string{"a", "b"})
	a2, _ := replica(t, endpoint, "a", clk)
	check(a2, []string{"a", "b"})
	a2.Observe([]*switchboardv1.ActivityRecord{rec("6", t0.Add(5*time.Second), 100*time.Millisecond, 110*time.Millisecond, time.Second, 10, 0.001)})
	got, err := a2.Get(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(3), got.GetArms()[0].GetRequests(), "the restored figures go on from where they were")

	// Stop: routing goes back at once, the figures stay readable, a new one may start.
	stopped, err := b.Stop(t.Context())
	require.NoError(t, err)
	require.Equal(t, clk.Now(), stopped.GetStopTime().AsTime())
	_, ok = b.Arm("any/model", t0.Add(15*time.Second))
	require.False(t, ok, "stopped at once on the replica that stopped it")
	require.Eventually(t, func() bool { _, ok := a2.Arm("any/model", t0.Add(15*time.Second)); return !ok }, 10*time.Second, 10*time.Millisecond)
	a2.Observe([]*switchboardv1.ActivityRecord{rec("7", t0.Add(15*time.Second), time.Millisecond, time.Millisecond, time.Second, 1, 0)})
	got, err = a2.Get(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(2), got.GetArms()[1].GetRequests(), "nothing counted after the stop")
	require.Equal(t, int64(-1), got.GetCurrentBlock())
	again, err := b.Stop(t.Context())
	require.NoError(t, err)
	require.Equal(t, stopped.GetStopTime().AsTime(), again.GetStopTime().AsTime(), "stopping twice changes nothing")

	_, err = a2.o.Client.Put(t.Context(), blockKey("ghost", "r", 1), "{}") // a late save of an older experiment
	require.NoError(t, err)
	next, err := a2.Start(t.Context(), &switchboardv1.StartExperimentRequest{Experiment: &switchboardv1.Experiment{
		Arms: []string{"routing-cost", "smart"}, Block: durationpb.New(time.Minute), StartTime: timestamppb.New(t0.Add(time.Minute)),
	}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := b.Get(t.Context())
		return err == nil && got.GetExperiment().GetId() == next.GetId()
	}, 10*time.Second, 10*time.Millisecond)
	old, err := a2.readBlocks(t.Context(), def.GetId(), "")
	require.NoError(t, err)
	require.Empty(t, old, "the previous experiment's figures went with it")
	ghost, err := a2.readBlocks(t.Context(), "ghost", "")
	require.NoError(t, err)
	require.Empty(t, ghost, "and any older leftovers")
}
