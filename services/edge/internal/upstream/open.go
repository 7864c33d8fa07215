package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/failclass"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
	"github.com/switchboard-ai/switchboard/services/edge/internal/sse"
)

// Open sends the request and reads the answer up to its first token (for a
// non-streamed request, the whole answer), holding back what it read. It
// reports whether the leg is ready to be committed; when it is not, l.Result
// says why the call failed.
func (l *Leg) Open(ctx context.Context) bool {
	if l.credErr != nil {
		// The endpoint is misconfigured for this edge (or the decider's
		// answer was tampered with): nothing is sent.
		l.Result.fail(switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, "endpoint credential refused by this edge",
			"endpoint credential refused: "+l.credErr.Error())
		return false
	}
	var body []byte
	var err error
	target := strings.TrimSuffix(l.Endpoint.GetBaseUrl(), "/") + "/chat/completions"
	if l.messagesAPI() {
		body, target, err = l.messagesRequest()
	} else {
		body, err = l.req.Body(l.Endpoint)
	}
	if err != nil {
		l.Result.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "could not build the request", err.Error())
		return false
	}
	req, err := http.NewRequestWithContext(l.ctx, http.MethodPost, target, bytes.NewReader(body)) //nolint:contextcheck // the leg's own context, derived from the client's in NewLeg
	if err != nil {
		l.Result.fail(switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, "invalid endpoint address", "invalid endpoint address")
		return false
	}
	// What Set does, with the values in one array rather than one each.
	v := [...]string{"application/json", l.c.opts.UserAgent, "application/json", ""}
	vals := v[:]
	if l.req.Stream {
		vals[2] = "text/event-stream"
	}
	req.Header["Content-Type"] = vals[0:1:1]
	req.Header["User-Agent"] = vals[1:2:2]
	req.Header["Accept"] = vals[2:3:3]
	if l.secret != "" {
		vals[3] = "Bearer " + l.secret
		req.Header["Authorization"] = vals[3:4:4]
	}
	if l.messagesAPI() {
		l.messagesHeaders(req.Header)
	}

	resp, err := l.c.opts.Client.Do(req) //nolint:bodyclose // the leg owns resp and closes its body when it ends
	if err != nil {
		l.failTransport(ctx, err, false)
		return false
	}
	l.resp = resp
	l.Result.Status = resp.StatusCode
	l.Result.Headers = rateLimitHeaders(resp.Header)
	l.Result.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		l.failStatus(ctx, resp)
		return false
	}
	if l.req.Stream {
		return l.openStream(ctx)
	}
	return l.openPlain(ctx)
}

// failTransport classifies an error reading from the provider: the client
// leaving, a lost hedge, one of our deadlines, or the provider's connection
// failing.
func (l *Leg) failTransport(ctx context.Context, err error, started bool) {
	cause := context.Cause(l.ctx) //nolint:contextcheck // the leg's own context, derived from the client's in NewLeg
	if l.cancelledByUs(ctx) {
		return
	}
	switch {
	case errors.Is(cause, errFirstTokenTimeout):
		l.Result.fail(switchboardv1.Outcome_OUTCOME_TIMEOUT,
			fmt.Sprintf("no first token within %s", l.c.opts.FirstTokenTimeout), cause.Error())
	case errors.Is(cause, errIdleTimeout):
		l.Result.fail(switchboardv1.Outcome_OUTCOME_TIMEOUT,
			fmt.Sprintf("stream idle for %s", l.c.opts.IdleTimeout), cause.Error())
	case started:
		l.Result.fail(switchboardv1.Outcome_OUTCOME_DROPPED, "connection dropped", transportText(err))
	default:
		l.Result.fail(switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, "connection failed", transportText(err))
	}
}

// failStatus handles a non-2xx answer, classified by pkg/failclass from its
// status and the error code of its body. 429 and 5xx are the provider's own
// trouble and worth another provider; a 429 whose code names a spend limit
// or an exhausted quota is the provider account's policy, worth another
// provider but never the same one again. So are 401, 402, 403 and 404: they
// mean this edge's credential, account or model mapping for that provider
// is wrong, which the client can neither fix nor should be told as its own
// error. Any other 4xx is about the request itself, and goes back to the
// client unchanged.
func (l *Leg) failStatus(ctx context.Context, resp *http.Response) {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	if err != nil && (ctx.Err() != nil || context.Cause(l.ctx) != nil) { //nolint:contextcheck // the leg's own context, derived from the client's in NewLeg
		l.failTransport(ctx, err, true)
		return
	}
	pe := rewrite.ParseError(raw)
	msg := pe.Message
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	detail := fmt.Sprintf("HTTP %d: %s", resp.StatusCode, truncate(msg, maxErrorText))
	code := resp.StatusCode
	l.Result.ProviderErrorCode = failclass.ErrorCode(raw)
	l.Result.Failure = failclass.Classify(code, l.Result.ProviderErrorCode)
	switch {
	case code == http.StatusTooManyRequests && l.Result.Failure == failclass.NonRetryablePolicy:
		l.Result.fail(switchboardv1.Outcome_OUTCOME_RATE_LIMITED,
			fmt.Sprintf("provider account refused (HTTP 429 %s)", l.Result.ProviderErrorCode), detail)
	case code == http.StatusTooManyRequests:
		l.Result.fail(switchboardv1.Outcome_OUTCOME_RATE_LIMITED, "rate limited (HTTP 429)", detail)
	case code >= 500:
		l.Result.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, fmt.Sprintf("HTTP %d", code), detail)
	case code >= 400:
		l.Result.fail(switchboardv1.Outcome_OUTCOME_CLIENT_ERROR, fmt.Sprintf("HTTP %d", code), detail)
		if l.Result.Failure != failclass.NonRetryableRequest {
			// The endpoint's credential, account or mapping (401, 402, 403,
			// 404, a spend limit), or the provider's timeout (408): another
			// provider may serve.
			return
		}
		typ := pe.Type
		if typ == "" {
			typ = "invalid_request_error"
		}
		l.Result.Rejection = &Rejection{Status: code, Type: typ, Code: pe.Code, Param: pe.Param, Message: truncate(msg, 4*maxErrorText)}
	default:
		l.Result.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, fmt.Sprintf("unexpected HTTP %d", code), detail)
	}
}

// openPlain reads a non-streamed answer whole; its TTFT is the time to the
// response headers, the first moment the provider committed to an answer.
func (l *Leg) openPlain(ctx context.Context) bool {
	l.Result.TTFT, l.Result.HasTTFT = time.Since(l.Result.Start), true
	l.wd.started()
	raw, err := io.ReadAll(io.LimitReader(watchedReader{r: l.resp.Body, wd: l.wd}, maxResponseBytes+1))
	if err != nil {
		l.failTransport(ctx, err, true)
		return false
	}
	if len(raw) > maxResponseBytes {
		l.Result.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "answer too large", fmt.Sprintf("answer over %d bytes", maxResponseBytes))
		return false
	}
	var out []byte
	var info rewrite.Info
	if l.messagesAPI() {
		out, info, err = l.plainMessages(raw)
	} else {
		out, info, err = l.rw.Rewrite(raw)
	}
	switch {
	case err != nil:
		l.Result.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "malformed answer", err.Error())
		return false
	case info.ErrMsg != "":
		l.Result.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, "provider sent an error", truncate(info.ErrMsg, maxErrorText))
		return false
	}
	l.Result.Usage = info.Usage
	l.sawFinish = info.Finish
	if l.relay != nil {
		l.observe(nil, info) // a Messages body: the checks read chat completions
	} else {
		l.observe(out, info)
	}
	l.held, l.heldText, l.ended = out, info.TextBytes, true
	return true
}

// openStream reads a stream until its first token, holding back every chunk
// before it, framed as the client's events: until then, nothing has reached
// the client.
func (l *Leg) openStream(ctx context.Context) bool {
	l.rd = sse.NewReader(watchedReader{r: l.resp.Body, wd: l.wd}, 0)
	l.held = getBuffer()
	for {
		before := len(l.held)
		var info rewrite.Info
		var st stepResult
		l.held, info, st = l.step(ctx, l.held)
		switch st {
		case stepFail:
			return false
		case stepEnd:
			// A complete answer without a token (an empty reply) is still
			// the provider's answer.
			return true
		}
		if len(l.held) > before {
			l.heldBytes += len(l.held) - before - len(eventPrefix) - len(eventSuffix)
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
	stepFail                    // the stream failed; l.Result says why
)

// Framing of one server-sent event for the client.
const (
	eventPrefix = "data: "
	eventSuffix = "\n\n"
)

// appendEvent appends data framed as one server-sent event.
func appendEvent(dst, data []byte) []byte {
	dst = append(dst, eventPrefix...)
	dst = append(dst, data...)
	return append(dst, eventSuffix...)
}

// step reads and rewrites one stream event, appending it to dst framed as
// the client's event unless the client does not get it (dst then comes
// back as it was). The provider's event is rewritten straight into dst:
// no copy of it is made on the way.
func (l *Leg) step(ctx context.Context, dst []byte) ([]byte, rewrite.Info, stepResult) {
	data, err := l.rd.Next()
	if err != nil {
		if errors.Is(err, io.EOF) && l.sawFinish {
			// Some providers close after the last chunk without [DONE].
			l.ended = true
			return dst, rewrite.Info{}, stepEnd
		}
		switch {
		case errors.Is(err, sse.ErrEventTooLarge):
			l.Result.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "malformed stream", err.Error())
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			if !l.cancelledByUs(ctx) {
				l.Result.fail(switchboardv1.Outcome_OUTCOME_DROPPED, "stream ended early", "stream ended before [DONE]")
			}
		default:
			l.failTransport(ctx, err, true)
		}
		return dst, rewrite.Info{}, stepFail
	}
	if l.messagesAPI() {
		return l.stepMessages(dst, data)
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		l.ended = true
		return dst, rewrite.Info{}, stepEnd
	}
	return l.chunk(dst, data)
}

// chunk rewrites one chat chunk, appending it to dst framed as the
// client's event unless the client does not get it.
func (l *Leg) chunk(dst, data []byte) ([]byte, rewrite.Info, stepResult) {
	start := len(dst)
	out, info, forward, err := l.rw.Append(append(dst, eventPrefix...), data)
	if err != nil {
		l.Result.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "malformed stream chunk", err.Error())
		return dst[:start], info, stepFail
	}
	if info.ErrMsg != "" {
		l.Result.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, "provider sent an error", truncate(info.ErrMsg, maxErrorText))
		return out[:start], info, stepFail
	}
	if forward {
		// The chunk as the client gets it, unframed, for the quality checks.
		l.observe(out[start+len(eventPrefix):], info)
		out = append(out, eventSuffix...)
	} else {
		out = out[:start]
	}
	l.took(info)
	return out, info, stepChunk
}

// took records what one chunk of the answer said: its usage, its finish,
// its first token's time.
func (l *Leg) took(info rewrite.Info) {
	if info.Usage != nil {
		l.Result.Usage = info.Usage
	}
	l.sawFinish = l.sawFinish || info.Finish
	if info.Token && !l.Result.HasTTFT {
		l.Result.TTFT, l.Result.HasTTFT = time.Since(l.Result.Start), true
	}
}
