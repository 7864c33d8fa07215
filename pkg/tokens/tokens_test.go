package tokens

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestText(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int64
	}{
		{"empty", "", 0},
		{"one byte", "a", 1},
		{"four bytes", "abcd", 1},
		{"five bytes", "abcde", 2},
		{"multibyte counts bytes", "héllo", 2}, // 6 bytes
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { require.Equal(t, tt.want, Text(tt.in)) })
	}
}

func TestPrompt(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hello"}}
	// 3 + (4 + 2 + 2) + (4 + 1 + 2)
	require.Equal(t, int64(18), Prompt(msgs))
	require.Equal(t, int64(PromptOverhead), Prompt(nil))
}

func TestBucketOf(t *testing.T) {
	tests := []struct {
		n    int64
		want Bucket
		str  string
	}{
		{0, BucketUnder8K, "<8k"},
		{8*K - 1, BucketUnder8K, "<8k"},
		{8 * K, Bucket8KTo32K, "8k-32k"},
		{32*K - 1, Bucket8KTo32K, "8k-32k"},
		{32 * K, Bucket32KTo128K, "32k-128k"},
		{128 * K, BucketOver128K, ">128k"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, BucketOf(tt.n), "n=%d", tt.n)
		require.Equal(t, tt.str, tt.want.String())
	}
}

func TestAimAtBucket(t *testing.T) {
	// Tests elsewhere build prompts of a target size this way.
	content := strings.Repeat("word", 40*K)
	require.Equal(t, Bucket32KTo128K, BucketOf(Prompt([]Message{{Role: "user", Content: content}})))
}
