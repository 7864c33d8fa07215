package app

import (
	"context"
	"fmt"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/admission"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

// Addr returns the gRPC address.
func (d *Decider) Addr() string { return d.lis.Addr().String() }

// EtcdEndpoint returns the embedded etcd's client address, "" with an external etcd.
func (d *Decider) EtcdEndpoint() string {
	if d.embedded == nil {
		return ""
	}
	return d.embedded.Endpoint()
}

// ActivityRejected returns how many activity records were dropped because
// their grant did not match their request, tenant and key (or was missing).
func (d *Decider) ActivityRejected() int64 { return d.sink.Rejected() }

// ActivityOverCaps returns how many activity records were dropped because,
// with a valid grant, their tokens or costs exceeded the caps of the
// decision it names.
func (d *Decider) ActivityOverCaps() int64 { return d.sink.OverCaps() }

// ReportsInvalid returns how many call reports, reconciliations,
// reservation ids and activity records the Report stream dropped for
// failing their bounds (package validate).
func (d *Decider) ReportsInvalid() int64 { return d.hub.Invalid() }

// ReservationHeartbeats returns how many of the edges' reservation
// heartbeats were applied on the broker's owner.
func (d *Decider) ReservationHeartbeats() int64 { return d.hub.Heartbeats() }

// ReportsReceived returns how many call reports edges have sent.
func (d *Decider) ReportsReceived() int64 { return d.hub.Received() }

// HedgeBudget returns today's hedge spend and budget, and how many hedges
// were granted and refused.
func (d *Decider) HedgeBudget() (spent, daily float64, granted, refused int64) {
	return d.budget.Status()
}

// ProbeCost returns how many probes reported back and what they cost, USD.
func (d *Decider) ProbeCost() (int64, float64) { return d.observer.ProbeCost() }

// ReconcilesScoped returns how many reconciliations this replica's broker
// applied for their reservation's tenant only (a service the catalog does
// not trust for shared provider state): their pauses kept to that tenant,
// their headers' limits and usage not learned.
func (d *Decider) ReconcilesScoped() int64 { return d.broker.Scoped() }

// PausedRoutes counts the routes this replica's broker holds paused now (by
// a provider's answer or its headers), for every tenant and for one.
func (d *Decider) PausedRoutes() int { return len(d.broker.Pauses()) }

// ReportsImplausible returns how many call reports' timing was not believed
// (a first token faster than any provider reads the prompt, generation
// beyond 5,000 tokens/s, a call of more than an hour), so added no speed
// sample.
func (d *Decider) ReportsImplausible() int64 { return d.observer.Implausible() }

// LimitStatus is one of a tenant's own quota buckets as this replica's
// broker holds it (the owner's is the one that admits).
type LimitStatus struct {
	// Unit and Window name the bucket, as in the catalog ("usd", "day").
	Unit, Window string
	// Limit is its limit; Remaining what it can admit now.
	Limit, Remaining float64
}

// TenantLimits returns a tenant's own quota buckets, for operators and tests.
func (d *Decider) TenantLimits(tenantID string) []LimitStatus {
	var out []LimitStatus
	for _, b := range d.broker.Limits(broker.Identity{TenantID: tenantID}) {
		out = append(out, LimitStatus{Unit: b.Unit.String(), Window: b.Window.String(), Limit: b.Limit, Remaining: b.Remaining})
	}
	return out
}

// Edges returns the connected edges.
func (d *Decider) Edges() []*switchboardv1.EdgeHello { return d.hub.Edges() }

// BrokerSnapshotVersion returns how many times the rate-limit broker's state
// has been saved to etcd (the version of its snapshot key; 0 before the
// first). The owner saves about once a second, off the request path: a
// failover drill or a test that must know a grant is saved waits for two
// saves after the grant (the first may have been taken just before it)
// rather than for a guessed delay.
func (d *Decider) BrokerSnapshotVersion(ctx context.Context) (int64, error) {
	resp, err := d.store.Client().Get(ctx, admission.SnapshotKey)
	if err != nil {
		return 0, fmt.Errorf("read broker snapshot: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].Version, nil
}

// DebugAddr is the host:port of the debug listener, "" without one.
func (d *Decider) DebugAddr() string {
	if d.debug == nil {
		return ""
	}
	return d.debug.Addr()
}

// HealthAddr returns the address of the health-only listener, "" without one.
func (d *Decider) HealthAddr() string {
	if d.healthLis == nil {
		return ""
	}
	return d.healthLis.Addr().String()
}

// ObservationsShared returns how many batches of call reports this
// replica's edges sent that another replica took (one per replica).
func (d *Decider) ObservationsShared() int64 { return d.sharer.Shared() }

// ObservationsDropped returns how many batches of call reports another
// live replica never got from this one.
func (d *Decider) ObservationsDropped() int64 { return d.sharer.Dropped() }

// Admissions is how many reservations this replica admitted for its
// callers since it started, by where: as the broker's owner, on its quota
// leases, or forwarded to the owner.
func (d *Decider) Admissions() (owner, lease, forwarded int64) { return d.adm.Admissions() }

// OwnsBroker reports whether this replica owns the rate-limit broker now.
func (d *Decider) OwnsBroker() bool { return d.adm.Owner() }
