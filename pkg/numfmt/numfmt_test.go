package numfmt

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNumber(t *testing.T) {
	tests := []struct {
		name string
		v    float64
		want string
	}{
		{name: "zero", v: 0, want: "0"},
		{name: "under a thousand", v: 999, want: "999"},
		{name: "a thousand", v: 1000, want: "1,000"},
		{name: "a million, which %g writes 1e+06", v: 1e6, want: "1,000,000"},
		{name: "remaining", v: 43862, want: "43,862"},
		{name: "negative", v: -1234567, want: "-1,234,567"},
		{name: "fraction", v: 0.25, want: "0.25"},
		{name: "fraction with thousands", v: 1234.5, want: "1,234.5"},
		{name: "per-token price, which %g writes 3e-06", v: 3e-06, want: "0.000003"},
		{name: "large", v: 1e21, want: "1,000,000,000,000,000,000,000"},
		{name: "NaN", v: math.NaN(), want: "NaN"},
		{name: "infinity", v: math.Inf(1), want: "+Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Number(tt.v))
		})
	}
	require.Equal(t, "1,000,000", Int(1_000_000))
}
