package metrics

import (
	"testing"

	"github.com/switchboard-ai/switchboard/pkg/telemetry"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/broker"
)

// benchAdmission is nil (metrics off: what the server holds without a
// debug listener) or recording into the SDK as the decider sets it up.
func benchAdmission(b *testing.B, on bool) *Admission {
	if !on {
		return nil
	}
	tm, err := telemetry.NewMetrics("bench", "v0", true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tm.Shutdown(b.Context()) })
	m, err := New(Options{Provider: tm.MeterProvider(), KnownRoute: func(string) bool { return true }})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkReserved is what recording one reservation decision adds to a
// Reserve: an admission and a refusal, alternately.
func BenchmarkReserved(b *testing.B) {
	req := &switchboardv1.ReserveRequest{Identity: &switchboardv1.Identity{TenantId: "acme"}, EndpointId: "alpha/vendor/model", Attempt: 1}
	admitted := &switchboardv1.ReserveResponse{Admitted: true, Reservation: &switchboardv1.Reservation{}}
	refused := &switchboardv1.ReserveResponse{Refusal: &switchboardv1.Refusal{Reason: switchboardv1.RefusalReason_REFUSAL_REASON_RETRYABLE_CAPACITY,
		Scope: switchboardv1.LimitScope_LIMIT_SCOPE_MODEL_ROUTE, Unit: switchboardv1.LimitUnit_LIMIT_UNIT_REQUESTS}}
	for _, on := range []bool{false, true} {
		name := "metrics=off"
		if on {
			name = "metrics=on"
		}
		b.Run(name, func(b *testing.B) {
			m := benchAdmission(b, on)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				resp := admitted
				if i++; i%2 == 0 {
					resp = refused
				}
				m.Reserved(b.Context(), req, resp, nil)
			}
		})
	}
}

// BenchmarkReconciled is what recording one successful reconciliation adds
// (the reservation's lookup is the broker's, measured there).
func BenchmarkReconciled(b *testing.B) {
	req := &switchboardv1.ReconcileRequest{ReservationId: "r", Outcome: switchboardv1.Outcome_OUTCOME_OK,
		Usage: &switchboardv1.Usage{InputTokens: 900, OutputTokens: 150, Reported: true}}
	info := broker.ReservationInfo{Tenant: "acme", EndpointID: "alpha/vendor/model",
		Estimate: broker.Demand{InputTokens: 1000, OutputTokens: 200}, Demand: broker.Demand{InputTokens: 1000, OutputTokens: 200}}
	for _, on := range []bool{false, true} {
		name := "metrics=off"
		if on {
			name = "metrics=on"
		}
		b.Run(name, func(b *testing.B) {
			m := benchAdmission(b, on)
			b.ReportAllocs()
			for b.Loop() {
				m.Reconciled(b.Context(), req, info, true, nil)
			}
		})
	}
}
