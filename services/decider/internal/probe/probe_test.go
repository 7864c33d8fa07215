package probe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

func prober(sizes []int64, eps ...*switchboardv1.Endpoint) *Prober {
	return New(Options{
		Interval: 1, Sizes: sizes,
		Models: func() []routing.ModelEndpoints { return []routing.ModelEndpoints{{Model: "m", Endpoints: eps}} },
		Send:   func(*switchboardv1.ReportResponse) bool { return true },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// TestDefaultSizesCoverEveryBucket: without a probe in a bucket, an
// endpoint's speed there is known only from the traffic routing already
// sent it, so the defaults probe each bucket, short prompts included.
func TestDefaultSizesCoverEveryBucket(t *testing.T) {
	plan := prober(nil, &switchboardv1.Endpoint{Id: "a/m"}).Plan()
	seen := map[tokens.Bucket]int{}
	for _, cmd := range plan {
		require.Equal(t, "a/m", cmd.GetEndpoint().GetId())
		require.EqualValues(t, 8, cmd.GetMaxOutputTokens())
		seen[tokens.BucketOf(cmd.GetPromptTokens())]++
	}
	for b := range tokens.Bucket(tokens.NumBuckets) {
		require.Equal(t, 1, seen[b], "one probe in %s", b)
	}
}

// TestPlanSkipsSizesOverTheContext: an endpoint is not probed with a
// prompt it cannot take; its other sizes are.
func TestPlanSkipsSizesOverTheContext(t *testing.T) {
	plan := prober(nil, &switchboardv1.Endpoint{Id: "small/m", ContextLength: 32 * 1024}, &switchboardv1.Endpoint{Id: "big/m"}).Plan()
	got := map[string][]int64{}
	for _, cmd := range plan {
		got[cmd.GetEndpoint().GetId()] = append(got[cmd.GetEndpoint().GetId()], cmd.GetPromptTokens())
	}
	require.Equal(t, []int64{2 * 1024, 20 * 1024}, got["small/m"])
	require.Equal(t, DefaultSizes, got["big/m"])
}

// steps is a clock for Run: each wait Run asks for is sent on waits, and
// ends when the test sends on its channel.
type steps struct{ waits chan wait }

type wait struct {
	d    time.Duration
	fire chan time.Time
}

func (s *steps) after(d time.Duration) <-chan time.Time {
	w := wait{d: d, fire: make(chan time.Time, 1)}
	s.waits <- w
	return w.fire
}

// next returns the wait Run asks for next, and lets it end.
func (s *steps) next(t *testing.T) time.Duration {
	t.Helper()
	select {
	case w := <-s.waits:
		w.fire <- time.Time{}
		return w.d
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not wait")
		return 0
	}
}

// running starts Run with a stepped clock; its sends come out on the
// returned channel; stop ends Run and waits for it.
func running(t *testing.T, o Options) (p *Prober, s *steps, sent <-chan *switchboardv1.ProbeCommand, stop func()) {
	t.Helper()
	s = &steps{waits: make(chan wait, 64)} // buffered: Run never blocks asking
	out := make(chan *switchboardv1.ProbeCommand, 64)
	send := o.Send
	o.Send = func(m *switchboardv1.ReportResponse) bool {
		out <- m.GetProbe()
		return send == nil || send(m)
	}
	o.After = s.after
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	p = New(o)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return p, s, out, stop
}

// Run spreads each round evenly over the interval, one probe per gap, in
// the plan's order, and plans the next round afresh (new ids) when one ends.
func TestRunSpreadsARoundOverTheInterval(t *testing.T) {
	eps := []*switchboardv1.Endpoint{{Id: "a/m"}, {Id: "b/m"}}
	p, s, sent, stop := running(t, Options{
		Interval: time.Minute, Sizes: []int64{1000, 2000},
		Models: func() []routing.ModelEndpoints { return []routing.ModelEndpoints{{Model: "m", Endpoints: eps}} },
	})
	ids := map[string]bool{}
	for round := range 2 {
		var got []string
		for range 4 {
			require.Equal(t, 15*time.Second, s.next(t), "round %d: a quarter of the interval before each of 4 probes", round)
			cmd := <-sent
			require.Equal(t, "m", cmd.GetModel())
			got = append(got, fmt.Sprint(cmd.GetEndpoint().GetId(), " ", cmd.GetPromptTokens()))
			require.False(t, ids[cmd.GetProbeId()], "a fresh id for every probe")
			require.Len(t, cmd.GetProbeId(), 16)
			ids[cmd.GetProbeId()] = true
		}
		require.Equal(t, []string{"a/m 1000", "a/m 2000", "b/m 1000", "b/m 2000"}, got)
	}
	stop()
	require.EqualValues(t, 8, p.sent)
	require.Zero(t, p.skipped)
}

// With nothing to probe, Run waits a whole interval and looks again: a
// model added meanwhile is probed in the next round.
func TestRunWaitsWhenNothingToProbe(t *testing.T) {
	var mu sync.Mutex
	var models []routing.ModelEndpoints
	_, s, sent, _ := running(t, Options{
		Interval: time.Minute, Sizes: []int64{1000},
		Models: func() []routing.ModelEndpoints {
			mu.Lock()
			defer mu.Unlock()
			return models
		},
	})
	require.Equal(t, time.Minute, s.next(t))
	mu.Lock()
	models = []routing.ModelEndpoints{{Model: "m", Endpoints: []*switchboardv1.Endpoint{{Id: "a/m"}}}}
	mu.Unlock()
	require.Equal(t, time.Minute, s.next(t), "the empty round's wait, then one gap of the whole interval for one probe")
	require.Equal(t, "a/m", (<-sent).GetEndpoint().GetId())
}

// A probe no edge took is counted as skipped, not retried: the round goes
// on at its pace.
func TestRunSkipsWithoutAnEdge(t *testing.T) {
	p, s, sent, stop := running(t, Options{
		Interval: time.Minute, Sizes: []int64{1000, 2000},
		Models: func() []routing.ModelEndpoints {
			return []routing.ModelEndpoints{{Model: "m", Endpoints: []*switchboardv1.Endpoint{{Id: "a/m"}}}}
		},
		Send: func(*switchboardv1.ReportResponse) bool { return false },
	})
	for _, size := range []int64{1000, 2000} {
		require.Equal(t, 30*time.Second, s.next(t))
		require.Equal(t, size, (<-sent).GetPromptTokens())
	}
	require.Equal(t, 30*time.Second, s.next(t), "the next round")
	<-sent
	stop()
	require.Zero(t, p.sent)
	require.EqualValues(t, 3, p.skipped)
}

// Run ends as soon as its context does, in the middle of a wait.
func TestRunEndsWithItsContext(t *testing.T) {
	_, s, sent, stop := running(t, Options{
		Interval: time.Hour,
		Models: func() []routing.ModelEndpoints {
			return []routing.ModelEndpoints{{Model: "m", Endpoints: []*switchboardv1.Endpoint{{Id: "a/m"}}}}
		},
	})
	w := <-s.waits // Run waits for the first gap, which never ends
	require.Equal(t, time.Hour/time.Duration(len(DefaultSizes)), w.d)
	stop()
	require.Empty(t, sent, "nothing sent after the context ended")
}
