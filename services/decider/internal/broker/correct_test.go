package broker

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCorrectionStep(t *testing.T) {
	o := CorrectionOptions{}
	o.defaults()
	tests := []struct {
		name string
		f, r float64
		want float64
	}{
		{name: "a huge ratio moves at most 5%", f: 1, r: 100, want: 1.05},
		{name: "a zero ratio moves at most 5%", f: 1, r: 0, want: 0.95},
		{name: "a close ratio moves by alpha", f: 1, r: 0.9, want: 0.99},
		{name: "never above the upper bound", f: 2, r: 100, want: 2},
		{name: "never below the lower bound", f: 0.5, r: 0, want: 0.5},
		{name: "NaN changes nothing", f: 1.2, r: math.NaN(), want: 1.2},
		{name: "+Inf is the upper bound's pull", f: 1, r: math.Inf(1), want: 1.05},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, o.step(tt.f, tt.r), 1e-12)
		})
	}
}

func TestCorrection(t *testing.T) {
	spec := []Spec{{Scope: ScopeTenant, Key: tenant, Unit: UnitOutputTokens, Window: WindowMinute, Capacity: 1e9}}
	tests := []struct {
		name    string
		usage   Usage
		outcome Outcome
		rounds  int
		in, out float64 // factors after the rounds
		trained bool
	}{
		{name: "one odd request cannot swing it", usage: Usage{InputTokens: 100000, OutputTokens: 0, CostUSD: 50, Reported: true},
			outcome: OutcomeOK, rounds: 1, in: 1.05, out: 0.95, trained: true},
		{name: "a steady ratio is learned within bounds", usage: Usage{InputTokens: 1000, OutputTokens: 300, CostUSD: 0.01, Reported: true},
			outcome: OutcomeOK, rounds: 200, in: 1, out: 0.5, trained: true},
		{name: "estimated usage does not train", usage: Usage{InputTokens: 5000, OutputTokens: 0},
			outcome: OutcomeOK, rounds: 10, in: 1, out: 1},
		{name: "a failed call does not train", usage: Usage{InputTokens: 5000, OutputTokens: 0, Reported: true},
			outcome: OutcomeDropped, rounds: 10, in: 1, out: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := newBroker(t, spec, func(o *Options) { o.DisableCorrection = false })
			for range tt.rounds {
				res, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 1000, OutputTokens: 1000, USD: 0.01}))
				require.NoError(t, err)
				_, err = b.Reconcile(t.Context(), ReconcileRequest{ReservationID: res.ID, Usage: tt.usage, Outcome: tt.outcome})
				require.NoError(t, err)
			}
			in, out, _, n := b.Factors(model, endpoint)
			require.InDelta(t, tt.in, in, 1e-6)
			require.InDelta(t, tt.out, out, 1e-6)
			require.Equal(t, tt.trained, n > 0)

			res, _, err := b.Reserve(t.Context(), req(Demand{InputTokens: 1000, OutputTokens: 1000}))
			require.NoError(t, err)
			require.Equal(t, Demand{InputTokens: 1000, OutputTokens: 1000, Requests: 1}, res.Estimate, "the caller's estimate is kept")
			require.InDelta(t, 1000*tt.out, float64(res.Demand.OutputTokens), 1, "the corrected demand is reserved")
			require.Equal(t, res.Demand.OutputTokens, int64(res.Charges[0].Amount))
			other := b.Correct(model, "beta/m1", Demand{OutputTokens: 1000})
			require.Equal(t, int64(1000), other.OutputTokens, "per route")
		})
	}
}
