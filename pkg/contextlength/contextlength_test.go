package contextlength

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMessages(t *testing.T) {
	prompt := Exceeded{Limit: 4096, PromptTokens: 8200, OutputTokens: 16}
	require.Equal(t, "This model's maximum context length is 4096 tokens. However, your messages resulted in 8200 tokens. "+
		"Please reduce the length of the messages.", prompt.OpenAIMessage())
	require.Equal(t, "prompt is too long: 8200 tokens > 4096 maximum", prompt.AnthropicMessage())

	both := Exceeded{Limit: 4096, PromptTokens: 4000, OutputTokens: 200}
	require.Equal(t, "This model's maximum context length is 4096 tokens. However, you requested 4200 tokens "+
		"(4000 in the messages, 200 in the completion). Please reduce the length of the messages or completion.", both.OpenAIMessage())
	require.Equal(t, "input length and `max_tokens` exceed context limit: 4000 + 200 > 4096, "+
		"decrease input length or `max_tokens` and try again", both.AnthropicMessage())
}

func TestDetailRoundTrip(t *testing.T) {
	want := Exceeded{Limit: 128000, PromptTokens: 130000, OutputTokens: 0}
	st, err := status.New(codes.InvalidArgument, "too long").WithDetails(want.Detail())
	require.NoError(t, err)
	got, ok := FromStatus(st)
	require.True(t, ok)
	require.Equal(t, want, got)

	_, ok = FromStatus(status.New(codes.InvalidArgument, "no details"))
	require.False(t, ok)

	for _, md := range []map[string]string{
		{KeyLimit: "x", KeyPromptTokens: "1", KeyOutputTokens: "0"},
		{KeyLimit: "0", KeyPromptTokens: "1", KeyOutputTokens: "0"},
		{KeyLimit: "10", KeyPromptTokens: "-1", KeyOutputTokens: "0"},
		{KeyLimit: "10", KeyPromptTokens: "11"},
	} {
		st, err := status.New(codes.InvalidArgument, "bad").WithDetails(&errdetails.ErrorInfo{Domain: ErrorDomain, Reason: Reason, Metadata: md})
		require.NoError(t, err)
		_, ok := FromStatus(st)
		require.False(t, ok, "%v", md)
	}
	other, err := status.New(codes.InvalidArgument, "other").WithDetails(&errdetails.ErrorInfo{Domain: "elsewhere", Reason: Reason,
		Metadata: map[string]string{KeyLimit: "10", KeyPromptTokens: "11", KeyOutputTokens: "0"}})
	require.NoError(t, err)
	_, ok = FromStatus(other)
	require.False(t, ok, "another domain's detail")
}
