package experiment

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTQuantile(t *testing.T) {
	tests := []struct {
		df, want float64
	}{
		{1, 12.706}, {4, 2.776}, {10, 2.228}, {30, 2.042},
		{4.5, (2.776 + 2.571) / 2},
		{40, 2.021}, {60, 2.000}, {120, 1.980}, {1e9, 1.960},
	}
	for _, tt := range tests {
		require.InDelta(t, tt.want, tQuantile975(tt.df), 0.0015, "df %g", tt.df)
	}
}

func TestMeanCI(t *testing.T) {
	e := meanCI([]float64{10, 12, 14, 16, 18})
	// mean 14, s = sqrt(10), t(4) = 2.776: half-width 2.776·sqrt(10/5).
	require.InDelta(t, 14, e.GetEstimate(), 1e-9)
	require.True(t, e.GetHasInterval())
	half := 2.776 * math.Sqrt(2)
	require.InDelta(t, 14-half, e.GetCiLow(), 1e-9)
	require.InDelta(t, 14+half, e.GetCiHigh(), 1e-9)
	require.Equal(t, int64(5), e.GetBlocks())
	require.False(t, meanCI([]float64{3}).GetHasInterval())
	require.Zero(t, meanCI(nil).GetBlocks())
}

func TestWelch(t *testing.T) {
	a := []float64{10, 12, 14, 16, 18}
	b := []float64{20, 22, 24, 26, 28}
	d := welch(a, b)
	// Equal variances and sizes: df = 8, se = sqrt(2+2) = 2.
	require.InDelta(t, 10, d.GetEstimate(), 1e-9)
	require.InDelta(t, 10-2.306*2, d.GetCiLow(), 1e-9)
	require.InDelta(t, 10+2.306*2, d.GetCiHigh(), 1e-9)
	require.False(t, welch(a, []float64{1}).GetHasInterval())
	c := welch([]float64{1, 1}, []float64{2, 2})
	require.True(t, c.GetHasInterval(), "no spread: a zero-width interval")
	require.InDelta(t, 1, c.GetCiLow(), 1e-12)
}
