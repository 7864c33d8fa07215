// Package clientapi serves a client API other than chat completions (the
// Messages API, the Responses API) through the chat pipeline: its Writer
// is the http.ResponseWriter the pipeline answers through, and hands what
// the pipeline writes, in the chat API's format, to the API's Translation.
// A stream is translated event by event as it is written and flushed; a
// body (an answer or an error) is held until Finish translates it, so its
// status can still change.
package clientapi

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Translation puts the chat pipeline's answers in one client API's shape.
type Translation interface {
	// Stream returns the translation of the answer's stream, when the
	// pipeline starts one.
	Stream() Stream
	// Body translates a chat completion body: the client's answer, or an
	// error when the body cannot be read.
	Body(body []byte) ([]byte, error)
	// Error translates an error the pipeline answered (its status and
	// OpenAI error body) into the client's status and body.
	Error(status int, body []byte) (int, []byte)
	// Unreadable is the status and body answered for a chat completion
	// Body could not translate.
	Unreadable() (int, []byte)
}

// Stream translates one chat-completions event stream.
type Stream interface {
	// Event appends the client's events for one chat stream event's data
	// (a chunk, "[DONE]" or an error object) to dst.
	Event(dst, data []byte) []byte
	// Ended reports whether the client's stream has ended.
	Ended() bool
	// Cut appends the end of a stream the pipeline stopped without its
	// end (an error event) to dst.
	Cut(dst []byte) []byte
}

// Writer is the http.ResponseWriter the chat pipeline answers a client
// API's request through. http.ResponseController reaches the connection
// through Unwrap; the write deadline the pipeline sets is also
// remembered, for the held body's write. Headers the pipeline sets
// (Retry-After, the route's) go out as it set them.
type Writer struct {
	w http.ResponseWriter
	t Translation

	status int
	stream Stream
	// buf holds a body until Finish, or a stream's bytes not yet making a
	// whole event.
	buf      []byte
	finished bool
	// writeTimeout is how long the pipeline last gave a write (the
	// deadline it set, from when it set it): Finish gives the held body's
	// write as long.
	writeTimeout time.Duration
}

// NewWriter returns a Writer answering through w, in t's shape.
func NewWriter(w http.ResponseWriter, t Translation) *Writer {
	return &Writer{w: w, t: t}
}

// Header implements [http.ResponseWriter.Header].
func (w *Writer) Header() http.Header { return w.w.Header() }

// WriteHeader implements [http.ResponseWriter.WriteHeader]. A successful
// stream's status goes out at once; any other is held for Finish, which
// may change it.
func (w *Writer) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	if code == http.StatusOK && strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		w.stream = w.t.Stream()
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
// that stopped without its end (a stream the pipeline cut) gets its Cut.
// It is called once the pipeline has answered; later calls do nothing.
func (w *Writer) Finish() {
	if w.finished {
		return
	}
	w.finished = true
	switch {
	case w.stream != nil:
		if !w.stream.Ended() {
			_, _ = w.w.Write(w.stream.Cut(nil))
			_ = http.NewResponseController(w.w).Flush()
		}
	case w.status == 0:
		// Nothing was answered: the client left.
	case w.status == http.StatusOK:
		body, err := w.t.Body(w.buf)
		if err != nil {
			w.write(w.t.Unreadable())
			return
		}
		w.write(http.StatusOK, body)
	default:
		w.write(w.t.Error(w.status, w.buf))
	}
}

// WriteError answers status and body, already in the client API's shape,
// unless something was answered already.
func (w *Writer) WriteError(status int, body []byte) {
	if w.status != 0 || w.finished {
		return
	}
	w.status, w.finished = status, true
	w.write(status, body)
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

// API is a client API's translation of the answers to its requests, R
// being what it needs to know of the request answered.
type API[R any] interface {
	// Stream returns the translation of the stream answering req, whose
	// edge request id is reqID and whose prompt the edge estimated at
	// inputTokens.
	Stream(reqID string, req R, inputTokens int64) Stream
	// Body translates a chat completion body answering req.
	Body(body []byte, reqID string, req R) ([]byte, error)
	// Error translates an error the pipeline answered (its status and
	// OpenAI error body); translated says whether the request had been
	// read and translated when it was.
	Error(status int, body []byte, translated bool) (int, []byte)
	// Unreadable is the status and body answered for a chat completion
	// Body could not translate.
	Unreadable() (int, []byte)
}

// RequestWriter is a Writer answering in an API's shape the request
// SetRequest names.
type RequestWriter[R any] struct {
	*Writer
	t *requestTranslation[R]
}

// NewRequestWriter returns a RequestWriter answering through w, in api's
// shape, the request with edge request id reqID.
func NewRequestWriter[R any](w http.ResponseWriter, reqID string, api API[R]) *RequestWriter[R] {
	t := &requestTranslation[R]{api: api, reqID: reqID}
	return &RequestWriter[R]{Writer: NewWriter(w, t), t: t}
}

// SetRequest records the request being answered, once read and
// translated, and the edge's estimate of its prompt's tokens.
func (w *RequestWriter[R]) SetRequest(req R, inputTokens int64) {
	w.t.req, w.t.inputTokens, w.t.translated = req, inputTokens, true
}

// requestTranslation is the Translation of an API for one request.
type requestTranslation[R any] struct {
	api         API[R]
	reqID       string
	req         R
	inputTokens int64
	translated  bool
}

func (t *requestTranslation[R]) Stream() Stream { return t.api.Stream(t.reqID, t.req, t.inputTokens) }

func (t *requestTranslation[R]) Body(body []byte) ([]byte, error) {
	return t.api.Body(body, t.reqID, t.req)
}

func (t *requestTranslation[R]) Error(status int, body []byte) (int, []byte) {
	return t.api.Error(status, body, t.translated)
}

func (t *requestTranslation[R]) Unreadable() (int, []byte) { return t.api.Unreadable() }
