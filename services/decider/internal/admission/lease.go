package admission

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

// Quota leases (Options.Leases): a replica that does not own the broker
// admits a request by itself when its leases of every bucket the request
// charges have enough left (broker.Holder), and forwards it to the owner
// otherwise. It renews its leases every half term, and at once when a call
// admitted on them failed in a way the owner must hear, in one
// ReplicaService.RenewLeases call; the owner answers it from its broker
// (broker.RenewLeases). Nothing of it is written to etcd: what a lease
// takes is in the bucket's level, saved with the snapshot.

// path is where an admission was decided, for the admissions metric.
type path int

// The paths.
const (
	pathOwner     path = iota // on this replica, the broker's owner
	pathLease                 // on this replica's leases
	pathForwarded             // on the owner, forwarded to it
	nPaths
)

// paths counts admitted reservations by path.
type paths [nPaths]atomic.Int64

// Admissions returns how many reservations were admitted since the start:
// by this replica as the owner (for its callers and those forwarded to it),
// on its leases, and forwarded by it to the owner.
func (a *Admission) Admissions() (owner, lease, forwarded int64) {
	return a.paths[pathOwner].Load(), a.paths[pathLease].Load(), a.paths[pathForwarded].Load()
}

func (a *Admission) count(resp *switchboardv1.ReserveResponse, p path) {
	if resp.GetAdmitted() {
		a.paths[p].Add(1)
	}
}

// Leases is this replica's lease holder, nil when leases are off.
func (a *Admission) Leases() *broker.Holder { return a.hold }

// kickLeases asks for a renewal now.
func (a *Admission) kickLeases() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// renewLeases renews this replica's leases every half term while another
// replica owns the broker, and stops using them while this one does.
func (a *Admission) renewLeases(ctx context.Context) {
	every := a.o.Broker.LeaseTerm() / 2
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-a.kick:
		}
		if a.owner.Load() {
			a.hold.Stop()
			continue
		}
		leader, _ := a.state()
		if leader == "" || leader == a.o.Addr {
			continue
		}
		a.renewOnce(ctx, leader, every)
	}
}

// renewOnce sends one renewal to the owner at leader.
func (a *Admission) renewOnce(ctx context.Context, leader string, timeout time.Duration) {
	asks, obs := a.hold.Renewal()
	if len(asks) == 0 && len(obs) == 0 {
		return
	}
	req := &switchboardv1.RenewLeasesRequest{Holder: a.o.Addr, Asks: make([]*switchboardv1.LeaseAsk, len(asks))}
	for i, x := range asks {
		req.Asks[i] = &switchboardv1.LeaseAsk{BucketId: x.BucketID, Returned: x.Returned, Demand: x.Demand}
	}
	for _, o := range obs {
		req.Observations = append(req.Observations, &switchboardv1.LeaseObservation{
			EndpointId: o.Endpoint, Model: o.Model, TenantId: o.Tenant, Reconcile: observedProto(o.Req), Scoped: o.Req.Scoped,
		})
	}
	sent := time.Now()
	c, err := a.client(leader)
	if err != nil {
		a.hold.Failed(obs)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.c.RenewLeases(rctx, req)
	if err != nil {
		// What the leases had left is consumed; the next renewal asks anew.
		a.hold.Failed(obs)
		a.o.Logger.Debug("lease renewal", "owner", leader, "err", err)
		return
	}
	grants := make([]broker.LeaseGrant, len(resp.GetGrants()))
	for i, g := range resp.GetGrants() {
		grants[i] = broker.LeaseGrant{BucketID: g.GetBucketId(), Amount: g.GetAmount()}
	}
	// The term is counted from before the call on this replica's own
	// clock: it ends here before it ends on the owner.
	a.hold.Granted(a.o.Now().Add(-time.Since(sent)), resp.GetTerm().AsDuration(), grants, resp.GetCentralEndpoints(), resp.GetOwnerTerm())
}

// observedProto is what a reconciliation observed, as the owner reads it.
func observedProto(r broker.ReconcileRequest) *switchboardv1.ReconcileRequest {
	out := &switchboardv1.ReconcileRequest{
		Outcome: switchboardv1.Outcome(r.Outcome), Failure: switchboardv1.RefusalReason(r.Failure), ProviderErrorCode: r.ProviderErrorCode,
	}
	for _, h := range r.Headers {
		out.RateLimitHeaders = append(out.RateLimitHeaders, &switchboardv1.Header{Name: h.Name, Value: h.Value})
	}
	return out
}

// RenewLeases is the owner's answer to a replica's renewal: the
// observations folded into their routes, then the leases renewed.
func (a *Admission) RenewLeases(ctx context.Context, req *switchboardv1.RenewLeasesRequest) (*switchboardv1.RenewLeasesResponse, error) {
	// Within the admission gate, as every change to the owner's state: a
	// Handover waits for a renewal under way before its final snapshot, and
	// refuses one after, so no lease is granted that the snapshot misses.
	_, done, ok := a.admit(ctx)
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "this replica is handing the rate-limit broker over")
	}
	defer done()
	term := a.term.Load()
	if !a.owner.Load() || term == 0 {
		return nil, status.Error(codes.FailedPrecondition, "this replica does not own the rate-limit broker")
	}
	if err := checkRenewal(req); err != nil {
		return nil, err
	}
	b := a.o.Broker
	for _, o := range req.GetObservations() {
		rr := broker.ReconcileRequestFromProto(o.GetReconcile())
		rr.Usage, rr.ReservationID, rr.Scoped = broker.Usage{}, "", o.GetScoped()
		b.Observe(o.GetEndpointId(), o.GetModel(), o.GetTenantId(), rr)
	}
	asks := make([]broker.LeaseAsk, len(req.GetAsks()))
	for i, x := range req.GetAsks() {
		asks[i] = broker.LeaseAsk{BucketID: x.GetBucketId(), Returned: x.GetReturned(), Demand: x.GetDemand()}
	}
	grants := b.RenewLeases(req.GetHolder(), asks)
	out := &switchboardv1.RenewLeasesResponse{
		Term: durationpb.New(b.LeaseTerm()), CentralEndpoints: b.CentralRoutes(), OwnerTerm: term,
		Grants: make([]*switchboardv1.LeaseGrant, len(grants)),
	}
	for i, g := range grants {
		out.Grants[i] = &switchboardv1.LeaseGrant{BucketId: g.BucketID, Amount: g.Amount}
	}
	return out, nil
}

// reconcileLeased settles a reservation admitted on this replica's leases,
// and reports false for any other (the caller reconciles it on the owner).
// The answer names the term of the owner whose lease it was settled
// against as far as this replica knows.
func (a *Admission) reconcileLeased(ctx context.Context, req *switchboardv1.ReconcileRequest, allow broker.Allow) (*switchboardv1.ReconcileResponse, int64, bool, error) {
	if a.hold == nil {
		return nil, 0, false, nil
	}
	rr := broker.ReconcileRequestFromProto(req)
	rr.Allow = allow
	rr.Scoped = !auth.SharesProviderState(ctx)
	st, mine, observe, err := a.hold.Reconcile(rr)
	if !mine {
		return nil, 0, false, nil
	}
	if observe {
		a.kickLeases()
	}
	term, _ := a.OwnerTerm()
	if err != nil {
		return nil, term, true, toStatus(err)
	}
	resp := st.Proto()
	resp.OwnerTerm = term
	return resp, term, true, nil
}

// Bounds of one renewal: more buckets than a catalog of this size holds,
// more observations than a half term of failures.
const (
	maxLeaseAsks         = 100000
	maxLeaseObservations = 10000
)

// checkRenewal refuses a renewal the owner cannot apply as a whole.
func checkRenewal(req *switchboardv1.RenewLeasesRequest) error {
	switch {
	case req.GetHolder() == "":
		return status.Error(codes.InvalidArgument, "holder is required")
	case len(req.GetAsks()) > maxLeaseAsks, len(req.GetObservations()) > maxLeaseObservations:
		return status.Errorf(codes.InvalidArgument, "at most %d asks and %d observations", maxLeaseAsks, maxLeaseObservations)
	}
	for _, x := range req.GetAsks() {
		if math.IsNaN(x.GetReturned()) || math.IsInf(x.GetReturned(), 0) || !(x.GetDemand() >= 0) || math.IsInf(x.GetDemand(), 1) {
			return status.Errorf(codes.InvalidArgument, "lease of %q: returned and demand must be finite, demand not negative", x.GetBucketId())
		}
	}
	return nil
}
