package app

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/tokens"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// operatorClient is a client of d's OperatorService with the test
// catalog's operator token.
func operatorClient(t *testing.T, d *Decider) switchboardv1.OperatorServiceClient {
	t.Helper()
	return dialAs(t, d, testOperatorToken).OperatorServiceClient
}

// GetBroker answers from the broker's owner: asked of the other replica,
// it is forwarded there, and both answer the same open reservations,
// bucket levels and hedge budget.
func TestGetBrokerFromTheOwner(t *testing.T) {
	dir := t.TempDir()
	a, ca := startDecider(t, Config{Catalog: writeLimited(t, dir, "100"), DataDir: dir, HedgeBudgetUSD: 5, HedgeBudgetBurst: unpaced})
	defer a.Close()
	b, _ := startDecider(t, Config{Etcd: []string{a.EtcdEndpoint()}, DataDir: t.TempDir(), HedgeBudgetUSD: 5, HedgeBudgetBurst: unpaced})
	defer b.Close()
	require.True(t, a.adm.Owner())
	require.False(t, b.adm.Owner())

	decideReserve(t, ca, 0)
	decideReserve(t, ca, 1)
	granted, err := ca.AcquireHedge(t.Context(), &switchboardv1.AcquireHedgeRequest{RequestId: "h1", EstimatedCostUsd: 1.5})
	require.NoError(t, err)
	require.True(t, granted.GetGranted())

	for _, d := range []*Decider{a, b} {
		resp, err := operatorClient(t, d).GetBroker(t.Context(), &switchboardv1.GetBrokerRequest{})
		require.NoError(t, err)
		require.Equal(t, a.Addr(), resp.GetOwner(), "answered by the owner")
		require.Equal(t, int64(2), resp.GetOpenReservations())
		var tenant, route *switchboardv1.BrokerBucket
		for _, bk := range resp.GetBuckets() {
			switch {
			case bk.GetScope() == "tenant" && bk.GetKey() == "acme":
				tenant = bk
			case bk.GetScope() == "model_route" && strings.HasPrefix(bk.GetKey(), "alpha/"):
				route = bk
			}
		}
		require.NotNil(t, tenant, "the tenant's bucket: %v", resp.GetBuckets())
		require.Equal(t, "requests", tenant.GetUnit())
		require.Equal(t, "day", tenant.GetWindow())
		require.InDelta(t, 100, tenant.GetLimit(), 1e-9)
		require.InDelta(t, 98, tenant.GetAvailable(), 1e-9, "two requests reserved")
		require.NotNil(t, route, "alpha's route bucket: %v", resp.GetBuckets())
		require.InDelta(t, 0, route.GetAvailable(), 0.1, "both reserved on alpha, 2 a minute (refilling since)")
		require.Equal(t, resp.GetBuckets()[0], route, "the fullest bucket first")
		require.Equal(t, int64(len(resp.GetBuckets())), resp.GetTotalBuckets())
		require.InDelta(t, 5, resp.GetHedgeBudget().GetDailyUsd(), 1e-9)
		require.InDelta(t, 1.5, resp.GetHedgeBudget().GetSpentUsd(), 1e-9)
		require.InDelta(t, 3.5, resp.GetHedgeBudget().GetRemainingUsd(), 1e-9)
		require.Equal(t, int64(1), resp.GetHedgeBudget().GetGranted())
		require.True(t, resp.GetHedgeBudget().GetResetTime().AsTime().After(time.Now()))
	}

	one, err := operatorClient(t, b).GetBroker(t.Context(), &switchboardv1.GetBrokerRequest{MaxBuckets: 1})
	require.NoError(t, err)
	require.Len(t, one.GetBuckets(), 1, "bounded")
	require.Greater(t, one.GetTotalBuckets(), int64(1))
	_, err = operatorClient(t, a).GetBroker(t.Context(), &switchboardv1.GetBrokerRequest{MaxBuckets: -1})
	require.Equal(t, codes.InvalidArgument, status.Code(err))

	// Edges read nothing of it.
	_, err = dialAs(t, a, testEdgeToken).GetBroker(t.Context(), &switchboardv1.GetBrokerRequest{})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
}

// GetEndpointStats reads each endpoint's measured speed per size bucket,
// its price and cool-down, and the choice per bucket.
func TestGetEndpointStats(t *testing.T) {
	dir := t.TempDir()
	d, _ := startDecider(t, Config{Catalog: writeCatalog(t, dir, false), DataDir: dir})
	defer d.Close()
	op := operatorClient(t, d)

	now := time.Now()
	for range 12 {
		d.stats.ObserveTTFT("alpha/vendor/model", tokens.BucketUnder8K, 2500*time.Millisecond, now)
		d.stats.ObserveTTFT("beta/vendor/model", tokens.BucketUnder8K, 200*time.Millisecond, now)
		d.stats.ObserveThroughput("beta/vendor/model", 80, now)
	}
	var resp *switchboardv1.GetEndpointStatsResponse
	require.Eventually(t, func() bool {
		var err error
		resp, err = op.GetEndpointStats(t.Context(), &switchboardv1.GetEndpointStatsRequest{Model: "vendor/model"})
		require.NoError(t, err)
		return resp.GetModels()[0].GetEndpoints()[1].GetTtft()[0].GetSamples() == 12
	}, 10*time.Second, 10*time.Millisecond, "the samples are published")
	require.Equal(t, d.Addr(), resp.GetReplica())
	m := resp.GetModels()[0]
	require.Equal(t, "vendor/model", m.GetModel())
	alpha, beta := m.GetEndpoints()[0], m.GetEndpoints()[1]
	require.Equal(t, "alpha/vendor/model", alpha.GetEndpointId())
	require.InDelta(t, 0.2, alpha.GetPrice().GetInput(), 1e-12)
	require.InDelta(t, 0.8, alpha.GetPrice().GetOutput(), 1e-12)
	require.Len(t, beta.GetTtft(), tokens.NumBuckets, "every bucket listed")
	require.Equal(t, switchboardv1.SizeBucket_SIZE_BUCKET_UNDER_8K, beta.GetTtft()[0].GetBucket())
	require.Equal(t, 200*time.Millisecond, beta.GetTtft()[0].GetTypical().AsDuration())
	require.Nil(t, beta.GetTtft()[1].GetTypical(), "no samples, no figure")
	require.InDelta(t, 80, beta.GetThroughputTokensPerSecond(), 1e-9)
	require.Nil(t, alpha.ThroughputTokensPerSecond, "unknown, not 0")
	require.Nil(t, alpha.GetCooldownUntil())

	require.Len(t, m.GetChoices(), tokens.NumBuckets)
	require.Equal(t, "beta/vendor/model", m.GetChoices()[0].GetEndpointId(), "alpha too slow (over 1s, over twice beta): %v", m.GetChoices()[0])
	require.Equal(t, switchboardv1.RouteReason_ROUTE_REASON_CHEAPEST_QUALIFYING, m.GetChoices()[0].GetReason())
	require.NotEmpty(t, m.GetChoices()[0].GetSummary())

	// A benched endpoint shows its cool-down's end.
	until, _ := d.cool.RefusedFor("beta/vendor/model", time.Now(), time.Minute)
	resp, err := op.GetEndpointStats(t.Context(), &switchboardv1.GetEndpointStatsRequest{Model: "vendor/model", TenantId: "acme"})
	require.NoError(t, err)
	require.Equal(t, until.UnixNano(), resp.GetModels()[0].GetEndpoints()[1].GetCooldownUntil().AsTime().UnixNano())

	all, err := op.GetEndpointStats(t.Context(), &switchboardv1.GetEndpointStatsRequest{})
	require.NoError(t, err)
	require.Len(t, all.GetModels(), 1, "every model")
	_, err = op.GetEndpointStats(t.Context(), &switchboardv1.GetEndpointStatsRequest{Model: "nope"})
	require.Equal(t, codes.NotFound, status.Code(err))
	_, err = op.GetEndpointStats(t.Context(), &switchboardv1.GetEndpointStatsRequest{TenantId: "nobody"})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
}

// GetCatalog returns the catalog applied, its credential digests elided.
func TestGetCatalog(t *testing.T) {
	dir := t.TempDir()
	d, _ := startDecider(t, Config{Catalog: writeCatalog(t, dir, false), DataDir: dir})
	defer d.Close()
	resp, err := operatorClient(t, d).GetCatalog(t.Context(), &switchboardv1.GetCatalogRequest{})
	require.NoError(t, err)
	require.Positive(t, resp.GetRevision())
	require.Contains(t, resp.GetYaml(), "vendor/model")
	require.Contains(t, resp.GetYaml(), catalog.Elided)
	for _, secret := range []string{demoKey, testOperatorToken, testEdgeToken} {
		require.NotContains(t, resp.GetYaml(), catalog.HashKey(secret))
	}
	_, err = catalog.Parse([]byte(resp.GetYaml()))
	require.Error(t, err, "a digest elided is no digest: the shown catalog cannot be stored by mistake")
}
