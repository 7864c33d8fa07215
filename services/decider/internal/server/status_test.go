package server

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
}
