package grant

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboard-ai/switchboard/pkg/billing"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

func ptr(f float64) *float64 { return &f }

func TestNewCaps(t *testing.T) {
	small := Endpoint{ContextLength: 100_000, MaxOutputTokens: 4096, Price: pricing.Price{Input: 1, CachedInput: 0.5, Output: 2}}
	// Its cached input dearer than its uncached: the bound takes the dearer.
	large := Endpoint{ContextLength: 200_000, Price: pricing.Price{Input: 3, CachedInput: 4, Output: 10}}
	unknown := Endpoint{MaxOutputTokens: 8192, Price: pricing.Price{Input: 1, Output: 1}}
	tests := []struct {
		name      string
		eps       []Endpoint
		maxPrice  billing.MaxPrice
		maxTokens int64
		input     int64
		want      *switchboardv1.DecisionCaps
	}{
		{
			name: "one endpoint", eps: []Endpoint{small}, input: 1000,
			// 100k in at $1/M, 4096 out at $2/M.
			want: &switchboardv1.DecisionCaps{MaxInputTokens: 100_000, MaxOutputTokens: 4096, MaxCostUsd: 0.108192, MaxAttemptsCostUsd: 0.108192},
		},
		{
			name: "the largest window and output, the dearest bill, every call", eps: []Endpoint{small, large}, input: 1000,
			// large: 200k in at $4/M, 200k out (no max output: its window) at $10/M = 2.8.
			want: &switchboardv1.DecisionCaps{MaxInputTokens: 200_000, MaxOutputTokens: 200_000, MaxCostUsd: 2.8, MaxAttemptsCostUsd: 2.908192},
		},
		{
			name: "max_tokens and max_price bound the client's bill, not the providers'", eps: []Endpoint{small, large},
			maxPrice: billing.MaxPrice{Completion: ptr(5)}, maxTokens: 100, input: 1000,
			// large billed: 200k in at $4/M, 100 out at $5/M.
			want: &switchboardv1.DecisionCaps{MaxInputTokens: 200_000, MaxOutputTokens: 200_000, MaxCostUsd: 0.8005, MaxAttemptsCostUsd: 2.908192},
		},
		{
			name: "an unknown window, and a prompt estimated beyond it", eps: []Endpoint{unknown}, input: 3_000_000,
			want: &switchboardv1.DecisionCaps{MaxInputTokens: 3_000_000, MaxOutputTokens: 8192, MaxCostUsd: 3.008192, MaxAttemptsCostUsd: 3.008192},
		},
		{
			name: "an unknown window", eps: []Endpoint{{Price: pricing.Price{Input: 1, Output: 1}}}, input: 10,
			want: &switchboardv1.DecisionCaps{MaxInputTokens: UnknownContextTokens, MaxOutputTokens: UnknownContextTokens,
				MaxCostUsd: 2 * UnknownContextTokens / 1e6, MaxAttemptsCostUsd: 2 * UnknownContextTokens / 1e6},
		},
		{
			name: "a max output beyond the window is the window", eps: []Endpoint{{ContextLength: 1000, MaxOutputTokens: 5000}},
			want: &switchboardv1.DecisionCaps{MaxInputTokens: 1000, MaxOutputTokens: 1000},
		},
		{name: "no endpoint", want: &switchboardv1.DecisionCaps{}},
		{
			name: "bounded as the boundary bounds a record", eps: []Endpoint{{ContextLength: 1 << 40, Price: pricing.Price{Input: 1e6, Output: 1e6}}},
			want: &switchboardv1.DecisionCaps{MaxInputTokens: validate.MaxTokens, MaxOutputTokens: validate.MaxTokens, MaxCostUsd: validate.MaxUSD, MaxAttemptsCostUsd: validate.MaxUSD},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NewCaps(tt.eps, tt.maxPrice, tt.maxTokens, tt.input)
			require.Equal(t, tt.want.GetMaxInputTokens(), got.GetMaxInputTokens())
			require.Equal(t, tt.want.GetMaxOutputTokens(), got.GetMaxOutputTokens())
			require.InDelta(t, tt.want.GetMaxCostUsd(), got.GetMaxCostUsd(), 1e-9)
			require.InDelta(t, tt.want.GetMaxAttemptsCostUsd(), got.GetMaxAttemptsCostUsd(), 1e-9)
		})
	}
}

// TestCapsHoldEveryBillOfTheDecision: whatever usage a provider of the
// decision reports within its window and output, what the edge bills the
// client (billing.Charge under the request's caps) and what each call
// costs at list price are within the decision's caps.
func TestCapsHoldEveryBillOfTheDecision(t *testing.T) {
	eps := []Endpoint{
		{ContextLength: 100_000, MaxOutputTokens: 4096, Price: pricing.Price{Input: 1, CachedInput: 0.5, Output: 2}},
		{ContextLength: 200_000, Price: pricing.Price{Input: 3, CachedInput: 4, Output: 10}},
	}
	mp := billing.MaxPrice{Prompt: ptr(3.5)}
	caps := NewCaps(eps, mp, 500, 1000)
	for _, e := range eps {
		for _, u := range []pricing.Usage{
			{Input: e.window(), Output: e.output()}, {Input: e.window(), CachedInput: e.window(), Output: e.output()},
			{Input: 1000, CachedInput: 10, Output: 500}, {Input: e.window() / 2, CachedInput: e.window() / 3, Output: e.output()},
		} {
			bill, _ := billing.Charge(e.Price, u, billing.Caps{MaxPrice: mp, MaxOutputTokens: 500})
			list := billing.ListCost(e.Price, u)
			r := &switchboardv1.ActivityRecord{
				Usage:    &switchboardv1.Usage{InputTokens: u.Input, CachedInputTokens: u.CachedInput, OutputTokens: u.Output, CostUsd: bill},
				CostUsd:  bill,
				Attempts: []*switchboardv1.Attempt{{CostUsd: list}},
			}
			require.NoError(t, Within(r, caps), "%+v on %+v", u, e)
		}
	}
}

func TestWithin(t *testing.T) {
	caps := &switchboardv1.DecisionCaps{MaxInputTokens: 1000, MaxOutputTokens: 100, MaxCostUsd: 0.01, MaxAttemptsCostUsd: 0.03}
	ok := func() *switchboardv1.ActivityRecord {
		return &switchboardv1.ActivityRecord{
			Usage:   &switchboardv1.Usage{InputTokens: 1000, OutputTokens: 100, CostUsd: 0.01},
			CostUsd: 0.01,
			Hedge:   &switchboardv1.HedgeInfo{Used: true, LoserCostUsd: 0.02},
			// Three attempts adding up to the cap, each rounded.
			Attempts: []*switchboardv1.Attempt{{CostUsd: 0.01}, {CostUsd: 0.02}, {CostUsd: 0}},
		}
	}
	tests := []struct {
		name   string
		change func(*switchboardv1.ActivityRecord)
		caps   *switchboardv1.DecisionCaps
		want   string // "" within the caps
	}{
		{name: "at every cap", change: func(*switchboardv1.ActivityRecord) {}},
		{name: "nothing consumed, no caps", change: func(r *switchboardv1.ActivityRecord) {
			r.Usage, r.CostUsd, r.Hedge, r.Attempts = &switchboardv1.Usage{}, 0, nil, nil
		}, caps: &switchboardv1.DecisionCaps{}},
		{name: "input", change: func(r *switchboardv1.ActivityRecord) { r.Usage.InputTokens++ }, want: "usage.input_tokens"},
		{name: "output", change: func(r *switchboardv1.ActivityRecord) { r.Usage.OutputTokens = 1_000_000_000 }, want: "usage.output_tokens"},
		{name: "bill", change: func(r *switchboardv1.ActivityRecord) { r.CostUsd = 999 }, want: "cost_usd"},
		{name: "bill NaN", change: func(r *switchboardv1.ActivityRecord) { r.CostUsd = math.NaN() }, want: "cost_usd"},
		{name: "usage cost", change: func(r *switchboardv1.ActivityRecord) { r.Usage.CostUsd = 0.0101 }, want: "usage.cost_usd"},
		{name: "lost leg", change: func(r *switchboardv1.ActivityRecord) { r.Hedge.LoserCostUsd = 0.04 }, want: "hedge.loser_cost_usd"},
		{name: "attempts together", change: func(r *switchboardv1.ActivityRecord) { r.Attempts[2].CostUsd = 0.001 }, want: "attempts' cost_usd"},
		{name: "no caps", change: func(*switchboardv1.ActivityRecord) {}, caps: &switchboardv1.DecisionCaps{}, want: "usage.input_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok()
			tt.change(r)
			c := caps
			if tt.caps != nil {
				c = tt.caps
			}
			err := Within(r, c)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
}
