package admission

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

func (s *fwdServer) RenewLeases(ctx context.Context, req *switchboardv1.RenewLeasesRequest) (*switchboardv1.RenewLeasesResponse, error) {
	return s.adm.Load().RenewLeases(ctx, req)
}

// startLeasing starts a replica whose broker holds one large leasable
// provider bucket, with leases on or off; ownerNS adds up the time its
// gRPC server spends in the handlers of what other replicas call on it.
func startLeasing(t testing.TB, c *cluster, leases bool, ownerNS *atomic.Int64) *replica {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	timed := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		ownerNS.Add(int64(time.Since(start)))
		return resp, err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(timed))
	fs := &fwdServer{}
	switchboardv1.RegisterReplicaServiceServer(srv, fs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	b, err := broker.New(broker.Config{
		Buckets: []broker.Spec{{Scope: broker.ScopeProviderProject, Key: "alpha", Unit: broker.UnitRequests, Window: broker.WindowMinute, Capacity: 1e9}},
		Routes:  []broker.Route{{EndpointID: "alpha/m1", Model: "m1", Project: "alpha"}},
	}, broker.Options{DisableCorrection: true, LeaseTerm: 200 * time.Millisecond})
	require.NoError(t, err)
	r := &replica{broker: b, addr: lis.Addr().String()}
	r.adm, err = Start(t.Context(), Options{
		Broker: b, Client: c.client(t, nil), Addr: r.addr, Every: 50 * time.Millisecond, LeaseTTL: 5, Leases: leases,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	fs.adm.Store(r.adm)
	t.Cleanup(r.adm.Close)
	return r
}

// admitOnce reserves and reconciles one request through r.
func admitOnce(t testing.TB, r *replica) {
	resp, err := r.adm.Reserve(context.Background(), reserveReq())
	require.NoError(t, err)
	require.True(t, resp.GetAdmitted())
	_, err = r.adm.Reconcile(context.Background(), &switchboardv1.ReconcileRequest{
		ReservationId: resp.GetReservation().GetReservationId(), Outcome: switchboardv1.Outcome_OUTCOME_OK,
	}, nil)
	require.NoError(t, err)
}

// A replica with leases on forwards its first requests, then admits on the
// leases the owner granted it, over real gRPC; what it holds is taken from
// the owner's bucket.
func TestReplicaAdmitsOnItsLeases(t *testing.T) {
	c := newCluster(t)
	var ownerNS, otherNS atomic.Int64
	owner := startLeasing(t, c, true, &ownerNS)
	require.True(t, owner.adm.Owner())
	r := startLeasing(t, c, true, &otherNS)
	require.False(t, r.adm.Owner())
	_, err := r.adm.RenewLeases(t.Context(), &switchboardv1.RenewLeasesRequest{Holder: owner.addr})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "only the owner grants leases")
	admitOnce(t, r)
	_, lease, fwd := r.adm.Admissions()
	require.Equal(t, [2]int64{0, 1}, [2]int64{lease, fwd}, "no lease yet: forwarded")
	require.Eventually(t, func() bool { return len(r.adm.Leases().Held()) == 1 }, 10*time.Second, 10*time.Millisecond, "a lease is granted")
	require.NotEmpty(t, owner.broker.Leased())
	require.Eventually(t, func() bool {
		admitOnce(t, r)
		_, lease, _ = r.adm.Admissions()
		return lease > 0
	}, 10*time.Second, 10*time.Millisecond, "admitted on the lease")
	o, _, _ := owner.adm.Admissions()
	_, _, fwd = r.adm.Admissions()
	require.Equal(t, fwd, o, "the owner admitted what was forwarded to it, no more")
}

// BenchmarkOwnerWorkPerAdmission measures what the broker's owner spends,
// in its ReplicaService handlers (over real gRPC sockets), per request
// another replica admits and reconciles: every Reserve and Reconcile
// forwarded without leases, only the renewals with them. owner-ns/op is
// that time per admitted request; lease-share the part admitted on leases.
//
//	go test -run '^$' -bench BenchmarkOwnerWorkPerAdmission ./internal/admission/
func BenchmarkOwnerWorkPerAdmission(b *testing.B) {
	for _, leases := range []bool{false, true} {
		name := "forwarded"
		if leases {
			name = "leases"
		}
		b.Run(name, func(b *testing.B) { benchOwnerWork(b, leases) })
	}
}

func benchOwnerWork(b *testing.B, leases bool) {
	c := newCluster(b)
	var ownerNS, otherNS atomic.Int64
	owner := startLeasing(b, c, leases, &ownerNS)
	if !owner.adm.Owner() {
		b.Fatal("the first replica owns the broker")
	}
	r := startLeasing(b, c, leases, &otherNS)
	if leases {
		admitOnce(b, r)
		deadline := time.Now().Add(10 * time.Second)
		for len(r.adm.Leases().Held()) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	_, lease0, fwd0 := r.adm.Admissions()
	ownerNS.Store(0)
	b.ResetTimer()
	for b.Loop() {
		admitOnce(b, r)
	}
	b.StopTimer()
	_, lease, fwd := r.adm.Admissions()
	n := float64((lease - lease0) + (fwd - fwd0))
	b.ReportMetric(float64(ownerNS.Load())/n, "owner-ns/op")
	b.ReportMetric(float64(lease-lease0)/n, "lease-share")
}

// A renewal the owner cannot apply as a whole is refused, before anything
// changes: no holder, numbers that are not finite, a negative demand.
func TestRenewalChecked(t *testing.T) {
	ask := func(ret, demand float64) *switchboardv1.RenewLeasesRequest {
		return &switchboardv1.RenewLeasesRequest{Holder: "r1", Asks: []*switchboardv1.LeaseAsk{{BucketId: "b", Returned: ret, Demand: demand}}}
	}
	require.NoError(t, checkRenewal(ask(-3, 5)))
	for _, req := range []*switchboardv1.RenewLeasesRequest{
		{Asks: []*switchboardv1.LeaseAsk{{BucketId: "b"}}},
		ask(math.NaN(), 1), ask(math.Inf(-1), 1), ask(1, -1), ask(1, math.Inf(1)), ask(1, math.NaN()),
	} {
		require.Equal(t, codes.InvalidArgument, status.Code(checkRenewal(req)), "%v", req)
	}
}
