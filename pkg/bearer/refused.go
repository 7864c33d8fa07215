package bearer

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain and ReasonCallerRefused mark, in a status's ErrorInfo detail,
// a server's refusal of the caller's own credentials or role — as opposed
// to a refusal of a client the caller acts for (an unknown API key). A
// proxy must not pass such a refusal on as the client's fault.
const (
	ErrorDomain         = "switchboard"
	ReasonCallerRefused = "CALLER_REFUSED"
)

// CallerError returns a status error with code and msg, marked as a refusal
// of the caller itself.
func CallerError(code codes.Code, msg string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonCallerRefused, Domain: ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// CallerRefused reports whether err is a server's refusal of the caller's
// own credentials or role (see CallerError).
func CallerRefused(err error) bool {
	if err == nil {
		return false
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false
	}
	for _, d := range se.GRPCStatus().Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == ErrorDomain && ei.GetReason() == ReasonCallerRefused {
			return true
		}
	}
	return false
}
