package app

import (
	"net/http"
	"time"

	"github.com/switchboard-ai/switchboard/services/provsim/internal/chatapi"
	"github.com/switchboard-ai/switchboard/services/provsim/internal/promptcache"
	"github.com/switchboard-ai/switchboard/services/provsim/internal/ratelimit"
)

// clientAPI is one of the client APIs a provider serves (OpenAI's chat
// completions, Anthropic's Messages). Every API shares one handler, and each
// of its calls one simulation (quotas, capacity, refusals, faults, timings):
// an API only says how a request is authenticated and read, and its wire how
// the answer is written.
type clientAPI interface {
	// authorized reports whether r carries the provider's API key.
	authorized(p *Provider, r *http.Request) bool
	// checkHeaders returns a client error for headers the API requires.
	checkHeaders(r *http.Request) error
	// parse reads a body into the simulator's request and the call's wire.
	parse(body []byte) (chatapi.Request, wire, error)
	// count adds the request to the API's own counters, on arrival.
	count(s *Stats)
	// writeError answers an error before a call exists; typ and code are
	// OpenAI's names, which the API translates.
	writeError(w http.ResponseWriter, status int, message, typ, code string)
	// writeUnauthorized answers a missing or wrong key.
	writeUnauthorized(w http.ResponseWriter)
	// writeUnknownModel answers a model the provider does not serve.
	writeUnknownModel(w http.ResponseWriter, model string)
}

// wire is how one call answers: what its prompt caches and how its reply,
// errors and quota headers are written.
type wire interface {
	// prepare sets, before admission, what the API decides of the reply:
	// c.cached from the cache, and the API's own reading of the request.
	prepare(c *call)
	// recordCache writes the prefilled prompt to the cache and sets c.written.
	recordCache(c *call)
	// fail answers an error; typ and code are OpenAI's names.
	fail(c *call, status int, message, typ, code string)
	// failRateLimited answers 429 with a Retry-After.
	failRateLimited(c *call, retry time.Duration, message string)
	// failOverloaded answers 529 with a Retry-After.
	failOverloaded(c *call, retry time.Duration)
	// limitHeaders announces the quotas that are set.
	limitHeaders(c *call, lim LimitsConfig, d ratelimit.Decision)
	// complete writes a non-streamed reply.
	complete(c *call) outcome
	// stream writes a streamed reply.
	stream(c *call) outcome
	// drop cuts the connection after a few tokens.
	drop(c *call, after int64) outcome
	// malformed sends a reply no parser accepts.
	malformed(c *call)
}

// chatAPI is OpenAI's chat completions. Its calls need no state of their
// own, so it is its own wire.
type chatAPI struct{}

var (
	_ clientAPI = chatAPI{}
	_ wire      = chatAPI{}
)

func (chatAPI) authorized(p *Provider, r *http.Request) bool {
	got, _ := bearer(r)
	return p.keyMatches(got)
}

func (chatAPI) checkHeaders(*http.Request) error { return nil }

func (chatAPI) parse(body []byte) (chatapi.Request, wire, error) {
	req, err := chatapi.ParseRequest(body)
	return req, chatAPI{}, err
}

func (chatAPI) count(*Stats) {}

func (chatAPI) writeError(w http.ResponseWriter, status int, message, typ, code string) {
	writeError(w, status, message, typ, code)
}

func (chatAPI) writeUnauthorized(w http.ResponseWriter) {
	writeError(w, http.StatusUnauthorized, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
}

func (chatAPI) writeUnknownModel(w http.ResponseWriter, model string) {
	writeError(w, http.StatusNotFound,
		"The model `"+model+"` does not exist or you do not have access to it.",
		"invalid_request_error", "model_not_found")
}

// prepare looks the prompt up in the automatic prefix cache.
func (chatAPI) prepare(c *call) {
	if c.cache != nil {
		c.keys = promptcache.Keys(c.req.Messages, c.cache.Config().BlockTokens)
		c.cached = c.cache.Lookup(c.keys, c.prompt, c.p.now())
	}
}

func (chatAPI) recordCache(c *call) {
	if c.cache != nil {
		c.written = c.cache.Record(c.keys, c.prompt, c.p.now())
	}
}

func (chatAPI) fail(c *call, status int, message, typ, code string) {
	writeError(c.w, status, message, typ, code)
}

func (chatAPI) failRateLimited(c *call, retry time.Duration, message string) {
	writeRateLimited(c.w, retry, message)
}

func (chatAPI) failOverloaded(c *call, retry time.Duration) { writeOverloaded(c.w, retry) }

func (chatAPI) limitHeaders(c *call, lim LimitsConfig, d ratelimit.Decision) {
	setLimitHeaders(c.w.Header(), lim, d)
}

func (chatAPI) complete(c *call) outcome          { return c.complete() }
func (chatAPI) stream(c *call) outcome            { return c.stream() }
func (chatAPI) drop(c *call, after int64) outcome { return c.drop(after) }
func (chatAPI) malformed(c *call)                 { c.writeMalformed() }
