package upstream

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
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

// TestRateLimitHeaders: the x-ratelimit-* headers and Retry-After, whatever
// their case, lowercased and sorted, every value kept; no other header.
func TestRateLimitHeaders(t *testing.T) {
	h := http.Header{
		"Retry-After":                    {"3"},
		"X-Ratelimit-Remaining-Requests": {"99", "98"},
		"x-ratelimit-limit-tokens":       {"1000"},
		"X-RATELIMIT-RESET":              {"1s"},
		"X-Ratelimit":                    {"not one"},
		"X-Switchboard-Ratelimit-Scope":  {"tenant"},
		"Content-Type":                   {"text/event-stream"},
		"Retry-After-Ms":                 {"10"},
	}
	var got []string
	for _, kv := range rateLimitHeaders(h) {
		got = append(got, kv.GetName()+"="+kv.GetValue())
	}
	require.Equal(t, []string{"retry-after=3", "x-ratelimit-limit-tokens=1000", "x-ratelimit-remaining-requests=99",
		"x-ratelimit-remaining-requests=98", "x-ratelimit-reset=1s"}, got)
}

// TestAnswerHeaders: the answer's headers are set as Set sets them, one
// value each, replacing any there.
func TestAnswerHeaders(t *testing.T) {
	ep := &switchboardv1.Endpoint{Provider: "alpha"}
	for _, stream := range []bool{true, false} {
		w := httptest.NewRecorder()
		w.Header().Set("Content-Type", "text/plain")
		setAnswerHeaders(w, ep, stream)
		want := http.Header{"Content-Type": {"application/json"}, "X-Switchboard-Provider": {"alpha"}}
		if stream {
			want = http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-cache"},
				"X-Accel-Buffering": {"no"}, "X-Switchboard-Provider": {"alpha"}}
		}
		require.Equal(t, want, w.Result().Header, "stream %v", stream)
		w.Header().Add("Content-Type", "text/plain")
		require.Equal(t, []string{want.Get("Content-Type"), "text/plain"}, w.Header().Values("Content-Type"))
		require.Equal(t, "alpha", w.Header().Get("X-Switchboard-Provider"), "an Add does not reach the other values")
		if stream {
			require.Equal(t, "no-cache", w.Header().Get("Cache-Control"), "an Add does not reach the other values")
		}
	}
}
