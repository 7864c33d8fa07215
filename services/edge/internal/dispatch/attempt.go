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
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// maxResponseBytes bounds a non-streamed answer held in memory.
const maxResponseBytes = 64 << 20

// maxErrorBodyBytes bounds how much of a provider's error answer is read.
const maxErrorBodyBytes = 64 << 10

// maxHeldBytes bounds the chunks held back before the first token; past it
// the answer is committed anyway rather than buffered without end.
const maxHeldBytes = 1 << 20

// maxErrorText bounds provider text copied into reports and client errors.
const maxErrorText = 512

var (
	errFirstTokenTimeout = errors.New("no first token before the deadline")
	errIdleTimeout       = errors.New("stream idle for too long")
)

// result is how one attempt ended.
type result struct {
	outcome    switchboardv1.Outcome
	status     int
	retryAfter time.Duration
	headers    []*switchboardv1.Header
	start      time.Time
	ttft       time.Duration
	hasTTFT    bool // false when no token arrived
	duration   time.Duration
	usage      *usage
	// committed is set once any byte reached the client: no retry after that.
	committed bool
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

// attempt sends the request to one endpoint and, if it answers well, writes
// the answer to w.
func (d *Dispatcher) attempt(ctx context.Context, w http.ResponseWriter, call Call, ep *switchboardv1.Endpoint) (res result) {
	res.start = time.Now()
	defer func() { res.duration = time.Since(res.start) }()
	secret := ""
	if env := ep.GetApiKeyEnv(); env != "" {
		secret = d.opts.Getenv(env)
	}
	defer func() {
		// Providers echo keys in error messages; none may leave the edge.
		res.errText = redact(res.errText, secret)
		if res.final != nil {
			res.final.Message = redact(res.final.Message, secret)
		}
	}()

	body, err := call.Body(ep.GetUpstreamModel())
	if err != nil {
		res.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "could not build the request", err.Error())
		return res
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wd := newWatchdog(d.opts.FirstTokenTimeout, d.opts.IdleTimeout, cancel)
	defer wd.stop()

	req, err := http.NewRequestWithContext(actx, http.MethodPost, strings.TrimSuffix(ep.GetBaseUrl(), "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		res.fail(switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, "invalid endpoint address", "invalid endpoint address")
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.opts.UserAgent)
	if call.Stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}

	resp, err := d.opts.Client.Do(req)
	if err != nil {
		d.failTransport(ctx, actx, &res, err, false)
		return res
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	res.headers = rateLimitHeaders(resp.Header)
	res.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		d.failStatus(ctx, actx, &res, resp, wd)
		return res
	}
	if call.Stream {
		d.stream(ctx, actx, w, call, ep, resp, wd, &res)
	} else {
		d.nonStream(ctx, actx, w, call, ep, resp, wd, &res)
	}
	return res
}

// failTransport classifies an error reading from the provider: the client
// leaving, one of our deadlines, or the provider's connection failing.
func (d *Dispatcher) failTransport(ctx, actx context.Context, res *result, err error, started bool) {
	cause := context.Cause(actx)
	switch {
	case ctx.Err() != nil:
		res.fail(switchboardv1.Outcome_OUTCOME_CANCELLED, "cancelled", "client went away")
	case errors.Is(cause, errFirstTokenTimeout):
		res.fail(switchboardv1.Outcome_OUTCOME_TIMEOUT,
			fmt.Sprintf("no first token within %s", d.opts.FirstTokenTimeout), cause.Error())
	case errors.Is(cause, errIdleTimeout):
		res.fail(switchboardv1.Outcome_OUTCOME_TIMEOUT,
			fmt.Sprintf("stream idle for %s", d.opts.IdleTimeout), cause.Error())
	case started:
		res.fail(switchboardv1.Outcome_OUTCOME_DROPPED, "connection dropped", transportText(err))
	default:
		res.fail(switchboardv1.Outcome_OUTCOME_CONNECT_ERROR, "connection failed", transportText(err))
	}
}

// failStatus handles a non-2xx answer. 429 and 5xx are the provider's own
// trouble and worth another provider. So are 401, 403 and 404: they mean this
// edge's credential or model mapping for that provider is wrong, which the
// client can neither fix nor should be told as its own error. Any other 4xx
// is about the request itself, and goes back to the client unchanged.
func (d *Dispatcher) failStatus(ctx, actx context.Context, res *result, resp *http.Response, wd *watchdog) {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	if err != nil && (ctx.Err() != nil || context.Cause(actx) != nil) {
		d.failTransport(ctx, actx, res, err, true)
		return
	}
	pe := parseProviderError(raw)
	msg := pe.Message
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	detail := fmt.Sprintf("HTTP %d: %s", resp.StatusCode, truncate(msg, maxErrorText))
	code := resp.StatusCode
	switch {
	case code == http.StatusTooManyRequests:
		res.fail(switchboardv1.Outcome_OUTCOME_RATE_LIMITED, "rate limited (HTTP 429)", detail)
	case code >= 500:
		res.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, fmt.Sprintf("HTTP %d", code), detail)
	case code >= 400:
		res.fail(switchboardv1.Outcome_OUTCOME_CLIENT_ERROR, fmt.Sprintf("HTTP %d", code), detail)
		if code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusNotFound || code == http.StatusRequestTimeout {
			return
		}
		typ := pe.Type
		if typ == "" {
			typ = "invalid_request_error"
		}
		res.final = &Failure{Status: code, Type: typ, Code: pe.Code, Param: pe.Param, Message: truncate(msg, 4*maxErrorText)}
	default:
		res.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, fmt.Sprintf("unexpected HTTP %d", code), detail)
	}
}

// providerError is the part of an OpenAI error body the edge passes on.
type providerError struct {
	Message string
	Type    string
	Code    string
	Param   string
}

func parseProviderError(raw []byte) providerError {
	var body struct {
		Error json.RawMessage `json:"error"`
		// Some providers answer {"message": ...} or {"detail": ...}.
		Message string `json:"message"`
		Detail  string `json:"detail"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return providerError{Message: strings.TrimSpace(string(raw))}
	}
	var pe providerError
	var e struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Param   string          `json:"param"`
	}
	if len(body.Error) > 0 && json.Unmarshal(body.Error, &e) == nil {
		pe = providerError{Message: e.Message, Type: e.Type, Param: e.Param}
		var s string
		if json.Unmarshal(e.Code, &s) == nil {
			pe.Code = s
		}
	} else if len(body.Error) > 0 {
		var s string
		if json.Unmarshal(body.Error, &s) == nil {
			pe.Message = s
		}
	}
	if pe.Message == "" {
		pe.Message = body.Message
	}
	if pe.Message == "" {
		pe.Message = body.Detail
	}
	return pe
}

// rateLimitHeaders keeps the provider headers the decider folds into its
// quota model: x-ratelimit-* and Retry-After, lowercased, in a stable order.
func rateLimitHeaders(h http.Header) []*switchboardv1.Header {
	var out []*switchboardv1.Header
	for name, values := range h {
		lower := strings.ToLower(name)
		if !strings.HasPrefix(lower, "x-ratelimit-") && lower != "retry-after" {
			continue
		}
		for _, v := range values {
			out = append(out, &switchboardv1.Header{Name: lower, Value: v})
		}
	}
	slices.SortFunc(out, func(a, b *switchboardv1.Header) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP date; 0 when
// absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 || secs > 86400 {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// transportText describes a transport error without the request URL, which
// may carry credentials in its query or user info.
func transportText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

func redact(s, secret string) string {
	if secret == "" || s == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[redacted]")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// watchdog cancels an attempt when the provider is too slow: first against
// the first-token deadline, then, once the answer started, against the idle
// timeout, re-armed by every read.
type watchdog struct {
	timer *time.Timer
	idle  time.Duration
	// idleMode is read by the timer's goroutine to pick the cause.
	idleMode atomic.Bool
}

func newWatchdog(first, idle time.Duration, cancel context.CancelCauseFunc) *watchdog {
	w := &watchdog{idle: idle}
	w.timer = time.AfterFunc(first, func() {
		if w.idleMode.Load() {
			cancel(errIdleTimeout)
		} else {
			cancel(errFirstTokenTimeout)
		}
	})
	return w
}

// started switches from the first-token deadline to the idle timeout.
func (w *watchdog) started() {
	if w.idleMode.CompareAndSwap(false, true) {
		w.timer.Reset(w.idle)
	}
}

// touch re-arms the idle timeout; before the first token it does nothing,
// because chunks without tokens must not extend the first-token deadline.
func (w *watchdog) touch() {
	if w.idleMode.Load() {
		w.timer.Reset(w.idle)
	}
}

func (w *watchdog) stop() { w.timer.Stop() }

// watchedReader touches the watchdog on every read that returned data.
type watchedReader struct {
	r  io.Reader
	wd *watchdog
}

// Read implements [io.Reader].
func (r watchedReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.wd.touch()
	}
	return n, err
}
