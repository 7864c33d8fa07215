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
	*clientapi.Writer
	t *translation
}

// translation is the Messages API's clientapi.Translation.
type translation struct {
	reqID string
	// req and inputTokens are set by SetRequest once the request is read.
	req         Request
	inputTokens int64
}

var _ clientapi.Translation = (*translation)(nil)

// NewWriter returns a Writer answering through w the request with edge
// request id reqID.
func NewWriter(w http.ResponseWriter, reqID string) *Writer {
	t := &translation{reqID: reqID}
	return &Writer{Writer: clientapi.NewWriter(w, t), t: t}
}

// SetRequest records the request being answered and the edge's estimate
// of its prompt's tokens.
func (w *Writer) SetRequest(req Request, inputTokens int64) {
	w.t.req, w.t.inputTokens = req, inputTokens
}

// WriteError answers e, unless something was answered already.
func (w *Writer) WriteError(e Error) { w.Writer.WriteError(e.Status, e.JSON()) }

// Stream implements [clientapi.Translation.Stream].
func (t *translation) Stream() clientapi.Stream { return NewStream(t.reqID, t.req, t.inputTokens) }

// Body implements [clientapi.Translation.Body].
func (t *translation) Body(body []byte) ([]byte, error) { return FromChat(body, t.reqID, t.req) }

// Error implements [clientapi.Translation.Error].
func (t *translation) Error(status int, body []byte) (int, []byte) {
	e := FromChatError(status, body)
	return e.Status, e.JSON()
}

// Unreadable implements [clientapi.Translation.Unreadable].
func (t *translation) Unreadable() (int, []byte) {
	e := Error{Status: http.StatusBadGateway, Type: "api_error", Message: "the provider's answer could not be translated"}
	return e.Status, e.JSON()
}
