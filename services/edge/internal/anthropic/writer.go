package anthropic

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/contextlength"
	"github.com/switchboard-ai/switchboard/services/edge/internal/retryadvice"
)

// Writer is the http.ResponseWriter the chat pipeline answers a Messages
// request through: it translates what the pipeline writes, in the chat
// API's format, into Anthropic's. A stream is translated event by event as
// it is written and flushed; a body (an answer or an error) is held until
// Finish translates it. http.ResponseController reaches the connection
// through Unwrap; the write deadline the pipeline sets is also remembered,
// for the held body's write.
type Writer struct {
	w     http.ResponseWriter
	reqID string
	// req and inputTokens are set by SetRequest once the request is read.
	req         Request
	inputTokens int64

	status int
	stream *Stream
	// buf holds a body until Finish, or a stream's bytes not yet making a
	// whole event.
	buf      []byte
	finished bool
	// context is set when the pipeline refused a prompt longer than every
	// endpoint's context: Finish says so in Anthropic's words.
	context *contextlength.Exceeded
	// writeTimeout is how long the pipeline last gave a write (the
	// deadline it set, from when it set it): Finish gives the held body's
	// write as long.
	writeTimeout time.Duration
}

// NewWriter returns a Writer answering through w the request with edge
// request id reqID.
func NewWriter(w http.ResponseWriter, reqID string) *Writer {
	return &Writer{w: w, reqID: reqID}
}

// SetRequest records the request being answered and the edge's estimate
// of its prompt's tokens.
func (w *Writer) SetRequest(req Request, inputTokens int64) {
	w.req, w.inputTokens = req, inputTokens
}

// ContextExceeded records that the pipeline is refusing the request as
// longer than every endpoint's context, with its figures: Finish answers
// Anthropic's invalid_request_error for it rather than the chat error's
// words.
func (w *Writer) ContextExceeded(e contextlength.Exceeded) { w.context = &e }

// Header implements [http.ResponseWriter.Header].
func (w *Writer) Header() http.Header { return w.w.Header() }

// WriteHeader implements [http.ResponseWriter.WriteHeader]. A successful
// stream's status goes out at once; any other is held for Finish, which
// may change it (503 becomes 529).
func (w *Writer) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	if code == http.StatusOK && strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		w.stream = NewStream(w.reqID, w.req, w.inputTokens)
		w.w.WriteHeader(code)
	}
}

// Write implements [http.ResponseWriter.Write].
func (w *Writer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.buf = append(w.buf, p...)
	if w.stream == nil {
		return len(p), nil
	}
	var out []byte
	for {
		i := bytes.Index(w.buf, []byte("\n\n"))
		if i < 0 {
			break
		}
		out = w.frame(out, w.buf[:i])
		w.buf = w.buf[i+2:]
	}
	if len(w.buf) == 0 {
		w.buf = nil
	}
	if len(out) == 0 {
		return len(p), nil
	}
	if _, err := w.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// frame translates one server-sent event of the chat stream: its data
// lines, joined; comments and other fields are dropped.
func (w *Writer) frame(dst, ev []byte) []byte {
	var data []byte
	for line := range bytes.SplitSeq(ev, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
		}
	}
	if data == nil {
		return dst
	}
	return w.stream.Event(dst, data)
}

// FlushError flushes a stream; a held body is not flushed, so its status
// can still change.
func (w *Writer) FlushError() error {
	if w.stream == nil {
		return nil
	}
	return http.NewResponseController(w.w).Flush()
}

// Flush implements [http.Flusher].
func (w *Writer) Flush() { _ = w.FlushError() }

// SetWriteDeadline sets the connection's write deadline, as
// [http.ResponseController.SetWriteDeadline] does, and remembers the time
// it gives a write for the body Finish writes.
func (w *Writer) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() {
		w.writeTimeout = time.Until(t)
	}
	return http.NewResponseController(w.w).SetWriteDeadline(t)
}

// Unwrap is the writer underneath, for http.ResponseController.
func (w *Writer) Unwrap() http.ResponseWriter { return w.w }

// Finish writes what was held: the translated answer or error. A stream
// that stopped without its end (a stream the pipeline cut) gets an error
// event. It is called once the pipeline has answered; later calls do
// nothing.
func (w *Writer) Finish() {
	if w.finished {
		return
	}
	w.finished = true
	switch {
	case w.stream != nil:
		if !w.stream.Ended() {
			_, _ = w.w.Write(w.stream.Fail(nil, "api_error", "the answer's stream ended early"))
			_ = http.NewResponseController(w.w).Flush()
		}
	case w.status == 0:
		// Nothing was answered: the client left.
	case w.status == http.StatusOK:
		body, err := FromChat(w.buf, w.reqID, w.req)
		if err != nil {
			// The provider was called and answered: a retry would call it
			// again for the same answer.
			w.writeOwnError(Error{Status: http.StatusBadGateway, Type: "api_error", Message: "the provider's answer could not be translated", Final: true})
			return
		}
		w.write(http.StatusOK, body)
	case w.status == http.StatusBadRequest && w.context != nil:
		w.writeError(Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: w.context.AnthropicMessage()})
	default:
		w.writeError(FromChatError(w.status, w.buf))
	}
}

// WriteError answers e, unless something was answered already.
func (w *Writer) WriteError(e Error) {
	if w.status != 0 || w.finished {
		return
	}
	w.status, w.finished = e.Status, true
	w.writeOwnError(e)
}

// writeOwnError answers an error of the Messages API's own, with the retry
// advice the chat pipeline gives its errors (an error translated from the
// pipeline's has it already).
func (w *Writer) writeOwnError(e Error) {
	retryadvice.Set(w.Header(), e.Status, 0, e.Final)
	w.writeError(e)
}

func (w *Writer) writeError(e Error) {
	w.write(e.Status, e.JSON())
}

func (w *Writer) write(status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if w.writeTimeout > 0 {
		// The pipeline wrote the answer under a deadline; its translation
		// goes out under one as long, so a client that does not read
		// cannot hold the request.
		rc := http.NewResponseController(w.w)
		_ = rc.SetWriteDeadline(time.Now().Add(w.writeTimeout))
		defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	}
	w.w.WriteHeader(status)
	_, _ = w.w.Write(body)
}
