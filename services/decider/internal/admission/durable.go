package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/readiness"
	"github.com/switchboard-ai/switchboard/services/decider/internal/hedge"
)

// DefaultMaxWriteBytes is the default of Options.MaxWriteBytes: etcd's
// default request limit (--max-request-bytes, 1.5 MiB) less 16 KiB for the
// transaction's keys, compare and framing. The broker's state (at most
// broker.DefaultMaxStateBytes, 1 MiB) and the hedge budget's (at most
// hedge.MaxStateBytes, 256 KiB) fit within it by construction.
const DefaultMaxWriteBytes = 3<<19 - 16<<10

// WriteBytesFor is MaxWriteBytes for a broker state of stateBytes: that,
// the hedge budget's state and 240 KiB for the rest of the transaction
// (DefaultMaxWriteBytes for the broker's default 1 MiB).
func WriteBytesFor(stateBytes int) int {
	return stateBytes + hedge.MaxStateBytes + 240<<10
}

// Snapshot health: the owner's admission is reported unhealthy (Healthy)
// after this many failed writes in a row, or once the last durable snapshot
// is older than FailingAfter.
const (
	FailingWrites = 3
	FailingAfter  = 5 * time.Second
)

// writeTimeout bounds one snapshot write, so a frozen etcd is noticed and
// the write tried again rather than waited for.
const writeTimeout = time.Second

// failRetry is how soon a failed snapshot write is tried again (at most
// Options.Every): the owner admits nothing until one succeeds.
const failRetry = 200 * time.Millisecond

// logEvery rate-limits the error log of failing snapshot writes.
const logEvery = 10 * time.Second

// SnapshotStats is what the owner knows of its snapshots, for metrics.
type SnapshotStats struct {
	// Owner is whether this replica owns the state; the rest is
	// meaningful only when it does.
	Owner bool
	// Failures counts failed snapshot writes since Start (refused as too
	// large, or failed in etcd).
	Failures int64
	// Slow counts the failures among them that ran out of their time
	// (writeTimeout: etcd slow or frozen) rather than being refused.
	Slow int64
	// Age is how old the state's last durable copy is: 0 while every
	// change is saved.
	Age time.Duration
}

// Snapshots reports the snapshot figures.
func (a *Admission) Snapshots() SnapshotStats {
	return SnapshotStats{Owner: a.owner.Load(), Failures: a.failures.Load(), Slow: a.slow.Load(), Age: a.age()}
}

// age is how long since the state held in memory was last known durable.
// Snapshot health runs on the wall clock, as the snapshot ticker does, not
// on Options.Now (the broker's clock, which tests stop).
func (a *Admission) age() time.Duration {
	if a.failing.Load() == 0 {
		return 0
	}
	return time.Since(time.Unix(0, a.durableAt.Load()))
}

// saved records the outcome of a snapshot write: the broker admits only
// while its state is durable, and failures are logged at most every
// logEvery with how many there were.
func (a *Admission) saved(err error) {
	if err == nil {
		if n := a.failing.Swap(0); n > 0 {
			a.o.Logger.Info("broker snapshot saved again", "failed_writes", n)
		}
		a.durableAt.Store(time.Now().UnixNano())
		a.o.Broker.SetDurable(true)
		return
	}
	a.o.Broker.SetDurable(false)
	a.failures.Add(1)
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		a.slow.Add(1)
	}
	n := a.failing.Add(1)
	now := time.Now()
	if last := a.loggedAt.Load(); n == 1 || now.Sub(time.Unix(0, last)) >= logEvery {
		a.loggedAt.Store(now.UnixNano())
		a.o.Logger.Error("broker snapshot not saved; admitting nothing until it is", "err", err,
			"failed_writes", n, "durable_age", a.age().Round(time.Millisecond))
	}
}

// Healthy says whether this replica can admit now: nil, or why not. The
// owner cannot while its snapshots fail (FailingWrites in a row, or none
// durable for FailingAfter); any replica cannot while no owner is known
// for longer than the election session's TTL.
func (a *Admission) Healthy() error {
	if a.owner.Load() {
		n := a.failing.Load()
		if age := a.age(); n >= FailingWrites || age > FailingAfter {
			return fmt.Errorf("broker snapshots failing: %d writes in a row, last durable %s ago", n, age.Round(time.Millisecond))
		}
		return nil
	}
	leader, _ := a.state()
	if leader != "" && leader != a.o.Addr {
		return nil
	}
	since := time.Unix(0, a.leaderSince.Load())
	if d := time.Since(since); d > time.Duration(a.o.LeaseTTL)*time.Second {
		return fmt.Errorf("no broker owner known for %s", d.Round(time.Millisecond))
	}
	return nil
}

// CheckOwner is nil when this replica owns the state, knows no other owner
// (Healthy answers for that), or the owner says it admits; else why not.
// A non-owner forwards every reservation, so it can admit only what the
// owner can: an owner whose snapshots fail refuses everything, and the
// replicas forwarding to it must not look ready meanwhile. The owner not
// answering its health counts only once it lasted longer than the session
// TTL, the time a crashed owner's successor needs to be elected.
func (a *Admission) CheckOwner(ctx context.Context, timeout time.Duration) error {
	leader, _ := a.state()
	if a.owner.Load() || leader == "" || leader == a.o.Addr {
		a.ownerSilentSince.Store(0)
		return nil
	}
	conn, err := a.conn(leader)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		var resp *healthpb.HealthCheckResponse
		resp, err = healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: readiness.AdmissionService})
		cancel()
		if err == nil {
			a.ownerSilentSince.Store(0)
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("the broker owner %s cannot admit (its admission health is %s)", leader, resp.GetStatus())
			}
			return nil
		}
	}
	now := time.Now()
	a.ownerSilentSince.CompareAndSwap(0, now.UnixNano())
	if d := now.Sub(time.Unix(0, a.ownerSilentSince.Load())); d > time.Duration(a.o.LeaseTTL)*time.Second {
		return fmt.Errorf("the broker owner %s has not answered its health for %s: %w", leader, d.Round(time.Millisecond), err)
	}
	return nil
}
