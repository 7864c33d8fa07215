package provheaders

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		headers map[string]string
		want    Headers
		wantErr bool
	}{
		{name: "none", want: Headers{}},
		{name: "openai families, any case",
			headers: map[string]string{"X-RateLimit-Limit-Requests": "60", "x-ratelimit-remaining-tokens": " 1500 ", "x-ratelimit-reset-requests": "1s"},
			want: Headers{Requests: LimitInfo{Limit: 60, HasLimit: true, Reset: now.Add(time.Second)},
				Tokens: LimitInfo{Remaining: 1500, HasRemaining: true}}},
		{name: "anthropic family", headers: map[string]string{"anthropic-ratelimit-output-tokens-remaining": "12"},
			want: Headers{OutputTokens: LimitInfo{Remaining: 12, HasRemaining: true}}},
		{name: "retry-after-ms wins over retry-after", headers: map[string]string{"retry-after": "90", "retry-after-ms": "1500"},
			want: Headers{RetryAfter: now.Add(1500 * time.Millisecond)}},
		{name: "a malformed header is skipped and reported", headers: map[string]string{"x-ratelimit-limit-requests": "-1", "x-ratelimit-limit-tokens": "10"},
			want: Headers{Tokens: LimitInfo{Limit: 10, HasLimit: true}}, wantErr: true},
		{name: "beyond MaxValue is malformed", headers: map[string]string{"x-ratelimit-limit-requests": "1e16"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(maps.All(tt.headers), now)
			if tt.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.want, got)
			for _, li := range []LimitInfo{got.Requests, got.Tokens, got.InputTokens, got.OutputTokens} {
				require.Equal(t, li == LimitInfo{}, li.Empty())
			}
		})
	}
}
