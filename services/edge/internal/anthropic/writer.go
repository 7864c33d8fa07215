package anthropic

import (
	"net/http"

	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
)

// Writer is the http.ResponseWriter the chat pipeline answers a Messages
// request through: a clientapi.Writer putting what the pipeline writes
// in Anthropic's shape (a stream event by event, a held body or error at
// Finish, whose status may change: 503 becomes 529).
type Writer struct {
	*clientapi.RequestWriter[Request]
}

// NewWriter returns a Writer answering through w the request with edge
// request id reqID.
func NewWriter(w http.ResponseWriter, reqID string) *Writer {
	return &Writer{clientapi.NewRequestWriter[Request](w, reqID, api{})}
}

// WriteError answers e, unless something was answered already.
func (w *Writer) WriteError(e Error) { w.RequestWriter.WriteError(e.Status, e.JSON()) }

// api is the Messages API's clientapi.API.
type api struct{}

var _ clientapi.API[Request] = api{}

// Stream implements [clientapi.API.Stream].
func (api) Stream(reqID string, req Request, inputTokens int64) clientapi.Stream {
	return NewStream(reqID, req, inputTokens)
}

// Body implements [clientapi.API.Body].
func (api) Body(body []byte, reqID string, req Request) ([]byte, error) {
	return FromChat(body, reqID, req)
}

// Error implements [clientapi.API.Error].
func (api) Error(status int, body []byte, _ bool) (int, []byte) {
	e := FromChatError(status, body)
	return e.Status, e.JSON()
}

// Unreadable implements [clientapi.API.Unreadable].
func (api) Unreadable() (int, []byte) {
	e := Error{Status: http.StatusBadGateway, Type: "api_error", Message: "the provider's answer could not be translated"}
	return e.Status, e.JSON()
}
