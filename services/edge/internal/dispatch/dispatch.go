// Package dispatch sends a chat request to the endpoints the decider chose,
// in order, and streams the first good answer back to the client. An attempt
// may be abandoned for the next endpoint only while nothing has reached the
// client: chunks are held back until the first one that carries a token, so a
// provider that accepts the request but never starts answering is still
// retried elsewhere (R-RETRY-1). Every attempt is reported to the decider.
//
// Time to first token (TTFT) is measured from sending the upstream request to
// receiving the first stream chunk that carries a token: a non-empty
// delta.content, delta.reasoning_content or delta.reasoning, a non-empty
// delta.tool_calls, or a finish_reason. For a non-streamed request it is the
// time to the response headers, the first moment the provider committed to an
// answer.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/services/edge/internal/cooldown"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// Reporter receives one CallReport per attempt. Report must not block: it is
// called on the request path.
type Reporter interface {
	Report(r *switchboardv1.CallReport)
}

// Options configure a Dispatcher.
type Options struct {
	// Client sends upstream requests (Required). One client shared by every
	// request keeps connections to providers warm.
	Client *http.Client
	// Getenv reads endpoint credentials by name (Optional). Defaults to os.Getenv.
	Getenv func(string) string
	// Cooldowns holds endpoints the decider benched (Optional). Defaults to none.
	Cooldowns *cooldown.Table
	// Reporter receives call reports (Optional). Defaults to dropping them.
	Reporter Reporter
	// FirstTokenTimeout is how long one attempt may take to produce its first
	// token before it counts as a timeout and the next endpoint is tried
	// (Optional). Defaults to 60s.
	FirstTokenTimeout time.Duration
	// IdleTimeout is the longest silence allowed between stream chunks once
	// the answer started (Optional). Defaults to 60s.
	IdleTimeout time.Duration
	// MaxAttempts caps the endpoints tried per request (Optional). Defaults to 4.
	MaxAttempts int
	// UserAgent is sent upstream (Optional). Defaults to "switchboard-edge".
	UserAgent string
	// Logger logs attempts (Optional). Defaults to discarding.
	Logger *slog.Logger
}

// Dispatcher runs the attempts of chat requests. It is safe for concurrent use.
type Dispatcher struct {
	opts Options
	log  *slog.Logger
}

// New returns a Dispatcher, filling in defaults.
func New(o Options) *Dispatcher {
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Cooldowns == nil {
		o.Cooldowns = cooldown.New(nil)
	}
	if o.Reporter == nil {
		o.Reporter = discardReporter{}
	}
	if o.FirstTokenTimeout <= 0 {
		o.FirstTokenTimeout = 60 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 60 * time.Second
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 4
	}
	if o.UserAgent == "" {
		o.UserAgent = "switchboard-edge"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{opts: o, log: o.Logger}
}

type discardReporter struct{}

// Report implements [Reporter.Report].
func (discardReporter) Report(*switchboardv1.CallReport) {}

// Call is one client request to serve.
type Call struct {
	// RequestID is the edge's id of the request, reported with every attempt.
	RequestID string
	// Model is the canonical model id; it replaces the provider's model name
	// in the answer, so clients see the model they asked for.
	Model string
	// TenantID is the tenant billed, from the decider's resolved identity.
	TenantID string
	// PromptTokens is the prompt estimate, reported for the size bucket.
	PromptTokens int64
	// Stream is whether the client asked for server-sent events.
	Stream bool
	// IncludeUsage is whether the client asked for the final usage chunk.
	IncludeUsage bool
	// Body builds the upstream body for one endpoint's model name.
	Body func(upstreamModel string) ([]byte, error)
	// ProbeID marks a synthetic probe; empty for client requests.
	ProbeID string
	// PromptHash is the chain hash of the whole prompt (chatreq), reported so
	// the decider learns which endpoint holds the prompt in cache.
	PromptHash uint64
}

// ErrClientGone is returned when the client went away before an answer could
// be written; there is nobody left to send an error to.
var ErrClientGone = errors.New("client went away")

// Failure is why no endpoint produced an answer, in terms the HTTP layer sends
// to the client as an OpenAI error. It never holds credentials or upstream URLs.
type Failure struct {
	// Status is the HTTP status to answer with.
	Status int
	// Type is the OpenAI error type.
	Type string
	// Code is the OpenAI error code, empty for none.
	Code string
	// Param is the offending parameter, when a provider named one.
	Param string
	// Message is written for the user.
	Message string
	// RetryAfter is the provider's Retry-After when rate limited, else 0.
	RetryAfter time.Duration
	// Provider is the provider whose answer this is, when there is one.
	Provider string
}

// Error implements [error].
func (f *Failure) Error() string { return f.Message }

// Serve tries endpoints in order until one answers and writes that answer to
// w. It returns nil once an answer (possibly ending in a stream error event)
// was written, ErrClientGone if the client left first, and a *Failure when
// every attempt failed before writing anything.
func (d *Dispatcher) Serve(ctx context.Context, w http.ResponseWriter, call Call, endpoints []*switchboardv1.Endpoint) error {
	plan := d.plan(endpoints)
	if len(plan) == 0 {
		return &Failure{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "no_available_provider",
			Message: "no provider is available for this request"}
	}
	var (
		tried []string
		last  result
	)
	for _, ep := range plan {
		res := d.attempt(ctx, w, call, ep)
		d.report(call, ep, res)
		d.logAttempt(call, ep, res)
		if res.outcome == switchboardv1.Outcome_OUTCOME_OK || res.committed {
			return nil
		}
		if ctx.Err() != nil || res.outcome == switchboardv1.Outcome_OUTCOME_CANCELLED {
			return ErrClientGone
		}
		if res.final != nil {
			res.final.Provider = ep.GetProvider()
			return res.final
		}
		tried = append(tried, ep.GetProvider()+": "+res.summary)
		last = res
	}
	f := &Failure{
		Status:  http.StatusBadGateway,
		Type:    "upstream_error",
		Code:    "upstream_error",
		Message: fmt.Sprintf("all %d attempts failed: %s", len(tried), strings.Join(tried, "; ")),
	}
	switch last.outcome {
	case switchboardv1.Outcome_OUTCOME_RATE_LIMITED:
		f.Status, f.Type, f.Code, f.RetryAfter = http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded", last.retryAfter
	case switchboardv1.Outcome_OUTCOME_TIMEOUT:
		f.Status, f.Type, f.Code = http.StatusGatewayTimeout, "timeout_error", "upstream_timeout"
	}
	return f
}

// plan lists the endpoints to try: the chosen one (even if cooling down — the
// decider chose it knowing more than this edge), then the fallbacks not
// benched and not already listed, up to MaxAttempts.
func (d *Dispatcher) plan(endpoints []*switchboardv1.Endpoint) []*switchboardv1.Endpoint {
	out := make([]*switchboardv1.Endpoint, 0, min(len(endpoints), d.opts.MaxAttempts))
	seen := make(map[string]bool, len(endpoints))
	for i, ep := range endpoints {
		if ep == nil || ep.GetBaseUrl() == "" || seen[ep.GetId()] {
			continue
		}
		if i > 0 && d.opts.Cooldowns.Active(ep.GetId()) {
			continue
		}
		seen[ep.GetId()] = true
		out = append(out, ep)
		if len(out) == d.opts.MaxAttempts {
			break
		}
	}
	return out
}

func (d *Dispatcher) logAttempt(call Call, ep *switchboardv1.Endpoint, res result) {
	level := slog.LevelDebug
	if res.outcome != switchboardv1.Outcome_OUTCOME_OK {
		level = slog.LevelWarn
	}
	d.log.Log(context.Background(), level, "upstream attempt",
		"request_id", call.RequestID,
		"probe_id", call.ProbeID,
		"endpoint", ep.GetId(),
		"outcome", res.outcome.String(),
		"http_status", res.status,
		"ttft", res.ttft,
		"duration", res.duration,
		"error", res.errText,
	)
}
