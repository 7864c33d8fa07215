package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
	"github.com/switchboard-ai/switchboard/services/edge/internal/sse"
)

// errHedgeLost cancels the leg of a hedged request that did not produce the
// first token.
var errHedgeLost = errors.New("the other endpoint answered first")

// result is how one call to one endpoint ended.
type result struct {
	outcome    switchboardv1.Outcome
	status     int
	retryAfter time.Duration
	headers    []*switchboardv1.Header
	start      time.Time
	ttft       time.Duration
	hasTTFT    bool // false when no token arrived
	duration   time.Duration
	usage      *pricing.Usage
	// committed is set once the answer was chosen for the client and its
	// headers written: no retry after that.
	committed bool
	// committedAt is when the first token (or the non-streamed answer) was
	// written to the client.
	committedAt time.Time
	// delivered is the size of the generated text written to the client.
	delivered int64
	// writeFailed is set when the client could not be written to.
	writeFailed bool
	// final is set when the provider rejected the request itself, which
	// another provider would reject too; it is passed to the client as is.
	final *Failure
	// summary is the short outcome shown to the client among the attempts.
	summary string
	// errText is the detailed, redacted failure for reports and logs.
	errText string
}

func (r *result) fail(outcome switchboardv1.Outcome, summary, detail string) {
	r.outcome, r.summary, r.errText = outcome, summary, detail
}

// leg is one call to one endpoint. It is opened up to its first token, with
// what it read held back, so that until it is committed to the client it can
// still be abandoned for another endpoint or lose a hedge race. open may run
// on its own goroutine; everything else runs on the request's.
type leg struct {
	ep    *switchboardv1.Endpoint
	hedge bool
	// reservation is the broker reservation the call is sent under, named
	// in its CallReport so the decider reconciles it; empty for probes and
	// calls the broker is not in play for.
	reservation string
	// lost is set when the leg was cancelled because the other leg of a
	// hedge produced the first token.
	lost bool
	// ready is open's answer: the leg produced its first token (or a
	// complete answer) and can be committed.
	ready bool
	// opened is closed when open, run on its own goroutine, returned.
	opened chan struct{}
	// openReturned is when open returned on its goroutine; lostAt is when
	// the leg was cancelled for losing a hedge. A leg reaped after the
	// winner's whole answer ended at one of these, not when it is reaped.
	openReturned, lostAt time.Time

	secret string
	// credErr is why the endpoint's credential was refused for this
	// call: the leg fails before any request is made.
	credErr error
	ctx     context.Context
	cancel  context.CancelCauseFunc
	wd      *watchdog
	resp    *http.Response
	rd      *sse.Reader
	rw      rewrite.Rewriter

	held      [][]byte
	heldBytes int
	heldText  int64
	// ended is set once the provider's answer is complete.
	ended     bool
	sawFinish bool
	closed    bool
	// reported is set once the leg's CallReport was sent: exactly once.
	reported bool

	res result
}

// newLeg prepares a call to ep. Its context derives from ctx, the client's,
// so a client that goes away cancels the upstream request and closes its
// connection. The first-token deadline starts now.
func (d *Dispatcher) newLeg(ctx context.Context, call Call, ep *switchboardv1.Endpoint, hedge bool) *leg {
	l := &leg{ep: ep, hedge: hedge}
	l.res.start = time.Now()
	if env := ep.GetApiKeyEnv(); env != "" {
		target, err := url.Parse(ep.GetBaseUrl())
		if err == nil {
			l.secret, err = d.opts.Credentials.Lookup(env, target)
		}
		l.credErr = err
	}
	l.ctx, l.cancel = context.WithCancelCause(ctx)
	l.wd = newWatchdog(d.opts.FirstTokenTimeout, d.opts.IdleTimeout, l.cancel)
	l.rw = call.rewriter(ep)
	return l
}

// close cancels the call if it is still running, releases its connection and
// completes its result. It is idempotent.
func (l *leg) close() {
	if l.closed {
		return
	}
	l.closed = true
	l.wd.stop()
	l.cancel(nil)
	if l.resp != nil {
		_ = l.resp.Body.Close()
	}
	l.held = nil
	end := time.Now()
	switch {
	case l.lost && l.ready:
		end = l.lostAt
	case !l.ready && !l.openReturned.IsZero():
		end = l.openReturned
	}
	l.res.duration = end.Sub(l.res.start)
	// Providers echo keys in error messages; none may leave the edge.
	l.res.errText = redact(l.res.errText, l.secret)
	if l.res.final != nil {
		l.res.final.Message = redact(l.res.final.Message, l.secret)
	}
}

// cancelledByUs reports whether the leg's context ended because the client
// left or the leg lost a hedge, rather than because of a deadline, and
// records it as cancelled if so.
func (l *leg) cancelledByUs(ctx context.Context) bool {
	switch {
	case ctx.Err() != nil:
		l.res.fail(switchboardv1.Outcome_OUTCOME_CANCELLED, "cancelled: client went away", "client went away")
	case errors.Is(context.Cause(l.ctx), errHedgeLost):
		l.lostRace()
	default:
		return false
	}
	return true
}

// lostRace records the leg as the loser of a hedge.
func (l *leg) lostRace() {
	l.res.fail(switchboardv1.Outcome_OUTCOME_CANCELLED, "cancelled: hedge lost", "hedge lost: "+errHedgeLost.Error())
}

// open sends the request and reads the answer up to its first token (for a
// non-streamed request, the whole answer), holding back what it read. It
// reports whether the leg is ready to be committed; when it is not, l.res
// says why the call failed.
func (d *Dispatcher) open(ctx context.Context, call Call, l *leg) bool {
	if l.credErr != nil {
		// The endpoint is misconfigured for this edge (or the decider's
		// answer was tampered with): nothing is sent.
		l.res.fail(switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, "endpoint credential refused by this edge",
			"endpoint credential refused: "+l.credErr.Error())
		return false
	}
	body, err := call.Body(l.ep.GetUpstreamModel())
	if err != nil {
		l.res.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "could not build the request", err.Error())
		return false
	}
	req, err := http.NewRequestWithContext(l.ctx, http.MethodPost, strings.TrimSuffix(l.ep.GetBaseUrl(), "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		l.res.fail(switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, "invalid endpoint address", "invalid endpoint address")
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.opts.UserAgent)
	if call.Stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if l.secret != "" {
		req.Header.Set("Authorization", "Bearer "+l.secret)
	}

	resp, err := d.opts.Client.Do(req) //nolint:bodyclose // the leg owns resp and closes its body when it ends
	if err != nil {
		d.failTransport(ctx, l, err, false)
		return false
	}
	l.resp = resp
	l.res.status = resp.StatusCode
	l.res.headers = rateLimitHeaders(resp.Header)
	l.res.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		d.failStatus(ctx, l, resp)
		return false
	}
	if call.Stream {
		return d.openStream(ctx, l)
	}
	return d.openPlain(ctx, l)
}

// failTransport classifies an error reading from the provider: the client
// leaving, a lost hedge, one of our deadlines, or the provider's connection
// failing.
func (d *Dispatcher) failTransport(ctx context.Context, l *leg, err error, started bool) {
	cause := context.Cause(l.ctx)
	if l.cancelledByUs(ctx) {
		return
	}
	switch {
	case errors.Is(cause, errFirstTokenTimeout):
		l.res.fail(switchboardv1.Outcome_OUTCOME_TIMEOUT,
			fmt.Sprintf("no first token within %s", d.opts.FirstTokenTimeout), cause.Error())
	case errors.Is(cause, errIdleTimeout):
		l.res.fail(switchboardv1.Outcome_OUTCOME_TIMEOUT,
			fmt.Sprintf("stream idle for %s", d.opts.IdleTimeout), cause.Error())
	case started:
		l.res.fail(switchboardv1.Outcome_OUTCOME_DROPPED, "connection dropped", transportText(err))
	default:
		l.res.fail(switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, "connection failed", transportText(err))
	}
}

// failStatus handles a non-2xx answer. 429 and 5xx are the provider's own
// trouble and worth another provider. So are 401, 403 and 404: they mean this
// edge's credential or model mapping for that provider is wrong, which the
// client can neither fix nor should be told as its own error. Any other 4xx
// is about the request itself, and goes back to the client unchanged.
func (d *Dispatcher) failStatus(ctx context.Context, l *leg, resp *http.Response) {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	if err != nil && (ctx.Err() != nil || context.Cause(l.ctx) != nil) {
		d.failTransport(ctx, l, err, true)
		return
	}
	pe := rewrite.ParseError(raw)
	msg := pe.Message
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	detail := fmt.Sprintf("HTTP %d: %s", resp.StatusCode, truncate(msg, maxErrorText))
	code := resp.StatusCode
	switch {
	case code == http.StatusTooManyRequests:
		l.res.fail(switchboardv1.Outcome_OUTCOME_RATE_LIMITED, "rate limited (HTTP 429)", detail)
	case code >= 500:
		l.res.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, fmt.Sprintf("HTTP %d", code), detail)
	case code >= 400:
		l.res.fail(switchboardv1.Outcome_OUTCOME_CLIENT_ERROR, fmt.Sprintf("HTTP %d", code), detail)
		if code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusNotFound || code == http.StatusRequestTimeout {
			return
		}
		typ := pe.Type
		if typ == "" {
			typ = "invalid_request_error"
		}
		l.res.final = &Failure{Status: code, Type: typ, Code: pe.Code, Param: pe.Param, Message: truncate(msg, 4*maxErrorText)}
	default:
		l.res.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, fmt.Sprintf("unexpected HTTP %d", code), detail)
	}
}

// openPlain reads a non-streamed answer whole; its TTFT is the time to the
// response headers, the first moment the provider committed to an answer.
func (d *Dispatcher) openPlain(ctx context.Context, l *leg) bool {
	l.res.ttft, l.res.hasTTFT = time.Since(l.res.start), true
	l.wd.started()
	raw, err := io.ReadAll(io.LimitReader(watchedReader{r: l.resp.Body, wd: l.wd}, maxResponseBytes+1))
	if err != nil {
		d.failTransport(ctx, l, err, true)
		return false
	}
	if len(raw) > maxResponseBytes {
		l.res.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "answer too large", fmt.Sprintf("answer over %d bytes", maxResponseBytes))
		return false
	}
	out, info, err := l.rw.Rewrite(raw)
	switch {
	case err != nil:
		l.res.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "malformed answer", err.Error())
		return false
	case info.ErrMsg != "":
		l.res.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, "provider sent an error", truncate(info.ErrMsg, maxErrorText))
		return false
	}
	l.res.usage = info.Usage
	l.held, l.heldText, l.ended = [][]byte{out}, info.TextBytes, true
	return true
}

// openStream reads a stream until its first token, holding back every chunk
// before it: until then, nothing has reached the client.
func (d *Dispatcher) openStream(ctx context.Context, l *leg) bool {
	l.rd = sse.NewReader(watchedReader{r: l.resp.Body, wd: l.wd}, 0)
	for {
		out, info, st := d.step(ctx, l)
		switch st {
		case stepFail:
			return false
		case stepEnd:
			// A complete answer without a token (an empty reply) is still
			// the provider's answer.
			return true
		}
		if out != nil {
			l.held = append(l.held, out)
			l.heldBytes += len(out)
			l.heldText += info.TextBytes
		}
		if info.Token || l.heldBytes > maxHeldBytes {
			// From here on, the idle timeout guards the stream.
			l.wd.started()
			return true
		}
	}
}

type stepResult int

const (
	stepChunk stepResult = iota // a chunk was read
	stepEnd                     // the answer is complete
	stepFail                    // the stream failed; l.res says why
)

// step reads and rewrites one stream event.
func (d *Dispatcher) step(ctx context.Context, l *leg) ([]byte, rewrite.Info, stepResult) {
	data, err := l.rd.Next()
	if err != nil {
		if errors.Is(err, io.EOF) && l.sawFinish {
			// Some providers close after the last chunk without [DONE].
			l.ended = true
			return nil, rewrite.Info{}, stepEnd
		}
		switch {
		case errors.Is(err, sse.ErrEventTooLarge):
			l.res.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "malformed stream", err.Error())
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			if !l.cancelledByUs(ctx) {
				l.res.fail(switchboardv1.Outcome_OUTCOME_DROPPED, "stream ended early", "stream ended before [DONE]")
			}
		default:
			d.failTransport(ctx, l, err, true)
		}
		return nil, rewrite.Info{}, stepFail
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		l.ended = true
		return nil, rewrite.Info{}, stepEnd
	}
	out, info, err := l.rw.Rewrite(data)
	if err != nil {
		l.res.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "malformed stream chunk", err.Error())
		return nil, info, stepFail
	}
	if info.ErrMsg != "" {
		l.res.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, "provider sent an error", truncate(info.ErrMsg, maxErrorText))
		return nil, info, stepFail
	}
	if info.Usage != nil {
		l.res.usage = info.Usage
	}
	l.sawFinish = l.sawFinish || info.Finish
	if info.Token && !l.res.hasTTFT {
		l.res.ttft, l.res.hasTTFT = time.Since(l.res.start), true
	}
	return out, info, stepChunk
}

// deliver commits a ready leg to the client: its headers and what it held,
// then the rest of the stream. Once it starts, no other endpoint can be tried;
// a stream that breaks ends with an error event and no [DONE].
func (d *Dispatcher) deliver(ctx context.Context, w http.ResponseWriter, call Call, l *leg) {
	l.res.committed = true
	l.wd.started()
	setAnswerHeaders(w, l.ep, call.Stream)
	l.res.committedAt = time.Now()
	rc := http.NewResponseController(w)
	// Every write has a deadline, so a client that stops reading cannot
	// hold the call (and the provider's connection) forever. The deadline
	// is the connection's: clear it for the next request on it.
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	deadline := func() { _ = rc.SetWriteDeadline(time.Now().Add(d.opts.WriteTimeout)) }
	if !call.Stream {
		deadline()
		if _, err := w.Write(l.held[0]); err != nil {
			// The provider did its part; the report is about the provider.
			l.res.writeFailed = true
			d.log.Debug("client write failed", "request_id", call.RequestID, "error", err)
		} else {
			l.res.delivered = l.heldText
		}
		l.held = nil
		l.res.outcome = switchboardv1.Outcome_OUTCOME_OK
		return
	}

	var writeErr error
	send := func(events ...[]byte) bool {
		// The provider's idle clock stops while the client is written to.
		l.wd.pause()
		defer l.wd.resume()
		deadline()
		for _, e := range events {
			buf := make([]byte, 0, len(e)+8)
			buf = append(buf, "data: "...)
			buf = append(buf, e...)
			buf = append(buf, "\n\n"...)
			if _, writeErr = w.Write(buf); writeErr != nil {
				return false
			}
		}
		writeErr = rc.Flush()
		return writeErr == nil
	}
	clientGone := func() {
		l.res.writeFailed = true
		if errors.Is(writeErr, os.ErrDeadlineExceeded) {
			l.res.fail(switchboardv1.Outcome_OUTCOME_CANCELLED, "cancelled: client stopped reading",
				fmt.Sprintf("client stopped reading (no write progress in %s)", d.opts.WriteTimeout))
			return
		}
		l.res.fail(switchboardv1.Outcome_OUTCOME_CANCELLED, "cancelled: client went away", "client went away")
	}
	ok := send(l.held...)
	l.held = nil
	if !ok {
		clientGone()
		return
	}
	l.res.delivered = l.heldText
	for !l.ended {
		out, info, st := d.step(ctx, l)
		if st == stepFail {
			if ctx.Err() == nil {
				// The client gets an error event and no [DONE], so it
				// cannot mistake a truncated answer for a complete one.
				ev, _ := json.Marshal(map[string]any{"error": map[string]any{
					"message": "the provider's stream was interrupted: " + l.res.summary,
					"type":    "upstream_error",
					"code":    "stream_interrupted",
				}})
				send(ev)
			}
			return
		}
		if out == nil {
			continue
		}
		if !send(out) {
			clientGone()
			return
		}
		l.res.delivered += info.TextBytes
	}
	if call.IncludeUsage && l.res.usage == nil {
		// The client asked for usage and the provider sent none: it gets
		// the estimate it is billed for.
		if !send(call.estimatedUsageChunk(l)) {
			clientGone()
			return
		}
	}
	if !send([]byte("[DONE]")) {
		clientGone()
		return
	}
	l.res.outcome = switchboardv1.Outcome_OUTCOME_OK
}

// setAnswerHeaders writes the status line of a successful answer. It is
// called only once the answer is known to be good, so that until then the
// attempt can still be abandoned for another endpoint.
func setAnswerHeaders(w http.ResponseWriter, ep *switchboardv1.Endpoint, stream bool) {
	h := w.Header()
	if stream {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		// Stops nginx-style proxies in front of the edge from buffering the stream.
		h.Set("X-Accel-Buffering", "no")
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("X-Switchboard-Provider", ep.GetProvider())
	w.WriteHeader(http.StatusOK)
}
