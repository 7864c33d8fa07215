// Package upstream is the edge's call to one provider endpoint (a leg): the
// HTTP request with the endpoint's credential, the first-token deadline and
// the idle timeout between stream chunks, reading the answer and holding it
// back until its first token, and relaying it to the client once committed.
// Which endpoints are called, in what order and under which reservation is
// the dispatch package's; what the answer's chunks become for the client is
// the rewrite package's; whether the answer is usable is judged by the
// quality package's checks, which a leg runs on the answer as it reads it.
//
// Time to first token (TTFT) is measured from sending the upstream request to
// receiving the first stream chunk that carries a token (rewrite.Info.Token).
// For a non-streamed request it is the time to the response headers, the
// first moment the provider committed to an answer.
package upstream

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/quality"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
)

// Credentials gives the credential named by an endpoint for a call to
// target, "" for none, or an error when that name or that host is refused;
// an error never carries a credential. credentials.Store implements it.
type Credentials interface {
	Lookup(name string, target *url.URL) (string, error)
}

// Options configure a Caller.
type Options struct {
	// Client sends upstream requests (Required). Redirects are never
	// followed: the Caller answers them as they are.
	Client *http.Client
	// Credentials gives the credential for an endpoint's call (Required).
	Credentials Credentials
	// FirstTokenTimeout is how long a leg may take to produce its first
	// token before it counts as a timeout (Required).
	FirstTokenTimeout time.Duration
	// IdleTimeout is the longest silence allowed between stream chunks once
	// the answer started (Required).
	IdleTimeout time.Duration
	// WriteTimeout bounds each write of the answer to the client; a client
	// that does not take the bytes within it is cut off (Required).
	WriteTimeout time.Duration
	// UserAgent is sent upstream (Optional). Defaults to "switchboard-edge".
	UserAgent string
	// Logger logs failed client writes (Optional). Defaults to discarding.
	Logger *slog.Logger
}

// Caller makes legs. It is safe for concurrent use.
type Caller struct {
	opts Options
	log  *slog.Logger
}

// New returns a Caller.
func New(o Options) *Caller {
	// A redirect is answered as it is, never followed: following it would
	// carry the endpoint's credential to wherever the provider (or whoever
	// answers in its name) points, and an API call has no business moving.
	client := http.Client{}
	if o.Client != nil {
		client = *o.Client
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	o.Client = &client
	if o.UserAgent == "" {
		o.UserAgent = "switchboard-edge"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Caller{opts: o, log: o.Logger}
}

// Request is what a leg sends and how its answer is passed on.
type Request struct {
	// ID is the edge's request id, for logs.
	ID string
	// Stream is whether the client asked for server-sent events.
	Stream bool
	// IncludeUsage is whether the client asked for the final usage chunk.
	IncludeUsage bool
	// Body builds the upstream body for the endpoint: its model name, the
	// parameters it takes.
	Body func(ep *switchboardv1.Endpoint) ([]byte, error)
	// Rewriter turns the provider's answer into the client's.
	Rewriter rewrite.Rewriter
	// Quality is what the answer-quality checks need to know of the
	// request (its Stream is taken from Stream).
	Quality quality.Request
	// EstimatedUsage is the usage object, with what the client is billed
	// for it, of a stream whose provider reported none, for the generated
	// text delivered. Called only when IncludeUsage is set.
	EstimatedUsage func(deliveredBytes int64) json.RawMessage
	// Messages is what a Messages client sent, for an endpoint that speaks
	// the Messages API itself (Optional): without it, such an endpoint is
	// sent Body's chat request translated.
	Messages Messages
}

// Messages is a Messages client's request as an anthropic endpoint is sent
// it: its own body and Anthropic's headers.
type Messages struct {
	// Body is the client's Messages body; nil for a request of another API.
	Body []byte
	// Version is the client's anthropic-version header, "" for none
	// (DefaultAnthropicVersion is sent).
	Version string
	// Beta is the client's anthropic-beta header, "" for none.
	Beta string
}
