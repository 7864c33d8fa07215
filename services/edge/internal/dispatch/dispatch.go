// Package dispatch sends a chat request to the endpoints the decider chose,
// in order, and streams the first good answer back to the client. An attempt
// may be abandoned for the next endpoint only while nothing has reached the
// client: chunks are held back until the first one that carries a token, so a
// provider that accepts the request but never starts answering is still
// retried elsewhere. Every attempt is reported to the decider.
//
// A leg, one call to one endpoint with its first-token and idle deadlines,
// is the upstream package's (which also defines time to first token); what
// the provider's chunks become for the client is the rewrite package's;
// what the client is billed, the invoice package's. This package decides
// which legs run, under which reservation, and reports them.
//
// Hedging: when the decider's plan says so, a streamed
// request's first attempt runs two legs, the second on the plan's endpoint,
// started after a delay without a first token or at once, and only if the
// shared hedge budget grants it. The first leg to produce a token is
// committed to the client; the other is cancelled at that moment (its
// upstream connection closes) and reported as cancelled. A cancelled leg is
// paid from the hedge budget, estimated as its prompt at the endpoint's
// uncached input price; the client never pays for it.
//
// Admission: nothing is sent upstream without a reservation from the
// central rate-limit broker. The first endpoint runs under the one Decide
// made; every other one (a fallback, a hedge leg) is reserved first and
// skipped when the broker refuses. Each attempt's reservation is reconciled
// when its leg ends — through the Ledger, acknowledged and resent until
// applied, with what the tenant is billed for it — and declared to the
// Ledger while in use, so it stays open however long the call runs; a
// reservation granted but never used is released when the request ends.
//
// Billing: the client pays the serving endpoint's price for the usage its
// provider reported (or, without one, for an estimate of what was
// delivered), capped by the request's max_price and max_tokens (see the
// invoice package); a request every attempt failed costs nothing. The bill
// is returned as usage.cost and, with every attempt and the hedge, in the
// request's activity record.
package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/cooldown"
	"github.com/switchboard-ai/switchboard/services/edge/internal/credentials"
	"github.com/switchboard-ai/switchboard/services/edge/internal/invoice"
	"github.com/switchboard-ai/switchboard/services/edge/internal/quality"
	"github.com/switchboard-ai/switchboard/services/edge/internal/upstream"
)

// Reporter receives one CallReport per attempt and one ActivityRecord per
// client request. Its methods must not block: they are called on the request
// path.
type Reporter interface {
	Report(r *switchboardv1.CallReport)
	Activity(r *switchboardv1.ActivityRecord)
}

// Ledger carries the edge's reservations to the broker reliably: the
// reservations of calls in flight, declared so the broker keeps them open
// however long the calls run, and their reconciliations, delivered at least
// once (and applied once). The Report stream implements it. Its methods must
// not block: they are called on the request path.
type Ledger interface {
	// Hold declares a reservation in use until it is reconciled or forgotten.
	Hold(id string)
	// Applied stops declaring a reservation a Reconcile RPC closed, and
	// keeps that reconciliation, applied under the broker owner's term the
	// answer named, to send it again to a newer owner.
	Applied(r *switchboardv1.ReconcileRequest, term int64)
	// Reconcile queues a reservation's reconciliation and stops declaring it.
	Reconcile(r *switchboardv1.ReconcileRequest)
}

// HedgeBudget grants hedges from the daily budget shared by every edge;
// when it is spent, a request is served by one endpoint. The decider's client implements it.
type HedgeBudget interface {
	AcquireHedge(ctx context.Context, in *switchboardv1.AcquireHedgeRequest, opts ...grpc.CallOption) (*switchboardv1.AcquireHedgeResponse, error)
}

// Credentials gives the credential named by an endpoint for a call to
// target, "" for none, or an error when that name or that host is refused;
// an error never carries a credential. credentials.Store implements it.
type Credentials interface {
	Lookup(name string, target *url.URL) (string, error)
}

// Options configure a Dispatcher.
type Options struct {
	// Client sends upstream requests (Required). One client shared by every
	// request keeps connections to providers warm.
	Client *http.Client
	// Credentials gives the credential for an endpoint's call, or refuses
	// it (Optional). Defaults to environment variables of the provider key
	// namespace, read with Getenv.
	Credentials Credentials
	// Getenv reads endpoint credentials by name when Credentials is nil
	// (Optional). Defaults to os.Getenv.
	Getenv func(string) string
	// Cooldowns holds endpoints the decider benched (Optional). Defaults to none.
	Cooldowns *cooldown.Table
	// Reporter receives call reports and activity records (Optional).
	// Defaults to dropping them.
	Reporter Reporter
	// Ledger declares held reservations and delivers their reconciliations
	// (Optional; the edge always sets it). Defaults to dropping them: a used
	// reservation then expires at its TTL, which can only under-admit.
	Ledger Ledger
	// Hedges grants hedges (Optional). Defaults to none: no request is hedged.
	Hedges HedgeBudget
	// HedgeTimeout bounds one AcquireHedge call; a slower answer counts as a
	// refusal, since a hedge exists to save time (Optional). Defaults to 200ms.
	HedgeTimeout time.Duration
	// Broker reserves capacity for fallbacks and hedge legs of calls that
	// carry an Admission, and releases unused reservations (Optional).
	// Without it, such an endpoint cannot be reserved and is skipped.
	Broker Broker
	// ReserveTimeout bounds one Reserve (or release) call; a slower broker
	// counts as an error and the endpoint is skipped (Optional). Defaults
	// to 300ms.
	ReserveTimeout time.Duration
	// FirstTokenTimeout is how long one attempt may take to produce its first
	// token before it counts as a timeout and the next endpoint is tried
	// (Optional). Defaults to 60s.
	FirstTokenTimeout time.Duration
	// IdleTimeout is the longest silence allowed between stream chunks once
	// the answer started (Optional). Defaults to 60s.
	IdleTimeout time.Duration
	// WriteTimeout bounds each write of the answer to the client; a client
	// that does not take the bytes within it is cut off, and the call is
	// recorded as cancelled by the client (Optional). Defaults to 30s.
	WriteTimeout time.Duration
	// MaxAttempts caps the endpoints tried per request, hedge included
	// (Optional). Defaults to 4. The broker's retry budget of the request's
	// workload class caps them too.
	MaxAttempts int
	// RetryWait is the longest a request waits, once every endpoint it may
	// use failed or was refused, for the soonest of them to come back from
	// its pause (the provider's Retry-After, or the back-off) to be tried
	// again; never past the request's own deadline (Optional). Defaults to
	// 10s; negative never waits.
	RetryWait time.Duration
	// UserAgent is sent upstream (Optional). Defaults to "switchboard-edge".
	UserAgent string
	// Tracer makes a span of every provider call, a child of the request's
	// span (Optional). Defaults to none: no span is made.
	Tracer trace.Tracer
	// Logger logs attempts (Optional). Defaults to discarding.
	Logger *slog.Logger
}

// Dispatcher runs the attempts of chat requests. It is safe for concurrent use.
type Dispatcher struct {
	opts   Options
	log    *slog.Logger
	caller *upstream.Caller
}

// New returns a Dispatcher, filling in defaults.
func New(o Options) *Dispatcher {
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Credentials == nil {
		// Without a directory New cannot fail.
		c, _ := credentials.New(credentials.Options{Getenv: o.Getenv})
		o.Credentials = c
	}
	if o.Cooldowns == nil {
		o.Cooldowns = cooldown.New(nil)
	}
	if o.Reporter == nil {
		o.Reporter = discardReporter{}
	}
	if o.Ledger == nil {
		o.Ledger = discardLedger{}
	}
	if o.HedgeTimeout <= 0 {
		o.HedgeTimeout = 200 * time.Millisecond
	}
	if o.ReserveTimeout <= 0 {
		o.ReserveTimeout = 300 * time.Millisecond
	}
	if o.FirstTokenTimeout <= 0 {
		o.FirstTokenTimeout = 60 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 60 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 4
	}
	if o.RetryWait == 0 {
		o.RetryWait = 10 * time.Second
	}
	if o.UserAgent == "" {
		o.UserAgent = "switchboard-edge"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	caller := upstream.New(upstream.Options{
		Client:            o.Client,
		Credentials:       o.Credentials,
		FirstTokenTimeout: o.FirstTokenTimeout,
		IdleTimeout:       o.IdleTimeout,
		WriteTimeout:      o.WriteTimeout,
		UserAgent:         o.UserAgent,
		Logger:            o.Logger,
	})
	return &Dispatcher{opts: o, log: o.Logger, caller: caller}
}

type discardReporter struct{}

// Report implements [Reporter.Report].
func (discardReporter) Report(*switchboardv1.CallReport) {}

// Activity implements [Reporter.Activity].
func (discardReporter) Activity(*switchboardv1.ActivityRecord) {}

// discardLedger is the Ledger of a Dispatcher given none: it drops
// everything.
type discardLedger struct{}

// Hold implements [Ledger.Hold].
func (discardLedger) Hold(string) {}

// Applied implements [Ledger.Applied].
func (discardLedger) Applied(*switchboardv1.ReconcileRequest, int64) {}

// Reconcile implements [Ledger.Reconcile].
func (discardLedger) Reconcile(*switchboardv1.ReconcileRequest) {}

// Call is one client request to serve.
type Call struct {
	// RequestID is the edge's id of the request, reported with every attempt.
	// It replaces the provider's completion id in the answer and is the
	// activity record's id, so a client finds its call by the id it got.
	RequestID string
	// Received is when the request arrived; the activity record's
	// create_time, duration and TTFT count from it. Defaults to Serve's start.
	Received time.Time
	// Model is the catalog's model id, the decision's; it replaces the
	// provider's model name in the answer, so clients see the model that
	// served them (the id an alias they asked for names), whatever the
	// provider calls it.
	Model string
	// RequestedModel is the model name the client sent, when it is not
	// Model: an alias, or a routing suffix. (Optional) The activity record
	// keeps it.
	RequestedModel string
	// TenantID is the tenant billed, from the decider's resolved identity.
	TenantID string
	// APIKeyID is the id of the client's key, from the same identity.
	APIKeyID string
	// Grant is the decision's grant (DecideResponse.grant), copied into the
	// activity record: the decider stores the record only with it.
	Grant []byte
	// GrantCaps are the decision's caps (DecideResponse.caps), copied into
	// the activity record with the grant, which covers them: the decider
	// stores the record only when its bill is within them.
	GrantCaps *switchboardv1.DecisionCaps
	// GrantRequestID is the request the grant was issued for, when it is
	// not this one: a call served offline by an earlier decision
	// (ActivityRecord.grant_request_id).
	GrantRequestID string
	// PromptTokens is the prompt estimate, reported for the size bucket.
	PromptTokens int64
	// Stream is whether the client asked for server-sent events.
	Stream bool
	// ClientAPI is the HTTP API the request came in by, for the activity
	// record.
	ClientAPI switchboardv1.ClientApi
	// IncludeUsage is whether the client asked for the final usage chunk.
	IncludeUsage bool
	// Body builds the upstream body for one endpoint: its model name, the
	// parameters it takes.
	Body func(ep *switchboardv1.Endpoint) ([]byte, error)
	// Messages is a Messages client's own request, sent as it is to an
	// endpoint that speaks the Messages API (see upstream.Messages).
	Messages upstream.Messages
	// ProbeID marks a synthetic probe; empty for client requests.
	ProbeID string
	// PromptHash is the chain hash of the whole prompt (chatreq), reported so
	// the decider learns which endpoint holds the prompt in cache.
	PromptHash uint64
	// Prefixes are the prompt's prefixes at its cache boundaries (chatreq),
	// the set sent in Decide, reported for the attempt that served it so
	// the decider learns the endpoint holds each of them: a later request
	// sharing only the system prompt or the tool block finds it there.
	Prefixes []*switchboardv1.PromptPrefix
	// Quality is what the answer-quality checks need to know of the
	// request: whether it offered tools, and its max_tokens.
	Quality quality.Request
	// RouteReason is why the decider chose the first endpoint, for the
	// request's observer (WithObserver).
	RouteReason switchboardv1.RouteReason
	// Hedge is the decider's hedging plan; nil or mode NONE means no hedge.
	// Only streamed requests are hedged.
	Hedge *switchboardv1.HedgePlan
	// Caps bound the client's bill.
	Caps invoice.Caps
	// Admission is the reservation Decide made with the rate-limit broker.
	// When set, every endpoint called has its own reservation, named
	// in its CallReport: Decide's for the endpoint it reserved, a new one
	// (Reserve) for any other, and an endpoint that cannot be reserved is
	// skipped. Nil when the decider reserved nothing — probes, which are the
	// operator's and not a tenant's, or a decider without a broker — and no
	// call is reserved.
	Admission *Admission
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
	// Final says the client's retry cannot help: a provider was called
	// and every endpoint tried failed the request (those attempts were its
	// retries), or a provider rejected the request itself. Unset when no
	// provider was called (every endpoint full: RetryAfter says when one
	// has room).
	Final bool
	// Provider is the provider whose answer this is, when there is one.
	Provider string
}

// Error implements [error].
func (f *Failure) Error() string { return f.Message }

// Serve tries endpoints in order until one answers and writes that answer to
// w, hedging the first attempt when the call's plan says so. It returns nil
// once an answer (possibly ending in a stream error event) was written,
// ErrClientGone if the client left first, and a *Failure when every attempt
// failed before writing anything. Either way it reports every attempt, each
// with its reservation, releases the reservations no attempt used, and then
// sends the request's activity record.
func (d *Dispatcher) Serve(ctx context.Context, w http.ResponseWriter, call Call, endpoints []*switchboardv1.Endpoint) error {
	if call.Received.IsZero() {
		call.Received = time.Now()
	}
	s := newServing(d, call, w)
	err := s.serve(ctx, endpoints)
	// The request's outcome is known: whose each held failure was, too.
	s.charge()
	var f *Failure
	if errors.As(err, &f) {
		s.markRetries()
	}
	s.drainHedge()
	s.release(ctx)
	rec := s.record(err)
	observe(ctx, Finished{Record: rec, RouteReason: call.RouteReason, PromptTokens: call.PromptTokens})
	d.opts.Reporter.Activity(rec)
	return err
}

// plan lists the endpoints to try: the chosen one (even if cooling down — the
// decider chose it knowing more than this edge), then the fallbacks not
// benched, then the benched ones, each once, up to MaxAttempts. A benched
// fallback is tried last rather than dropped, so cool-downs never leave a
// request with fewer endpoints to try than the decider gave it.
func (d *Dispatcher) plan(endpoints []*switchboardv1.Endpoint) []*switchboardv1.Endpoint {
	out := make([]*switchboardv1.Endpoint, 0, min(len(endpoints), d.opts.MaxAttempts))
	var benched []*switchboardv1.Endpoint
	seen := make(map[string]bool, len(endpoints))
	for i, ep := range endpoints {
		if ep == nil || ep.GetBaseUrl() == "" || seen[ep.GetId()] {
			continue
		}
		seen[ep.GetId()] = true
		if i > 0 && d.opts.Cooldowns.Active(ep.GetId()) {
			benched = append(benched, ep)
			continue
		}
		out = append(out, ep)
	}
	out = append(out, benched...)
	return out[:min(len(out), d.opts.MaxAttempts)]
}

func (d *Dispatcher) logAttempt(call Call, l *leg) {
	res := l.Result
	level := slog.LevelDebug
	if res.Outcome != switchboardv1.Outcome_OUTCOME_OK {
		level = slog.LevelWarn
	}
	if !d.log.Enabled(context.Background(), level) {
		// A line not written costs nothing, not even its fields boxed:
		// every successful attempt logs at debug.
		return
	}
	d.log.Log(context.Background(), level, "upstream attempt",
		"request_id", call.RequestID,
		"probe_id", call.ProbeID,
		"endpoint", l.Endpoint.GetId(),
		"hedge", l.hedge,
		"outcome", res.Outcome.String(),
		"http_status", res.Status,
		"ttft", res.TTFT,
		"duration", res.Duration,
		"error", res.ErrText,
	)
}
