package messagesapi

import (
	"encoding/json"
	"net/http"
)

// Message is a reply, whole (non-streamed) or as message_start carries it.
type Message struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"` // "assistant"
	Model        string         `json:"model"`
	Content      []ContentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        Usage          `json:"usage"`
}

// ContentBlock is one block of a reply: text, thinking or tool_use. Only the
// fields of its type are sent.
type ContentBlock struct {
	Type string `json:"type"`
	// Text is a text block's text; a pointer so a stream's empty start block
	// sends "text":"".
	Text *string `json:"text,omitempty"`
	// Thinking and Signature are a thinking block's.
	Thinking  *string `json:"thinking,omitempty"`
	Signature *string `json:"signature,omitempty"`
	// ID, Name and Input are a tool_use block's.
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

// TextBlock returns a text block.
func TextBlock(text string) ContentBlock { return ContentBlock{Type: "text", Text: &text} }

// ThinkingBlock returns a thinking block.
func ThinkingBlock(thinking, signature string) ContentBlock {
	return ContentBlock{Type: "thinking", Thinking: &thinking, Signature: &signature}
}

// ToolUseBlock returns a tool_use block.
func ToolUseBlock(id, name string, input json.RawMessage) ContentBlock {
	return ContentBlock{Type: "tool_use", ID: id, Name: name, Input: input}
}

// Usage is the token accounting of a reply. InputTokens counts only the
// prompt tokens neither read from nor written to the cache.
type Usage struct {
	InputTokens              int64          `json:"input_tokens"`
	CacheCreationInputTokens int64          `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64          `json:"cache_read_input_tokens"`
	CacheCreation            *CacheCreation `json:"cache_creation,omitempty"`
	OutputTokens             int64          `json:"output_tokens"`
	ServiceTier              string         `json:"service_tier,omitempty"`
}

// CacheCreation splits CacheCreationInputTokens by the lifetime written.
type CacheCreation struct {
	Ephemeral5mInputTokens int64 `json:"ephemeral_5m_input_tokens"`
	Ephemeral1hInputTokens int64 `json:"ephemeral_1h_input_tokens"`
}

// The stream's events. Each is sent as "event: TYPE" and "data: JSON".

// MessageStart opens a stream with the message, its content empty.
type MessageStart struct {
	Type    string  `json:"type"` // "message_start"
	Message Message `json:"message"`
}

// BlockStart opens content block Index.
type BlockStart struct {
	Type         string       `json:"type"` // "content_block_start"
	Index        int          `json:"index"`
	ContentBlock ContentBlock `json:"content_block"`
}

// BlockDelta adds to content block Index.
type BlockDelta struct {
	Type  string `json:"type"` // "content_block_delta"
	Index int    `json:"index"`
	Delta Delta  `json:"delta"`
}

// Delta is one increment: text_delta, thinking_delta, signature_delta or
// input_json_delta, with the field of its type.
type Delta struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	Thinking    *string `json:"thinking,omitempty"`
	Signature   *string `json:"signature,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

// BlockStop closes content block Index.
type BlockStop struct {
	Type  string `json:"type"` // "content_block_stop"
	Index int    `json:"index"`
}

// MessageDelta ends the message: why it stopped and its final usage, every
// figure a cumulative total.
type MessageDelta struct {
	Type  string `json:"type"` // "message_delta"
	Delta struct {
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage Usage `json:"usage"`
}

// Bare is an event with nothing but its type: ping, message_stop.
type Bare struct {
	Type string `json:"type"`
}

// ErrorBody is Anthropic's error envelope, the body of every error answer
// and the data of a stream's error event.
type ErrorBody struct {
	Type      string      `json:"type"` // "error"
	Error     ErrorDetail `json:"error"`
	RequestID string      `json:"request_id,omitempty"`
}

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// The error types, by the HTTP status Anthropic sends them with.
const (
	ErrInvalidRequestType  = "invalid_request_error" // 400
	ErrAuthenticationType  = "authentication_error"  // 401
	ErrBillingType         = "billing_error"         // 402
	ErrPermissionType      = "permission_error"      // 403
	ErrNotFoundType        = "not_found_error"       // 404
	ErrRequestTooLargeType = "request_too_large"     // 413
	ErrRateLimitType       = "rate_limit_error"      // 429
	ErrAPIType             = "api_error"             // 500
	ErrTimeoutType         = "timeout_error"         // 504
	ErrOverloadedType      = "overloaded_error"      // 529
)

// StatusOverloaded is Anthropic's 529, sent when its servers are overloaded.
const StatusOverloaded = 529

// ErrorType is the error type Anthropic sends with an HTTP status.
func ErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return ErrInvalidRequestType
	case http.StatusUnauthorized:
		return ErrAuthenticationType
	case http.StatusPaymentRequired:
		return ErrBillingType
	case http.StatusForbidden:
		return ErrPermissionType
	case http.StatusNotFound:
		return ErrNotFoundType
	case http.StatusRequestEntityTooLarge:
		return ErrRequestTooLargeType
	case http.StatusTooManyRequests:
		return ErrRateLimitType
	case http.StatusGatewayTimeout:
		return ErrTimeoutType
	case StatusOverloaded:
		return ErrOverloadedType
	}
	if status >= 500 {
		return ErrAPIType
	}
	return ErrInvalidRequestType
}

// NewError builds an ErrorBody.
func NewError(typ, message, requestID string) ErrorBody {
	return ErrorBody{Type: "error", Error: ErrorDetail{Type: typ, Message: message}, RequestID: requestID}
}
