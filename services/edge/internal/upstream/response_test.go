package upstream

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		in   string
		want time.Duration
	}{
		{name: "empty", in: "", want: 0},
		{name: "seconds", in: "7", want: 7 * time.Second},
		{name: "fraction", in: "0.5", want: 500 * time.Millisecond},
		{name: "date", in: now.Add(time.Minute).Format(http.TimeFormat), want: time.Minute},
		{name: "past date", in: now.Add(-time.Minute).Format(http.TimeFormat), want: 0},
		{name: "garbage", in: "soon", want: 0},
		{name: "negative", in: "-3", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, parseRetryAfter(tt.in, now))
		})
	}
}
