package server_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/auth"
	"github.com/switchboard-ai/switchboard/services/decider/internal/grant"
	"github.com/switchboard-ai/switchboard/services/decider/internal/metrics"
	"github.com/switchboard-ai/switchboard/services/decider/internal/server"
)

// BenchmarkDecideReserveReconcile measures the decider's own work for one
// chat request, in process and without gRPC: the Decide an edge sends
// (reserving, with an idempotency key and a reservation TTL, as its caller
// of role edge) and the reconciliation of its reservation that the edge's
// Report stream brings back, applied as the report hub applies it, with
// admission metrics recorded as the decider records them. It leaves out the
// transport, the interceptors and the call report's statistics.
func BenchmarkDecideReserveReconcile(b *testing.B) {
	p := build(b, testCatalog)
	signer, err := grant.New(make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	p.Grants = signer
	if !p.adm.Owner() {
		b.Fatal("a lone replica owns the broker once Start returns")
	}
	tm, err := telemetry.NewMetrics("bench", "v0", true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tm.Shutdown(context.Background()) })
	m, err := metrics.New(metrics.Options{Provider: tm.MeterProvider(), Buckets: p.broker, Queues: p.broker, Reservations: p.broker, Owner: p.adm.Owner})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	p.Policy.Metrics = m
	srv := server.New(p.Deps)
	ctx := context.Background()

	ctx = auth.NewContext(ctx, &auth.Principal{ID: "edge", Role: catalog.RoleEdge})
	id := key(acmeKey)
	ttl := durationpb.New(5 * time.Minute)
	rsv := server.Reservations(p.Policy)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		reqID := "req-" + strconv.Itoa(i)
		d, err := srv.Decide(ctx, &switchboardv1.DecideRequest{
			RequestId: reqID, Identity: id, Model: model,
			Tokens:  &switchboardv1.TokenEstimate{InputTokens: 1200, MaxOutputTokens: 256},
			Stream:  true,
			Reserve: true, IdempotencyKey: reqID, ReservationTtl: ttl,
		})
		if err != nil {
			b.Fatal(err)
		}
		if d.GetReservation().GetReservationId() == "" {
			b.Fatalf("no reservation: %v", d.GetRefusal())
		}
		if _, err := rsv.Reconcile(ctx, &switchboardv1.ReconcileRequest{
			ReservationId: d.GetReservation().GetReservationId(),
			Usage:         &switchboardv1.Usage{InputTokens: 1200, OutputTokens: 200, CostUsd: 0.0004, Reported: true},
			Outcome:       switchboardv1.Outcome_OUTCOME_OK,
		}); err != nil {
			b.Fatal(err)
		}
	}
}
