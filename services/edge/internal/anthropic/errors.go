package anthropic

import (
	"encoding/json"
	"net/http"
	"strings"
)

// StatusOverloaded is Anthropic's status for an API too busy to serve the
// request, which its SDKs and Claude Code retry.
const StatusOverloaded = 529

// Error is an error in Anthropic's shape, with its status.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Type is Anthropic's error type (invalid_request_error, ...).
	Type string
	// Message says what went wrong.
	Message string
	// Final says no retry can help, whatever the status (see
	// retryadvice.Set).
	Final bool
}

type errorBody struct {
	Type  string      `json:"type"`
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// JSON is the error's body.
func (e Error) JSON() []byte {
	b, _ := json.Marshal(errorBody{Type: "error", Error: errorDetail{Type: e.Type, Message: e.Message}})
	return b
}

// openAIError is the edge's own error body (the chat API's).
type openAIError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
		Param   any    `json:"param"`
	} `json:"error"`
}

// FromChatError translates an error the chat pipeline answered (status and
// its OpenAI error body) into Anthropic's. The status keeps its meaning:
// 4xx as Anthropic's types name them; 503 (no provider available, the
// routing service unavailable, an edge too busy) becomes 529 overloaded,
// which Anthropic clients retry; other 5xx stay, as api_error (or
// timeout_error for 504).
func FromChatError(status int, body []byte) Error {
	var oe openAIError
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &oe) == nil && oe.Error.Message != "" {
		msg = oe.Error.Message
		if p, ok := oe.Error.Param.(string); ok && p != "" && !strings.Contains(msg, p) {
			msg = p + ": " + msg
		}
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	e := Error{Status: status, Message: msg}
	switch {
	case status == http.StatusUnauthorized:
		e.Type = "authentication_error"
	case status == http.StatusPaymentRequired, status == http.StatusForbidden:
		e.Type = "permission_error"
	case status == http.StatusNotFound:
		e.Type = "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		e.Type = "request_too_large"
	case status == http.StatusTooManyRequests:
		e.Type = "rate_limit_error"
	case status == http.StatusServiceUnavailable, status == StatusOverloaded:
		e.Status, e.Type = StatusOverloaded, "overloaded_error"
	case status == http.StatusGatewayTimeout:
		e.Type = "timeout_error"
	case status >= 500:
		e.Type = "api_error"
	default:
		e.Type = "invalid_request_error"
	}
	return e
}

// streamErrorType maps the type of an error event the chat stream ended
// with to Anthropic's.
func streamErrorType(typ string) string {
	switch typ {
	case "rate_limit_error", "rate_limit_exceeded":
		return "rate_limit_error"
	case "overloaded_error":
		return "overloaded_error"
	}
	return "api_error"
}
