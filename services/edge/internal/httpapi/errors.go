package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/retryadvice"
)

// apiError is an error in OpenAI's format, the only one OpenAI SDKs know how
// to turn into their typed exceptions.
type apiError struct {
	status     int
	typ        string
	code       string
	param      string
	message    string
	retryAfter time.Duration
	// final says no retry can help, whatever retryAfter says (see
	// retryadvice.Set): a policy refuses the request, or every endpoint
	// tried failed it.
	final bool
	// header holds extra response headers (a refusal's rate-limit figures).
	header http.Header
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func writeError(w http.ResponseWriter, e apiError) {
	h := w.Header()
	for k, vs := range e.header {
		h[k] = vs
	}
	h.Set("Content-Type", "application/json")
	retryadvice.Set(h, e.status, e.retryAfter, e.final)
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(errorBody{Error: errorDetail{
		Message: e.message, Type: e.typ, Param: optional(e.param), Code: optional(e.code),
	}})
}

// deciderRetryIn is the Retry-After of an answer the routing service could
// not give (unavailable, or too slow): long enough for a reconnect or a new
// leader, short enough that an SDK's retry comes back while the client
// still waits.
const deciderRetryIn = time.Second

func invalidRequest(param, msg string) apiError {
	return apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "invalid_value", param: param, message: msg}
}

func unauthorized(msg string) apiError {
	return apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key", message: msg}
}

// deciderError maps a Decide or ListModels failure to the client's answer.
// The decider writes its status messages for users, so they are passed on;
// errors the gRPC client made up itself (connection refused, deadline) carry
// internal addresses and are replaced by a fixed message.
func deciderError(err error) apiError {
	if bearer.CallerRefused(err) {
		// The decider refused this edge's own credentials or role: a
		// deployment fault the client can neither cause nor fix, and whose
		// message names internal callers. An operator must fix it: an SDK
		// retrying within seconds would only be refused again.
		return apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "decider_unavailable", final: true,
			message: "the routing service is unavailable"}
	}
	st := status.Convert(err)
	msg := st.Message()
	switch st.Code() {
	case codes.Unauthenticated:
		return unauthorized(msg)
	case codes.NotFound:
		return apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found", message: msg}
	case codes.InvalidArgument:
		e := apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "invalid_value", message: msg}
		if v := fieldViolation(st); v != nil {
			e.param = requestParam(v.GetField())
			if v.GetReason() != "" {
				e.code = strings.ToLower(v.GetReason())
			}
		}
		return e
	case codes.PermissionDenied:
		return apiError{status: http.StatusForbidden, typ: "permission_error", code: "permission_denied", message: msg}
	case codes.ResourceExhausted:
		return apiError{status: http.StatusTooManyRequests, typ: rateLimitType(unitOf(st)), code: RateLimitCode, message: msg,
			retryAfter: retryAfterOf(st)}
	case codes.FailedPrecondition:
		// No endpoint meets the request's own constraints (max_price, only,
		// quantizations, max_tokens...): the same request would fail again,
		// so the status must be one SDKs do not retry (they retry 408, 409,
		// 429 and 5xx). 404, as the best-known public router answers.
		return apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "no_endpoints_found", message: msg}
	case codes.Unavailable:
		return apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "decider_unavailable",
			retryAfter: deciderRetryIn, message: "the routing service is unavailable; retry shortly"}
	case codes.DeadlineExceeded:
		return apiError{status: http.StatusGatewayTimeout, typ: "timeout_error", code: "decider_timeout",
			retryAfter: deciderRetryIn, message: "the routing service did not answer in time; retry shortly"}
	default:
		return apiError{status: http.StatusInternalServerError, typ: "server_error", code: "internal_error",
			message: "internal error while routing the request"}
	}
}

// fieldViolation is the first field a google.rpc.BadRequest attached to
// the status names, if any: the decider names the DecideRequest field at
// fault and why (its reason, OpenAI's error code in upper case:
// CONTEXT_LENGTH_EXCEEDED for a prompt no endpoint's context holds).
func fieldViolation(st *status.Status) *errdetails.BadRequest_FieldViolation {
	for _, d := range st.Details() {
		if v, ok := d.(*errdetails.BadRequest); ok && len(v.GetFieldViolations()) > 0 {
			return v.GetFieldViolations()[0]
		}
	}
	return nil
}

// requestParam is the field of the client's chat request a DecideRequest
// field comes from, the way the client's error names it; empty for fields
// the edge made up itself. The output bound is named max_tokens here; the
// chat handler renames it when the client sent max_completion_tokens.
func requestParam(field string) string {
	switch {
	case field == "model", strings.HasPrefix(field, "provider."):
		return field
	case field == "tokens.input_tokens":
		return "messages"
	case field == "tokens.max_output_tokens":
		return "max_tokens"
	}
	return ""
}

// unitOf is the limit unit of a Refusal attached to the status, if any.
func unitOf(st *status.Status) switchboardv1.LimitUnit {
	for _, d := range st.Details() {
		if v, ok := d.(*switchboardv1.Refusal); ok {
			return v.GetUnit()
		}
	}
	return switchboardv1.LimitUnit_LIMIT_UNIT_UNSPECIFIED
}

// retryAfterOf reads a retry delay from the status details the decider may
// attach: the standard RetryInfo or Switchboard's own Refusal.
func retryAfterOf(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		switch v := d.(type) {
		case *errdetails.RetryInfo:
			if v.GetRetryDelay() != nil {
				return v.GetRetryDelay().AsDuration()
			}
		case *switchboardv1.Refusal:
			if v.GetRetryAfter() != nil {
				return v.GetRetryAfter().AsDuration()
			}
		}
	}
	return 0
}
