package app

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// benchCatalog gives every reservation seven scopes: api key, app, tenant,
// partner, provider workspace, provider project and model route.
const benchCatalog = `
models:
  - id: vendor/model
    endpoints:
      - provider: alpha
        base_url: http://127.0.0.1:1/v1
        price: {input: 0.2, output: 0.8}
        limits:
          - {unit: requests, per: minute, capacity: 1e12}
          - {unit: input_tokens, per: minute, capacity: 1e15, scope: provider_project}
          - {unit: output_tokens, per: minute, capacity: 1e15, scope: provider_workspace}
partners:
  - id: resell
    limits: [{unit: usd, per: day, capacity: 1e12}]
tenants:
  - id: acme
    partner: resell
    api_keys_sha256: [@KEY@]
    limits:
      - {unit: requests, per: minute, capacity: 1e12, scope: api_key}
      - {unit: requests, per: minute, capacity: 1e12, scope: app, scope_key: chat}
      - {unit: input_tokens, per: minute, capacity: 1e15}
      - {unit: concurrent_requests, capacity: 1e9}
`

// BenchmarkReserveReconcileGRPC measures Reserve+Reconcile pairs over real
// gRPC on loopback with 64 concurrent callers (b.SetParallelism(32) on 2
// CPUs), each pair charging and settling seven scopes: without a debug
// listener (metrics off, the default), and with one (every pair recorded
// in the admission metrics).
func BenchmarkReserveReconcileGRPC(b *testing.B) {
	b.Run("metrics=off", func(b *testing.B) { benchReserveReconcile(b, "") })
	b.Run("metrics=on", func(b *testing.B) { benchReserveReconcile(b, "127.0.0.1:0") })
}

func benchReserveReconcile(b *testing.B, debugListen string) {
	dir := b.TempDir()
	p := filepath.Join(dir, "catalog.yaml")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(benchCatalog, "@KEY@", catalog.HashKey(demoKey))+testCallers()), 0o600); err != nil {
		b.Fatal(err)
	}
	d, err := Start(b.Context(), Config{
		Listen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0", DataDir: dir, Catalog: p, ID: "bench",
		ShutdownTimeout: 5 * time.Second, Exploration: -1, DebugListen: debugListen,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	// One connection, multiplexed by every caller (more connections measured
	// no faster on 2 cores: they only add loopy writers competing for them).
	var clients []switchboardv1.DeciderClient
	for range 1 {
		conn, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer.Token(testEdgeToken)))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		clients = append(clients, switchboardv1.NewDeciderClient(conn))
	}
	var next atomic.Int64
	id := &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(demoKey), App: "chat", Environment: "prod"}
	var refused atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb_ *testing.PB) {
		c := clients[next.Add(1)%int64(len(clients))]
		for pb_.Next() {
			rr, err := c.Reserve(b.Context(), &switchboardv1.ReserveRequest{
				Identity: id, Model: "vendor/model", EndpointId: "alpha/vendor/model",
				Demand: &switchboardv1.Demand{InputTokens: 1000, OutputTokens: 200, Usd: 0.001, Requests: 1},
			})
			if err != nil {
				b.Error(err)
				return
			}
			if !rr.Admitted {
				refused.Add(1)
				continue
			}
			if len(rr.Reservation.Charges) < 7 {
				b.Errorf("charged %d buckets, want 7 scopes", len(rr.Reservation.Charges))
				return
			}
			if _, err := c.Reconcile(b.Context(), &switchboardv1.ReconcileRequest{
				ReservationId: rr.Reservation.ReservationId, Outcome: switchboardv1.Outcome_OUTCOME_OK,
				Usage: &switchboardv1.Usage{InputTokens: 900, OutputTokens: 150, Reported: true},
			}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
	if refused.Load() > 0 {
		b.Fatalf("%d refused: the benchmark's limits are meant to be out of reach", refused.Load())
	}
}
