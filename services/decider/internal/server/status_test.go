package server

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/contextlength"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
	"github.com/switchboard-ai/switchboard/services/decider/internal/validate"
)

// An INVALID_ARGUMENT names the field at fault in a google.rpc.BadRequest,
// so the edge can answer its client naming the client's field.
func TestInvalidArgumentNamesTheField(t *testing.T) {
	violation := func(err error) *errdetails.BadRequest_FieldViolation {
		t.Helper()
		st := status.Convert(err)
		require.Equal(t, codes.InvalidArgument, st.Code())
		for _, d := range st.Details() {
			if v, ok := d.(*errdetails.BadRequest); ok {
				require.Len(t, v.GetFieldViolations(), 1)
				return v.GetFieldViolations()[0]
			}
		}
		return nil
	}
	v := violation(toStatus(&routing.Error{Kind: routing.KindInvalid, Msg: "too long", Field: "tokens.input_tokens", Reason: "CONTEXT_LENGTH_EXCEEDED"}))
	require.NotNil(t, v)
	require.Equal(t, "tokens.input_tokens", v.GetField())
	require.Equal(t, "CONTEXT_LENGTH_EXCEEDED", v.GetReason())
	require.Equal(t, "too long", v.GetDescription())

	v = violation(invalid(&validate.Error{Field: "tokens.cached_input_tokens", Reason: "must not exceed input_tokens"}))
	require.NotNil(t, v)
	require.Equal(t, "tokens.cached_input_tokens", v.GetField())
	require.Equal(t, "INVALID_VALUE", v.GetReason())

	require.Nil(t, violation(toStatus(&routing.Error{Kind: routing.KindInvalid, Msg: "model is required"})), "no field, no details")

	// A prompt too long for every context carries its figures too.
	tooLong := contextlength.Exceeded{Limit: 4096, PromptTokens: 5000, OutputTokens: 16}
	err := toStatus(&routing.Error{Kind: routing.KindInvalid, Msg: tooLong.OpenAIMessage(), Field: "tokens.input_tokens",
		Reason: contextlength.Reason, Context: &tooLong})
	v = violation(err)
	require.NotNil(t, v)
	require.Equal(t, "tokens.input_tokens", v.GetField())
	got, ok := contextlength.FromStatus(status.Convert(err))
	require.True(t, ok)
	require.Equal(t, tooLong, got)
	require.Equal(t, tooLong.OpenAIMessage(), status.Convert(err).Message())
}
