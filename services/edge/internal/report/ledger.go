package report

import (
	"cmp"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// ledger is what the stream delivered and the decider has not confirmed,
// and what it confirmed lately: activity batches and reconcile batches kept
// until acknowledged (and sent again if not), and acknowledged
// reconciliations kept for ReplayWindow with the owner term that applied
// them, to be sent again to each newer owner of the broker. It is safe for
// concurrent use.
type ledger struct {
	// window is how long an acknowledged reconciliation is kept for a
	// replay (Options.ReplayWindow).
	window time.Duration
	log    *slog.Logger

	mu sync.Mutex
	// Activity batches sent but not yet acknowledged as durable by the
	// decider, by sequence; a new stream sends them again first, so a record
	// is delivered at least once (the decider stores it once, by id).
	seq     uint64
	unacked map[uint64][]*switchboardv1.ActivityRecord
	// droppedActivity counts activity records lost: their queue was full,
	// or their batch was given up (maxUnacked).
	droppedActivity atomic.Int64

	// Reconcile batches, like activity batches, are kept until
	// acknowledged (rseq, runacked) and sent again if not.
	rseq     uint64
	runacked map[uint64]*sentReconciles
	// droppedReconciles counts reconciliations given up: their queue was
	// full, or their batch was (maxUnacked).
	droppedReconciles atomic.Int64
	// outstanding counts reconciliations queued or sent and not yet
	// acknowledged (nor given up).
	outstanding atomic.Int64
	// recent are acknowledged reconciliations kept for ReplayWindow, oldest
	// first, to be replayed to newer owners of the broker.
	recent  []*ackedReconciles
	recentN int // the reconciliations in recent
	// term is the newest term of the broker's owner this stream was told
	// of or saw in an ack; 0 until the stream's first (each stream starts
	// again from what its decider says).
	term int64
	// replayc tells the session that reconciliations wait to be replayed
	// (ackedReconciles.replay), or that beat is set: the held reservations
	// are to be declared to a new owner.
	replayc chan struct{}
	beat    bool
}

// ackedReconciles is an acknowledged reconcile batch, kept for a replay.
type ackedReconciles struct {
	reconciles []*switchboardv1.ReconcileRequest
	at         time.Time // acknowledged
	// term is the newest owner term it was sent to: the one its ack named,
	// then each newer one it was replayed to. An owner of a newer term may
	// lack it.
	term int64
	// replay marks it to be sent again, to the owner of term.
	replay bool
}

// maxRecent bounds the acknowledged reconciliations kept for a replay.
const maxRecent = 8192

// sentReconciles is a reconcile batch waiting for its acknowledgement.
type sentReconciles struct {
	reconciles []*switchboardv1.ReconcileRequest
	at         time.Time // last sent
}

// maxUnacked bounds the activity batches kept for resending; past it the
// oldest are given up (and counted as dropped) rather than growing forever
// while the decider is unreachable.
const maxUnacked = 1024

// sent numbers an activity batch and keeps it until it is acknowledged.
func (l *ledger) sent(records []*switchboardv1.ActivityRecord) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	l.unacked[l.seq] = records
	if len(l.unacked) > maxUnacked {
		oldest := l.seq
		for k := range l.unacked {
			oldest = min(oldest, k)
		}
		l.droppedActivity.Add(int64(len(l.unacked[oldest])))
		delete(l.unacked, oldest)
	}
	return l.seq
}

// acked forgets an acknowledged batch.
func (l *ledger) acked(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.unacked, seq)
}

// requeue puts every unacknowledged batch back in front of what is pending,
// in the order they were first sent, for the next stream.
func (l *ledger) requeue(p *pending) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.unacked) == 0 {
		return
	}
	seqs := make([]uint64, 0, len(l.unacked))
	for k := range l.unacked {
		seqs = append(seqs, k)
	}
	slices.Sort(seqs)
	var again []*switchboardv1.ActivityRecord
	for _, k := range seqs {
		again = append(again, l.unacked[k]...)
	}
	clear(l.unacked)
	p.activity = append(again, p.activity...)
}

// sentReconcile numbers a reconcile batch and keeps it until acknowledged.
func (l *ledger) sentReconcile(rs []*switchboardv1.ReconcileRequest) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rseq++
	l.runacked[l.rseq] = &sentReconciles{reconciles: rs, at: time.Now()}
	if len(l.runacked) > maxUnacked {
		oldest := l.rseq
		for k := range l.runacked {
			oldest = min(oldest, k)
		}
		n := int64(len(l.runacked[oldest].reconciles))
		l.droppedReconciles.Add(n)
		l.outstanding.Add(-n)
		delete(l.runacked, oldest)
	}
	return l.rseq
}

// reconcileBatchesInFlight returns how many reconcile batches wait for
// their ack.
func (l *ledger) reconcileBatchesInFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.runacked)
}

// ackedReconcile forgets an acknowledged reconcile batch, applied under the
// owner term term, and keeps it for the replay window.
func (l *ledger) ackedReconcile(seq uint64, term int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.runacked[seq]
	if b == nil {
		return
	}
	l.outstanding.Add(-int64(len(b.reconciles)))
	delete(l.runacked, seq)
	l.keepApplied(b.reconciles, term)
}

// Applied stops declaring a reservation a Reconcile RPC closed, and keeps
// the reconciliation, applied under the owner term the answer named, for
// the replay window, as one acknowledged on the stream is kept. It never
// blocks for long.
func (s *Stream) Applied(r *switchboardv1.ReconcileRequest, term int64) {
	s.Forget(r.GetReservationId())
	s.applied([]*switchboardv1.ReconcileRequest{r}, term)
}

// applied keeps reconciliations applied under term for the replay window.
func (l *ledger) applied(rs []*switchboardv1.ReconcileRequest, term int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keepApplied(rs, term)
}

// keepApplied keeps reconciliations applied under term for the replay
// window. mu is held.
func (l *ledger) keepApplied(rs []*switchboardv1.ReconcileRequest, term int64) {
	now := time.Now()
	l.newerTerm(term, now)
	e := &ackedReconciles{reconciles: rs, at: now, term: term}
	if term < l.term {
		// Applied by an owner older than the newest this stream knows of
		// (the ack crossed the new owner's term on its way): the new one
		// may not have it.
		e.term, e.replay = l.term, true
		l.wakeReplay()
	}
	l.recent = append(l.recent, e)
	l.recentN += len(rs)
	l.prune(now)
}

// learnTerm records the broker owner's term the decider announced.
func (l *ledger) learnTerm(term int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.newerTerm(term, time.Now())
}

// newerTerm records an owner term; when it is newer than the stream knew,
// every kept reconciliation sent to older terms only is marked for a replay,
// and, unless it is the stream's first term (its hello declared the held
// reservations already), so are the held reservations. mu is held.
func (l *ledger) newerTerm(term int64, now time.Time) {
	if term <= l.term {
		return
	}
	first := l.term == 0
	l.term = term
	l.prune(now)
	marked := false
	for _, e := range l.recent {
		if e.term < term {
			e.term, e.replay = term, true
			marked = true
		}
	}
	if !first {
		l.beat = true
	}
	if marked || !first {
		l.log.Info("broker owner changed; replaying what older owners applied lately", "owner_term", term)
		l.wakeReplay()
	}
}

// wakeReplay tells the session there is something to replay. mu is held.
func (l *ledger) wakeReplay() {
	select {
	case l.replayc <- struct{}{}:
	default: // already told
	}
}

// prune drops the kept reconciliations older than ReplayWindow, and the
// oldest beyond maxRecent. mu is held.
func (l *ledger) prune(now time.Time) {
	drop := 0
	for drop < len(l.recent) && (now.Sub(l.recent[drop].at) > l.window || l.recentN > maxRecent) {
		l.recentN -= len(l.recent[drop].reconciles)
		drop++
	}
	if drop > 0 {
		l.recent = slices.Delete(l.recent, 0, drop)
	}
}

// newStream starts a stream's view of the owner's term afresh: what its
// decider announces, or names in its acks, is what counts.
func (l *ledger) newStream() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.term = 0
	l.beat = false
}

// takeReplays returns the kept batches marked for a replay, within the
// window, and whether the held reservations are to be declared again; a
// replay that could not be sent is marked again (untake).
func (l *ledger) takeReplays() ([]*ackedReconciles, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prune(time.Now())
	var out []*ackedReconciles
	for _, e := range l.recent {
		if e.replay {
			out = append(out, e)
			e.replay = false
		}
	}
	beat := l.beat
	l.beat = false
	return out, beat
}

// untake marks batches taken for a replay again, for the next stream: the
// stream broke before they were sent.
func (l *ledger) untake(taken []*ackedReconciles) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range taken {
		e.replay = true // one pruned meanwhile is gone anyway
	}
}

// stale returns the reconcile batches sent before cutoff and not
// acknowledged, marking them sent now.
func (l *ledger) stale(cutoff, now time.Time) []*switchboardv1.ReconcileBatch {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*switchboardv1.ReconcileBatch
	for seq, b := range l.runacked {
		if b.at.Before(cutoff) {
			b.at = now
			out = append(out, &switchboardv1.ReconcileBatch{Reconciles: b.reconciles, Sequence: seq})
		}
	}
	slices.SortFunc(out, func(a, b *switchboardv1.ReconcileBatch) int { return cmp.Compare(a.GetSequence(), b.GetSequence()) })
	return out
}

// unackedActivity returns how many activity batches wait for their ack.
func (l *ledger) unackedActivity() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.unacked)
}
