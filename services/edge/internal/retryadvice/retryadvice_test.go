package retryadvice

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSet(t *testing.T) {
	tests := []struct {
		name   string
		status int
		wait   time.Duration
		final  bool
		// want are the three headers: Retry-After, retry-after-ms and
		// x-should-retry, "" for absent.
		want [3]string
	}{
		{name: "rate limit for a moment", status: 429, wait: 1500 * time.Millisecond, want: [3]string{"2", "1500", "true"}},
		{name: "under a millisecond rounds up", status: 503, wait: time.Microsecond, want: [3]string{"1", "1", "true"}},
		{name: "overloaded", status: 529, wait: 3 * time.Second, want: [3]string{"3", "3000", "true"}},
		{name: "just under a minute", status: 429, wait: time.Minute - time.Millisecond, want: [3]string{"60", "59999", "true"}},
		{name: "a minute", status: 429, wait: time.Minute, want: [3]string{"60", "60000", "false"}},
		{name: "paused for minutes", status: 429, wait: 589 * time.Second, want: [3]string{"589", "589000", "false"}},
		{name: "a wait no duration holds", status: 429, wait: time.Duration(1<<63 - 1), want: [3]string{"9223372037", "9223372036855", "false"}},
		{name: "final with a wait", status: 429, wait: time.Second, final: true, want: [3]string{"1", "1000", "false"}},
		{name: "final without a wait", status: 502, final: true, want: [3]string{"", "", "false"}},
		{name: "5xx without a wait is left to the SDK", status: 500, want: [3]string{"", "", ""}},
		{name: "408 without a wait is left to the SDK", status: 408, want: [3]string{"", "", ""}},
		{name: "bad request", status: 400, want: [3]string{"", "", "false"}},
		{name: "not found", status: 404, want: [3]string{"", "", "false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			Set(h, tt.status, tt.wait, tt.final)
			require.Equal(t, tt.want, [3]string{h.Get(HeaderRetryAfter), h.Get(HeaderRetryAfterMs), h.Get(HeaderShouldRetry)})
		})
	}
}

func TestRetryable(t *testing.T) {
	for status, want := range map[int]bool{400: false, 401: false, 404: false, 408: true, 409: true, 413: false, 429: true, 500: true, 502: true, 503: true, 529: true} {
		require.Equal(t, want, Retryable(status), "%d", status)
	}
}
