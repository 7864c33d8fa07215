package upstream

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/failclass"
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/anthropic"
	"github.com/switchboard-ai/switchboard/services/edge/internal/quality"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
	"github.com/switchboard-ai/switchboard/services/edge/internal/sse"
)

// errHedgeLost cancels the leg of a hedged request that did not produce the
// first token.
var errHedgeLost = errors.New("the other endpoint answered first")

// Result is how one call to one endpoint went; complete once the leg is
// closed.
type Result struct {
	// Outcome is how the call ended.
	Outcome switchboardv1.Outcome
	// Status is the provider's HTTP status, 0 when none arrived.
	Status int
	// RetryAfter is the provider's Retry-After, 0 when none.
	RetryAfter time.Duration
	// Headers are the provider's rate-limit headers (see rateLimitHeaders).
	Headers []*switchboardv1.Header
	// Start is when the call was prepared, its first-token deadline's start.
	Start time.Time
	// TTFT is the time to the first token, set when HasTTFT.
	TTFT time.Duration
	// HasTTFT is false when no token arrived.
	HasTTFT bool
	// Duration is how long the call lasted.
	Duration time.Duration
	// Usage is the provider's usage, nil when it reported none.
	Usage *pricing.Usage
	// Committed is set once the answer was chosen for the client and its
	// headers written: no retry after that.
	Committed bool
	// CommittedAt is when the first token (or the non-streamed answer) was
	// written to the client.
	CommittedAt time.Time
	// Delivered is the size of the generated text written to the client.
	Delivered int64
	// WriteFailed is set when the client could not be written to.
	WriteFailed bool
	// Rejection is set when the provider rejected the request itself, which
	// another provider would reject too; it is passed to the client as is.
	Rejection *Rejection
	// Failure classifies a non-2xx answer (pkg/failclass): a rate limit, an
	// overload, the provider account's policy (a spend limit) or the
	// request itself. None for a call that got no HTTP error answer: see
	// [Result.Class].
	Failure failclass.Class
	// ProviderErrorCode is the error code the provider's error body named
	// (error.details.error_code, error.code or error.type), "" for none.
	ProviderErrorCode string
	// Summary is the short outcome shown to the client among the attempts.
	Summary string
	// ErrText is the detailed, redacted failure for reports and logs.
	ErrText string
	// QualityFailures name the answer-quality checks a completed answer
	// (Outcome OK) failed; nil when it passed them all.
	QualityFailures []string
}

// Rejection is a provider's refusal of the request itself (a 4xx other than
// the ones about the edge's credential or model mapping), in the terms of
// an OpenAI error. It never holds credentials.
type Rejection struct {
	// Status is the provider's HTTP status.
	Status int
	// Type, Code and Param are the provider's OpenAI error fields.
	Type, Code, Param string
	// Message is the provider's message, truncated and redacted.
	Message string
}

// Class is how the call failed, for a retry: None when it succeeded, was
// cancelled by its own caller, or failed after its answer reached the
// client (it is not retried then); the HTTP error answer's class; else
// (no connection, no first token in time, a malformed or failed start of
// the answer) a retryable overload, to be tried on another endpoint.
func (r *Result) Class() failclass.Class {
	switch {
	case r.Committed, r.Outcome == switchboardv1.Outcome_OUTCOME_OK, r.Outcome == switchboardv1.Outcome_OUTCOME_CANCELLED,
		r.Outcome == switchboardv1.Outcome_OUTCOME_UNSPECIFIED:
		return failclass.None
	case r.Failure != failclass.None:
		return r.Failure
	}
	return failclass.Transport()
}

func (r *Result) fail(outcome switchboardv1.Outcome, summary, detail string) {
	r.Outcome, r.Summary, r.ErrText = outcome, summary, detail
}

// Leg is one call to one endpoint. It is opened up to its first token, with
// what it read held back, so that until it is committed to the client it can
// still be abandoned for another endpoint or lose a hedge race. Open may run
// on its own goroutine; everything else runs on the request's.
type Leg struct {
	// Endpoint is the endpoint called.
	Endpoint *switchboardv1.Endpoint
	// Result is how the call went.
	Result Result

	c   *Caller
	req Request
	// lost is set when the leg was cancelled because the other leg of a
	// hedge produced the first token.
	lost bool
	// ready is Open's answer, as recorded by Opened: the leg produced its
	// first token (or a complete answer) and can be committed.
	ready bool
	// openReturned is when Open returned on its goroutine; lostAt is when
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
	// relay reads an anthropic endpoint's answer to a Messages client,
	// toChat translates one for any other client into chat chunks
	// (chunks, reused from event to event); both nil for an openai
	// endpoint.
	relay  *anthropic.Relay
	toChat *anthropic.ChatStream
	chunks [][]byte

	// q checks the answer's quality as it is read; qc is its chunk,
	// reused so that checking allocates nothing per chunk.
	q  *quality.Run
	qc quality.Chunk

	// held is what was read before the leg was committed: a stream's
	// chunks, framed as the client's events, or a non-streamed answer.
	held      []byte
	heldBytes int
	heldText  int64
	// ended is set once the provider's answer is complete.
	ended     bool
	sawFinish bool
	closed    bool
}

// NewLeg prepares a call of req to ep. Its context derives from ctx, the
// client's, so a client that goes away cancels the upstream request and
// closes its connection. The first-token deadline starts now.
func (c *Caller) NewLeg(ctx context.Context, req Request, ep *switchboardv1.Endpoint) *Leg {
	l := &Leg{Endpoint: ep, c: c, req: req, rw: req.Rewriter}
	qr := req.Quality
	qr.Stream = req.Stream
	l.q = quality.Start(qr, quality.Default)
	l.Result.Start = time.Now()
	if env := ep.GetApiKeyEnv(); env != "" {
		target, err := url.Parse(ep.GetBaseUrl())
		if err == nil {
			l.secret, err = c.opts.Credentials.Lookup(env, target)
		}
		l.credErr = err
	}
	l.ctx, l.cancel = context.WithCancelCause(ctx)
	l.wd = newWatchdog(c.opts.FirstTokenTimeout, c.opts.IdleTimeout, l.cancel)
	return l
}

// Opened records Open's answer, when Open ran on its own goroutine: the
// leg is ready to be committed, or it ended then.
func (l *Leg) Opened(ready bool) {
	l.ready, l.openReturned = ready, time.Now()
}

// Ready is Open's answer as recorded by Opened.
func (l *Leg) Ready() bool { return l.ready }

// Lose cancels a leg because the other leg of a hedge produced the first
// token.
func (l *Leg) Lose() {
	l.lost, l.lostAt = true, time.Now()
	l.cancel(errHedgeLost)
}

// Lost reports whether the leg was cancelled by Lose.
func (l *Leg) Lost() bool { return l.lost }

// Close cancels the call if it is still running, releases its connection and
// completes its result. It is idempotent.
func (l *Leg) Close() {
	if l.closed {
		return
	}
	l.closed = true
	l.wd.stop()
	l.cancel(nil)
	if l.resp != nil {
		_ = l.resp.Body.Close()
	}
	if l.rd != nil {
		// Open has returned (Close is never called before it does) and
		// the stream is closed: nothing reads the reader any more.
		l.rd.Release()
		l.rd = nil
	}
	putBuffer(l.held)
	l.held = nil
	l.rw.Release()
	end := time.Now()
	switch {
	case l.lost && l.ready:
		end = l.lostAt
	case !l.ready && !l.openReturned.IsZero():
		end = l.openReturned
	}
	l.Result.Duration = end.Sub(l.Result.Start)
	// Providers echo keys in error messages; none may leave the edge.
	l.Result.ErrText = redact(l.Result.ErrText, l.secret)
	if l.Result.Rejection != nil {
		l.Result.Rejection.Message = redact(l.Result.Rejection.Message, l.secret)
	}
}

// observe passes one chunk of the answer, as the client gets it, to the
// quality checks.
func (l *Leg) observe(out []byte, info rewrite.Info) {
	l.qc = quality.Chunk{Data: out, Finish: info.Finish, TextBytes: info.TextBytes}
	l.q.Observe(&l.qc)
	l.qc.Data = nil
}

// completed records a leg whose whole answer reached the client, with the
// quality checks it failed.
func (l *Leg) completed() {
	l.Result.Outcome = switchboardv1.Outcome_OUTCOME_OK
	l.Result.QualityFailures = l.q.Failures(&quality.End{Finished: l.sawFinish, Usage: l.Result.Usage})
}

// cancelledByUs reports whether the leg's context ended because the client
// left or the leg lost a hedge, rather than because of a deadline, and
// records it as cancelled if so.
func (l *Leg) cancelledByUs(ctx context.Context) bool {
	switch {
	case ctx.Err() != nil:
		l.Result.fail(switchboardv1.Outcome_OUTCOME_CANCELLED, "cancelled: client went away", "client went away")
	case errors.Is(context.Cause(l.ctx), errHedgeLost): //nolint:contextcheck // the leg's own context, derived from the client's in NewLeg
		l.LostRace()
	default:
		return false
	}
	return true
}

// LostRace records the leg as the loser of a hedge.
func (l *Leg) LostRace() {
	l.Result.fail(switchboardv1.Outcome_OUTCOME_CANCELLED, "cancelled: hedge lost", "hedge lost: "+errHedgeLost.Error())
}
