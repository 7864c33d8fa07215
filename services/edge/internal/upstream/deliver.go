package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
)

// Deliver commits a ready leg to the client: its headers and what it held,
// then the rest of the stream. Once it starts, no other endpoint can be tried;
// a stream that breaks ends with an error event and no [DONE].
func (l *Leg) Deliver(ctx context.Context, w http.ResponseWriter) {
	l.Result.Committed = true
	l.wd.started()
	if nw, ok := w.(NativeWriter); ok && l.relay != nil {
		nw.Native()
	}
	setAnswerHeaders(w, l.Endpoint, l.req.Stream)
	l.Result.CommittedAt = time.Now()
	cw := &clientWriter{w: w, rc: http.NewResponseController(w), wd: l.wd, timeout: l.c.opts.WriteTimeout}
	// Every write has a deadline, so a client that stops reading cannot
	// hold the call (and the provider's connection) forever. The deadline
	// is the connection's: clear it for the next request on it.
	defer func() { _ = cw.rc.SetWriteDeadline(time.Time{}) }()
	if !l.req.Stream {
		l.deliverPlain(cw)
		return
	}
	l.deliverStream(ctx, cw)
}

// deliverPlain writes a non-streamed answer.
func (l *Leg) deliverPlain(cw *clientWriter) {
	cw.deadline()
	if _, err := cw.w.Write(l.held); err != nil {
		// The provider did its part; the report is about the provider.
		l.Result.WriteFailed = true
		l.c.log.Debug("client write failed", "request_id", l.req.ID, "error", err)
	} else {
		l.Result.Delivered = l.heldText
	}
	l.held = nil
	l.completed()
}

// deliverStream writes what the leg held, then relays the rest of the
// stream, the estimated usage chunk when the client asked for usage and the
// provider sent none, and [DONE]. Each chunk is rewritten into one buffer,
// reused from chunk to chunk, and written from it once.
func (l *Leg) deliverStream(ctx context.Context, cw *clientWriter) {
	ok := cw.send(l.held)
	// pending is what was rewritten for the client and not written yet,
	// pendingText the generated text in it. Chunks that arrived together
	// go out in one write: each is written as soon as no further chunk
	// is at hand, never held while the edge waits for the provider.
	pending, pendingText := l.held[:0], int64(0)
	l.held = nil
	// The relay buffer is held's: Close gives it back.
	defer func() { l.held = pending }()
	if !ok {
		l.clientGone(cw.err)
		return
	}
	l.Result.Delivered = l.heldText
	for !l.ended {
		var info rewrite.Info
		var st stepResult
		if pending == nil {
			pending = getBuffer()
		}
		before := len(pending)
		pending, info, st = l.step(ctx, pending)
		if st == stepFail {
			if len(pending) > 0 {
				// What was read before the failure goes out first; a
				// client that cannot take it was gone before the
				// failure, as when each chunk went out on its own.
				if !cw.send(pending) {
					l.clientGone(cw.err)
					return
				}
				l.Result.Delivered += pendingText
			}
			if ctx.Err() == nil && l.relay != nil {
				// Anthropic's clients know a stream's end by message_stop:
				// an error event ends it instead.
				cw.send(l.relay.Interrupted(pending[:0], l.Result.Summary))
			} else if ctx.Err() == nil {
				// The client gets an error event and no [DONE], so it
				// cannot mistake a truncated answer for a complete one.
				ev, _ := json.Marshal(map[string]any{"error": map[string]any{
					"message": "the provider's stream was interrupted: " + l.Result.Summary,
					"type":    "upstream_error",
					"code":    "stream_interrupted",
				}})
				cw.send(appendEvent(pending[:0], ev))
			}
			return
		}
		if len(pending) > before {
			pendingText += info.TextBytes
		}
		if l.ended || len(pending) == 0 || (len(pending) < maxPendingBytes && l.rd.Ready()) {
			continue
		}
		if !cw.send(pending) {
			l.clientGone(cw.err)
			return
		}
		l.Result.Delivered += pendingText
		// Nothing is pending while the edge waits for the provider: the
		// buffer and the rewriter's scratch go back, so that an open
		// stream holds neither between its chunks.
		putBuffer(pending)
		l.rw.Release()
		pending, pendingText = nil, 0
	}
	// The last chunks, the estimated usage chunk when the client asked for
	// usage and the provider sent none, and [DONE] go out together.
	if l.relay != nil {
		// A Messages stream ends with its message_stop, relayed already.
		if !cw.send(pending) {
			l.clientGone(cw.err)
			return
		}
		l.Result.Delivered += pendingText
		l.completed()
		return
	}
	if l.req.IncludeUsage && l.Result.Usage == nil {
		// The client asked for usage and the provider sent none: it gets
		// the estimate it is billed for.
		pending = appendEvent(pending, l.rw.UsageChunk(l.req.ID, l.req.EstimatedUsage(l.Result.Delivered+pendingText)))
	}
	if pending == nil {
		pending = getBuffer()
	}
	pending = appendEvent(pending, []byte("[DONE]"))
	if !cw.send(pending) {
		l.clientGone(cw.err)
		return
	}
	l.Result.Delivered += pendingText
	l.completed()
}

// clientGone records a leg whose client could not be written to, by the
// write error: one that stopped reading, or one that went away.
func (l *Leg) clientGone(writeErr error) {
	l.Result.WriteFailed = true
	if errors.Is(writeErr, os.ErrDeadlineExceeded) {
		l.Result.fail(switchboardv1.Outcome_OUTCOME_CANCELLED, "cancelled: client stopped reading",
			fmt.Sprintf("client stopped reading (no write progress in %s)", l.c.opts.WriteTimeout))
		return
	}
	l.Result.fail(switchboardv1.Outcome_OUTCOME_CANCELLED, "cancelled: client went away", "client went away")
}

// clientWriter writes an answer to the client, each write under the write
// timeout.
type clientWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	wd      *watchdog
	timeout time.Duration
	// err is the last write's error.
	err error
}

// deadline sets the connection's write deadline for the next write.
func (cw *clientWriter) deadline() { _ = cw.rc.SetWriteDeadline(time.Now().Add(cw.timeout)) }

// send writes events, already framed as server-sent events, and flushes
// them, reporting whether that worked; cw.err says why not.
func (cw *clientWriter) send(events []byte) bool {
	// The provider's idle clock stops while the client is written to.
	cw.wd.pause()
	defer cw.wd.resume()
	cw.deadline()
	if len(events) > 0 {
		if _, cw.err = cw.w.Write(events); cw.err != nil {
			return false
		}
	}
	cw.err = cw.rc.Flush()
	return cw.err == nil
}

// setAnswerHeaders writes the status line of a successful answer. It is
// called only once the answer is known to be good, so that until then the
// attempt can still be abandoned for another endpoint.
func setAnswerHeaders(w http.ResponseWriter, ep *switchboardv1.Endpoint, stream bool) {
	h := w.Header()
	// What Set does, with the values in one array rather than one each.
	if stream {
		v := [...]string{"text/event-stream", "no-cache", "no", ep.GetProvider()}
		vals := v[:]
		h["Content-Type"] = vals[0:1:1]
		h["Cache-Control"] = vals[1:2:2]
		// Stops nginx-style proxies in front of the edge from buffering the stream.
		h["X-Accel-Buffering"] = vals[2:3:3]
		h["X-Switchboard-Provider"] = vals[3:4:4]
	} else {
		v := [...]string{"application/json", ep.GetProvider()}
		vals := v[:]
		h["Content-Type"] = vals[0:1:1]
		h["X-Switchboard-Provider"] = vals[1:2:2]
	}
	w.WriteHeader(http.StatusOK)
}
