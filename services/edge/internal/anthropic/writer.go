package anthropic

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/switchboard-ai/switchboard/pkg/contextlength"
	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
	"github.com/switchboard-ai/switchboard/services/edge/internal/retryadvice"
)

// Writer is the http.ResponseWriter the chat pipeline answers a Messages
// request through: a clientapi.Writer putting what the pipeline writes
// in Anthropic's shape (a stream event by event, a held body or error at
// Finish, whose status may change: 503 becomes 529). An answer that is a
// Messages answer already (an anthropic endpoint's, relayed: Native) goes
// out as it is.
type Writer struct {
	*clientapi.RequestWriter[Request]
	api *api
	// nativeStream says a relayed stream is being written, nativeEnded
	// that its end (message_stop or an error event) went out, finished
	// that Finish ran.
	nativeStream, nativeEnded, finished bool
}

// NewWriter returns a Writer answering through w the request with edge
// request id reqID.
func NewWriter(w http.ResponseWriter, reqID string) *Writer {
	a := &api{}
	return &Writer{RequestWriter: clientapi.NewRequestWriter[Request](w, reqID, a), api: a}
}

// WriteError answers e, an error of the Messages API's own, with the
// retry advice the chat pipeline gives its errors (an error translated
// from the pipeline's has it already), unless something was answered
// already.
func (w *Writer) WriteError(e Error) {
	if w.Answered() {
		return
	}
	retryadvice.Set(w.Header(), e.Status, 0, e.Final)
	w.RequestWriter.WriteError(e.Status, e.JSON())
}

// ContextExceeded records that the pipeline is refusing the request as
// longer than every endpoint's context, with its figures: the error is
// answered in Anthropic's words rather than the chat error's.
func (w *Writer) ContextExceeded(e contextlength.Exceeded) { w.api.context = &e }

// Native implements [upstream.NativeWriter]: the answer written next is a
// Messages answer already and goes out untranslated.
func (w *Writer) Native() { w.api.native = true }

// WriteHeader implements [http.ResponseWriter.WriteHeader]: a relayed
// stream's status goes out at once, anything else as the clientapi.Writer
// holds or sends it.
func (w *Writer) WriteHeader(code int) {
	if w.api.native && !w.nativeStream && code == http.StatusOK &&
		strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		w.nativeStream = true
		w.Unwrap().WriteHeader(code)
		return
	}
	if !w.nativeStream {
		w.RequestWriter.WriteHeader(code)
	}
}

// Write implements [http.ResponseWriter.Write]. A relayed stream is
// written in whole events, as the leg writes them: the last one says
// whether the stream ended.
func (w *Writer) Write(p []byte) (int, error) {
	if !w.nativeStream {
		if w.api.native {
			// A relayed body, or the first write of a relayed stream
			// without its header written.
			w.WriteHeader(http.StatusOK)
		}
		if !w.nativeStream {
			return w.RequestWriter.Write(p)
		}
	}
	w.nativeEnded = w.nativeEnded || bytes.Contains(p, []byte("event: message_stop\n")) || bytes.Contains(p, []byte("event: error\n"))
	return w.Unwrap().Write(p)
}

// FlushError flushes a stream; a held body is not flushed, so its status
// can still change.
func (w *Writer) FlushError() error {
	if w.nativeStream {
		return http.NewResponseController(w.Unwrap()).Flush()
	}
	return w.RequestWriter.FlushError()
}

// Flush implements [http.Flusher].
func (w *Writer) Flush() { _ = w.FlushError() }

// Finish writes what was held (clientapi.Writer.Finish); a relayed stream
// that stopped without its end gets Anthropic's error event.
func (w *Writer) Finish() {
	if !w.nativeStream {
		w.RequestWriter.Finish()
		return
	}
	if w.finished {
		return
	}
	w.finished = true
	if !w.nativeEnded {
		_, _ = w.Unwrap().Write(event(nil, "error", errorBody{Type: "error", Error: errorDetail{Type: "api_error", Message: "the answer's stream ended early"}}))
		_ = http.NewResponseController(w.Unwrap()).Flush()
	}
}

// api is the Messages API's clientapi.API. native is set when the answer
// is a Messages answer already: its body passes as it is. context is set
// when the pipeline refused a prompt longer than every endpoint's context.
type api struct {
	native  bool
	context *contextlength.Exceeded
}

var _ clientapi.API[Request] = (*api)(nil)

// Stream implements [clientapi.API.Stream].
func (*api) Stream(reqID string, req Request, inputTokens int64) clientapi.Stream {
	return NewStream(reqID, req, inputTokens)
}

// Body implements [clientapi.API.Body].
func (a *api) Body(body []byte, reqID string, req Request) ([]byte, error) {
	if a.native {
		return body, nil
	}
	return FromChat(body, reqID, req)
}

// Error implements [clientapi.API.Error].
func (a *api) Error(status int, body []byte, _ bool) (int, []byte) {
	if status == http.StatusBadRequest && a.context != nil {
		e := Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: a.context.AnthropicMessage()}
		return e.Status, e.JSON()
	}
	e := FromChatError(status, body)
	return e.Status, e.JSON()
}

// Unreadable implements [clientapi.API.Unreadable].
func (*api) Unreadable() (int, []byte) {
	e := Error{Status: http.StatusBadGateway, Type: "api_error", Message: "the provider's answer could not be translated"}
	return e.Status, e.JSON()
}
