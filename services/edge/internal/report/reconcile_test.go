package report

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/testing/fakedecider"
)

func reconcileOf(id string) *switchboardv1.ReconcileRequest {
	return &switchboardv1.ReconcileRequest{ReservationId: id, Outcome: switchboardv1.Outcome_OUTCOME_OK,
		Usage: &switchboardv1.Usage{InputTokens: 10, CostUsd: 0.01}}
}

// sequencesOf returns, per reservation id, the sequences of the batches
// that carried it, in order received.
func sequencesOf(fd *fakedecider.Server, id string) []uint64 {
	var out []uint64
	for _, b := range fd.ReconcileBatches() {
		for _, r := range b.GetReconciles() {
			if r.GetReservationId() == id {
				out = append(out, b.GetSequence())
			}
		}
	}
	return out
}

// A reconciliation is kept until the decider acknowledges it: sent again
// on the same stream after ResendAfter, and forgotten once acknowledged.
func TestReconcileResentUntilAcknowledged(t *testing.T) {
	fd := fakedecider.Start(t)
	fd.WithholdReconcileAcks(true) // the broker has no owner yet
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: 5 * time.Millisecond, ResendAfter: 20 * time.Millisecond})
	run(t, s)
	s.Hold("r1")
	s.Reconcile(reconcileOf("r1"))
	require.Empty(t, s.Held(), "a reconciled reservation is no longer declared")
	require.Eventually(t, func() bool { return len(sequencesOf(fd, "r1")) >= 3 }, 10*time.Second, time.Millisecond,
		"sent again while unacknowledged")
	seqs := sequencesOf(fd, "r1")
	require.Equal(t, seqs[0], seqs[len(seqs)-1], "the same batch, by its sequence")
	require.Equal(t, 1, s.UnackedReconciles())

	fd.WithholdReconcileAcks(false)
	require.Eventually(t, func() bool { return s.UnackedReconciles() == 0 }, 10*time.Second, time.Millisecond)
	require.Zero(t, s.DroppedReconciles())
}

// replayed reports how many times the reservation id was sent again
// unnumbered (a replay), once the fake has seen marker, sent after.
func replayed(t *testing.T, fd *fakedecider.Server, s *Stream, id string) int {
	t.Helper()
	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	s.Reconcile(reconcileOf(marker))
	require.Eventually(t, func() bool { return len(sequencesOf(fd, marker)) == 1 }, 10*time.Second, time.Millisecond)
	n := 0
	for _, seq := range sequencesOf(fd, id) {
		if seq == 0 {
			n++
		}
	}
	return n
}

// An acknowledged reconciliation is sent again, unnumbered, to each newer
// owner of the broker the decider announces, on the stream it has (no
// break needed); not to the owner that applied it, nor again to one it was
// replayed to, nor because a stream broke and came back to the same owner.
// A new owner is also declared the reservations held.
func TestReconcileReplayedToEachNewerOwner(t *testing.T) {
	fd := fakedecider.Start(t)
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: 5 * time.Millisecond, ResendAfter: time.Hour,
		HeartbeatInterval: time.Hour, MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	run(t, s)
	s.Hold("in-flight")
	s.Reconcile(reconcileOf("r1"))
	require.Eventually(t, func() bool { return s.UnackedReconciles() == 0 }, 10*time.Second, time.Millisecond)
	require.Zero(t, replayed(t, fd, s, "r1"), "acknowledged by the owner of term 1")

	fd.SetOwnerTerm(1)
	require.Zero(t, replayed(t, fd, s, "r1"), "the same owner: nothing to replay")

	beats := len(fd.Heartbeats())
	fd.SetOwnerTerm(2)
	require.Eventually(t, func() bool { return replayed(t, fd, s, "r1") == 1 }, 10*time.Second, time.Millisecond,
		"replayed to the new owner on the same stream")
	require.Equal(t, 1, fd.Streams(), "no new stream was needed")
	require.Eventually(t, func() bool { return len(fd.Heartbeats()) > beats }, 10*time.Second, time.Millisecond)
	require.Equal(t, []string{"in-flight"}, fd.Heartbeats()[len(fd.Heartbeats())-1].GetReservationIds(),
		"the new owner is declared the reservations in use")
	require.Equal(t, 1, replayed(t, fd, s, "r1"), "once")

	fd.SetOwnerTerm(3)
	require.Eventually(t, func() bool { return replayed(t, fd, s, "r1") == 2 }, 10*time.Second, time.Millisecond,
		"and to the owner after it")

	fd.Restart()
	require.Eventually(t, func() bool { return s.Sessions() >= 2 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 2, replayed(t, fd, s, "r1"), "a new stream to the same owner replays nothing")
}

// An ack that names an older term than the decider announced (the old
// owner applied the batch; its ack arrived after the new owner's term) is
// replayed at once: the new owner may lack it.
func TestReconcileAckedUnderAnOlderTermIsReplayed(t *testing.T) {
	fd := fakedecider.Start(t)
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: 5 * time.Millisecond, ResendAfter: time.Hour})
	run(t, s)
	fd.SetOwnerTerm(5)
	fd.AckUnderTerm(4)
	s.Reconcile(reconcileOf("late-ack"))
	require.Eventually(t, func() bool { return s.UnackedReconciles() == 0 }, 10*time.Second, time.Millisecond)
	fd.AckUnderTerm(0)
	require.Eventually(t, func() bool { return replayed(t, fd, s, "late-ack") == 1 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 1, replayed(t, fd, s, "late-ack"), "once")
}

// What the decider never acknowledged is sent first on the next stream.
func TestReconcileResentOnReconnect(t *testing.T) {
	fd := fakedecider.Start(t)
	fd.WithholdReconcileAcks(true)
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: 5 * time.Millisecond, ResendAfter: time.Hour,
		// Reconnect at once: the test is about what is sent on the new stream, not when.
		MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	run(t, s)
	s.Reconcile(reconcileOf("r1"))
	require.Eventually(t, func() bool { return len(sequencesOf(fd, "r1")) == 1 }, 10*time.Second, time.Millisecond)
	fd.Stop()
	s.Reconcile(reconcileOf("while-down"))
	fd.WithholdReconcileAcks(false)
	fd.Restart()
	require.Eventually(t, func() bool { return s.UnackedReconciles() == 0 }, 10*time.Second, time.Millisecond)
	require.Len(t, sequencesOf(fd, "r1"), 2, "sent again on the new stream")
	require.Len(t, sequencesOf(fd, "while-down"), 1)
}

// The reservations of the calls in flight are declared right after each
// hello and then every HeartbeatInterval, until reconciled or forgotten.
func TestHeartbeatDeclaresHeldReservations(t *testing.T) {
	fd := fakedecider.Start(t)
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: 5 * time.Millisecond, HeartbeatInterval: 10 * time.Millisecond})
	s.Hold("a")
	s.Hold("b")
	s.Hold("")
	run(t, s)
	last := func() []string {
		hs := fd.Heartbeats()
		if len(hs) == 0 {
			return nil
		}
		return hs[len(hs)-1].GetReservationIds()
	}
	require.Eventually(t, func() bool { return len(fd.Heartbeats()) >= 3 }, 10*time.Second, time.Millisecond)
	msgs := fd.Received()
	require.NotNil(t, msgs[0].GetHello())
	require.Equal(t, []string{"a", "b"}, msgs[1].GetHeartbeat().GetReservationIds(), "declared right after the hello")

	s.Reconcile(reconcileOf("a"))
	require.Eventually(t, func() bool { return slices.Equal(last(), []string{"b"}) }, 10*time.Second, time.Millisecond)

	fd.Restart()
	require.Eventually(t, func() bool { return s.Sessions() >= 2 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		msgs := fd.Received()
		for i, m := range msgs {
			if m.GetHello() != nil && i > 0 {
				return i+1 < len(msgs) && slices.Equal(msgs[i+1].GetHeartbeat().GetReservationIds(), []string{"b"})
			}
		}
		return false
	}, 10*time.Second, time.Millisecond, "a new stream declares what is held at once")

	s.Forget("b")
	s.Hold("c")
	require.Eventually(t, func() bool { return slices.Equal(last(), []string{"c"}) }, 10*time.Second, time.Millisecond,
		"a forgotten reservation is no longer declared")
}

// Acknowledged reconciliations older than ReplayWindow are not replayed.
func TestReconcileReplayWindow(t *testing.T) {
	fd := fakedecider.Start(t)
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: 5 * time.Millisecond, ReplayWindow: time.Nanosecond})
	run(t, s)
	s.Reconcile(reconcileOf("old"))
	require.Eventually(t, func() bool { return s.UnackedReconciles() == 0 }, 10*time.Second, time.Millisecond)
	fd.SetOwnerTerm(2)
	require.Zero(t, replayed(t, fd, s, "old"), "not replayed")
}

// The reconciliations kept for a replay are bounded by count as well as by
// age: the oldest go first.
func TestReconcileReplayBounded(t *testing.T) {
	s := New(Options{Client: nil, Hello: hello})
	for i := range maxRecent/64 + 4 {
		rs := make([]*switchboardv1.ReconcileRequest, 64)
		for j := range rs {
			rs[j] = reconcileOf(fmt.Sprintf("r%d-%d", i, j))
		}
		s.ackedReconcile(s.sentReconcile(rs), 1)
	}
	s.learnTerm(2)
	taken, _ := s.takeReplays()
	var again []*switchboardv1.ReconcileRequest
	for _, e := range taken {
		again = append(again, e.reconciles...)
	}
	require.Len(t, again, maxRecent)
	require.Equal(t, "r4-0", again[0].GetReservationId(), "the oldest were dropped")
	none, _ := s.takeReplays()
	require.Empty(t, none, "taken once")
	s.untake(taken[:1]) // the stream broke before it went
	taken, _ = s.takeReplays()
	require.Len(t, taken, 1, "taken again on the next stream")
}

// A reconciliation frees a tenant's slot at the broker, so it is sent the
// moment it is queued, not at the next flush tick: a client at its
// concurrency limit that sends its next request at once finds the slot free.
func TestReconcileSentAtOnce(t *testing.T) {
	fd := fakedecider.Start(t)
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: time.Hour, ResendAfter: time.Hour})
	run(t, s)
	require.Eventually(t, func() bool { return s.Sessions() >= 1 }, 10*time.Second, time.Millisecond)
	for _, id := range []string{"r1", "r2", "r3"} {
		s.Reconcile(reconcileOf(id))
		// The guard is a hang guard: with an hourly tick, only an eager send
		// gets the reconciliation there.
		require.Eventually(t, func() bool { return len(sequencesOf(fd, id)) == 1 }, 10*time.Second, time.Millisecond,
			"%s sent without waiting for the hourly flush", id)
	}
	require.Eventually(t, func() bool { return s.UnackedReconciles() == 0 }, 10*time.Second, time.Millisecond)

	// While the decider withholds its acks, only a few batches go eagerly;
	// the rest wait for the tick and go together.
	fd.WithholdReconcileAcks(true)
	for i := range eagerReconcileBatches {
		id := fmt.Sprintf("held-%d", i)
		s.Reconcile(reconcileOf(id))
		require.Eventually(t, func() bool { return len(sequencesOf(fd, id)) == 1 }, 10*time.Second, time.Millisecond)
	}
	require.Equal(t, eagerReconcileBatches, s.reconcileBatchesInFlight())
}

// A reconciliation a Reconcile RPC applied (a released reservation) is kept
// for the replay window too, and sent to a newer owner like one the stream
// carried.
func TestReconcileAppliedByRPCIsReplayed(t *testing.T) {
	fd := fakedecider.Start(t)
	s := New(Options{Client: dial(t, fd.Addr()), Hello: hello, FlushInterval: 5 * time.Millisecond})
	run(t, s)
	require.Eventually(t, func() bool { return s.Sessions() >= 1 }, 10*time.Second, time.Millisecond)
	s.Hold("released")
	s.Applied(reconcileOf("released"), 1)
	require.Empty(t, s.Held(), "no longer declared")
	require.Zero(t, replayed(t, fd, s, "released"))
	fd.SetOwnerTerm(2)
	require.Eventually(t, func() bool { return replayed(t, fd, s, "released") == 1 }, 10*time.Second, time.Millisecond)
}

// A batch whose send fails is sent again on the next stream as it was
// numbered: not also as a new batch from what was pending. (The reconcile
// batch, numbered before its send, stayed pending too and went out twice,
// as sequences 1 and 2; so did an activity batch.)
func TestFailedSendIsSentAgainOnce(t *testing.T) {
	fd := fakedecider.Start(t)
	client := &failingClient{EdgeServiceClient: dial(t, fd.Addr())}
	client.failActivity.Store(true)
	client.failReconcile.Store(true)
	s := New(Options{Client: client, Hello: hello, FlushInterval: 5 * time.Millisecond,
		MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	s.Activity(&switchboardv1.ActivityRecord{Id: "a1"})
	s.Reconcile(reconcileOf("r1"))
	run(t, s)
	count := func(id string) int { return activityCount(fd, id) }
	require.Eventually(t, func() bool {
		return !client.failActivity.Load() && !client.failReconcile.Load() && count("a1") > 0 && len(sequencesOf(fd, "r1")) > 0
	}, 10*time.Second, time.Millisecond)
	// Sent after any copy on the same stream: once these are in, so is
	// every copy.
	s.Activity(&switchboardv1.ActivityRecord{Id: "a2"})
	s.Reconcile(reconcileOf("r2"))
	require.Eventually(t, func() bool { return count("a2") > 0 && len(sequencesOf(fd, "r2")) > 0 }, 10*time.Second, time.Millisecond)
	// An unacknowledged batch the stream's break cut off is sent again as
	// it was, under its sequence, which the decider applies once.
	seqs := slices.Compact(sequencesOf(fd, "r1"))
	require.Len(t, seqs, 1, "r1 reached the decider in one batch: %v", sequencesOf(fd, "r1"))
	require.Equal(t, 1, count("a1"), "a1 reached the decider once")
}

// failingClient's streams fail the first send of an activity batch and of a
// reconcile batch, without sending it.
type failingClient struct {
	switchboardv1.EdgeServiceClient
	failActivity, failReconcile atomic.Bool
}

func (c *failingClient) Report(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[switchboardv1.ReportRequest, switchboardv1.ReportResponse], error) {
	st, err := c.EdgeServiceClient.Report(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return &failingStream{BidiStreamingClient: st, c: c}, nil
}

type failingStream struct {
	grpc.BidiStreamingClient[switchboardv1.ReportRequest, switchboardv1.ReportResponse]
	c *failingClient
}

func (s *failingStream) Send(m *switchboardv1.ReportRequest) error {
	if (m.GetActivity() != nil && s.c.failActivity.CompareAndSwap(true, false)) ||
		(m.GetReconcile().GetSequence() != 0 && s.c.failReconcile.CompareAndSwap(true, false)) {
		return status.Error(codes.Unavailable, "send failed")
	}
	return s.BidiStreamingClient.Send(m)
}
