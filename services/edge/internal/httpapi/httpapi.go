// Package httpapi is the edge's OpenAI-compatible HTTP API: it authenticates
// clients (by handing the decider a hash of their key), validates requests,
// asks the decider where to send them and lets dispatch stream the answer.
// Every error leaves in OpenAI's JSON format with the matching status.
package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchboard-ai/switchboard/pkg/bearer"
	"github.com/switchboard-ai/switchboard/pkg/offline"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
	"github.com/switchboard-ai/switchboard/services/edge/internal/dispatch"
	"github.com/switchboard-ai/switchboard/services/edge/internal/invoice"
	"github.com/switchboard-ai/switchboard/services/edge/internal/quality"
	"github.com/switchboard-ai/switchboard/services/edge/internal/standby"
	"github.com/switchboard-ai/switchboard/services/edge/internal/upstream"
)

// Response headers the edge adds.
const (
	// HeaderOpenAIRequestID is on every answer, as OpenAI sends it, so a
	// client can quote the request whatever the outcome; on a chat
	// completion it is also the completion id.
	HeaderOpenAIRequestID = "X-Request-Id"
	HeaderRequestID       = "X-Switchboard-Request-Id"
	HeaderProvider        = "X-Switchboard-Provider"
	HeaderRoute           = "X-Switchboard-Route"
	HeaderRouteDebug      = "X-Switchboard-Route-Debug"
	// HeaderDebug set to "1" by the client asks for the decider's full
	// explanation in HeaderRouteDebug.
	HeaderDebug = "X-Switchboard-Debug"
)

// DefaultReservationTTL is how long a reservation lives if never
// reconciled: longer than any answer normally streams, so a long stream
// keeps its reservation to the end, and short enough that an edge that
// died mid-request gives the capacity back soon.
const DefaultReservationTTL = 2 * time.Minute

// DefaultQueueWait is the longest wait of the default batch class: by
// default the edge never cuts a class's wait short.
const DefaultQueueWait = 30 * time.Minute

// Options configure a Server.
type Options struct {
	// Decider answers Decide, ListModels, ListActivity and GetActivity
	// (Required).
	Decider switchboardv1.RouterServiceClient
	// Dispatcher runs the upstream attempts (Required).
	Dispatcher *dispatch.Dispatcher
	// Region is the edge's region, sent with every Decide (Optional).
	Region string
	// MaxBodyBytes bounds a request body (Optional). Defaults to 32 MiB.
	MaxBodyBytes int64
	// DeciderTimeout bounds each call to the decider (Optional).
	// Defaults to 2s: Decide answers in microseconds, so a decider slower
	// than that is in trouble and the client should hear so.
	DeciderTimeout time.Duration
	// QueueWait is the longest a request may wait in its workload class's
	// admission queue, added to DeciderTimeout for the Decide that reserves
	// (Optional). The decider waits no longer than the class's own
	// max_wait, so this only caps it. Defaults to DefaultQueueWait.
	QueueWait time.Duration
	// ReservationTTL is sent with every Decide: how long the reservation
	// lives if never reconciled (Optional). Defaults to 2 minutes.
	ReservationTTL time.Duration
	// DeciderState reports the decider connection's state for /healthz
	// (Optional).
	DeciderState func() string
	// Ready says whether the edge can serve now, for /readyz: nil when it
	// can, else why not (Optional). Defaults to always ready.
	Ready func(context.Context) error
	// ReadyTimeout bounds one Ready check (Optional). Defaults to 1s.
	ReadyTimeout time.Duration
	// BodyReadTimeout bounds reading one request body; a slower client
	// gets 408 (Optional). Defaults to 30s.
	BodyReadTimeout time.Duration
	// MaxUnverifiedBodies caps the bodies read at once for API keys the
	// decider has not accepted recently; beyond it such requests get 503
	// unread (Optional). Defaults to 64.
	MaxUnverifiedBodies int
	// Standby serves requests no decider can be reached for, from the
	// decider's last answers (Optional). Defaults to none: such requests
	// fail closed.
	Standby *standby.Standby
	// Logger logs requests (Optional). Defaults to discarding.
	Logger *slog.Logger
}

// Server serves the HTTP API.
type Server struct {
	opts     Options
	log      *slog.Logger
	handler  http.Handler
	draining atomic.Bool
	keys     *keyCache
	// known is the decider's latest set of valid keys; nil until the
	// first arrives.
	known atomic.Pointer[keySet]
	// unverified holds a token per body being read for a key not verified.
	unverified chan struct{}
}

// New returns a Server.
func New(o Options) *Server {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 32 << 20
	}
	if o.DeciderTimeout <= 0 {
		o.DeciderTimeout = 2 * time.Second
	}
	if o.ReservationTTL <= 0 {
		o.ReservationTTL = DefaultReservationTTL
	}
	if o.QueueWait <= 0 {
		o.QueueWait = DefaultQueueWait
	}
	if o.DeciderState == nil {
		o.DeciderState = func() string { return "UNKNOWN" }
	}
	if o.Ready == nil {
		o.Ready = func(context.Context) error { return nil }
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = time.Second
	}
	if o.BodyReadTimeout <= 0 {
		o.BodyReadTimeout = 30 * time.Second
	}
	if o.MaxUnverifiedBodies <= 0 {
		o.MaxUnverifiedBodies = 64
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: o, log: o.Logger, keys: newKeyCache(), unverified: make(chan struct{}, o.MaxUnverifiedBodies)}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("/v1/messages", s.messages)
	mux.HandleFunc("/v1/messages/count_tokens", s.countTokens)
	mux.HandleFunc("/v1/messages/", messagesNotFound)
	mux.HandleFunc("/v1/responses", s.responsesCreate)
	mux.HandleFunc("/v1/responses/", responsesNotFound)
	mux.HandleFunc("/v1/models", s.models)
	mux.HandleFunc("/v1/models/{id...}", s.model)
	mux.HandleFunc("/v1/activity", s.activity)
	mux.HandleFunc("/v1/generation", s.generation)
	mux.HandleFunc("/healthz", s.healthz)
	mux.HandleFunc("/readyz", s.readyz)
	mux.HandleFunc("/", notFound)
	s.handler = withRequestID(s.guardBody(mux))
	return s
}

// withRequestID gives every request an id, sent back as x-request-id
// before anything else can answer, and read back from there by the
// handler that needs it (the completion id): a context value would cost a
// copy of the request.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()[HeaderOpenAIRequestID] = []string{newRequestID()}
		next.ServeHTTP(w, r)
	})
}

// requestID is the id withRequestID gave the request (a new one when the
// handler runs without it, as in unit tests).
func requestID(w http.ResponseWriter) string {
	if v := w.Header()[HeaderOpenAIRequestID]; len(v) > 0 && v[0] != "" {
		return v[0]
	}
	return newRequestID()
}

// Handler returns the API's root handler.
func (s *Server) Handler() http.Handler { return s.handler }

// SetDraining makes /readyz answer 503, so load balancers stop sending new
// requests while the ones in flight finish. /healthz stays 200: failing
// liveness would restart the process and cut the streams being drained.
func (s *Server) SetDraining() { s.draining.Store(true) }

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "unknown_url",
		message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
}

// allowMethods answers 405 unless r uses one of methods.
func allowMethods(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeError(w, apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error", code: "method_not_allowed",
		message: fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(methods, " or "))})
	return false
}

// apiKeyHash reads a Bearer key and returns its lowercase hex SHA-256. The
// key itself never goes further than this function: the decider
// authenticates the hash, and nothing logs either.
func apiKeyHash(r *http.Request) (string, *apiError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		e := unauthorized("You didn't provide an API key. Send it in the Authorization header as 'Bearer YOUR_KEY'.")
		return "", &e
	}
	scheme, key, ok := strings.Cut(h, " ")
	key = strings.TrimSpace(key)
	if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" || len(key) > 4096 || !printable(key) {
		e := unauthorized("The Authorization header is malformed; expected 'Bearer YOUR_KEY'.")
		return "", &e
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:]), nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// newRequestID is a request id made now, in the format the decider reads
// the time back from ([offline.RequestID]).
func newRequestID() string { return offline.RequestID(time.Now()) }

// headerValue makes a decider-supplied string safe as a header value:
// control characters become spaces, and invalid UTF-8 the replacement
// character. Printable ASCII, what it nearly always is, is left as it is.
func headerValue(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return strings.Map(func(r rune) rune {
				if r < ' ' || r == 0x7f {
					return ' '
				}
				return r
			}, s)
		}
	}
	return s
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodPost) {
		return
	}
	began := time.Now()
	reqID := requestID(w)
	w.Header().Set(HeaderRequestID, reqID)
	// Under no request context, as the logger's own methods log: a
	// handler reading fields from the context adds none to these lines.
	log := reqLog{ctx: context.Background(), log: s.log, id: reqID}

	c, ok := s.readChat(w, r)
	if !ok {
		return
	}
	debug := r.Header.Get(HeaderDebug) == "1"
	resp := s.decide(w, r, log, reqID, c, debug)
	if resp == nil {
		return
	}
	s.serveChat(w, r, log, reqID, began, c, resp)
}

// chatRequest is a client's chat request once read: the hash of the API key
// it came with, the identity it asks for, and its parsed body.
type chatRequest struct {
	keyHash  string
	identity *switchboardv1.Identity
	req      *chatreq.Request
	// api is the HTTP API the request came in by.
	api switchboardv1.ClientApi
	// session is the conversation the request's body names (the
	// Responses API's prompt_cache_key), used when no header names one.
	session string
	// messages is a Messages request's own body and headers, for an
	// endpoint that speaks the Messages API.
	messages upstream.Messages
	// cacheWrite and cacheWrite1h are the prompt up to its last cache
	// breakpoint and up to its last 1-hour one (anthropic.Request), for
	// the decider to price the writes of endpoints that cache by them.
	cacheWrite, cacheWrite1h int64
	// grantRequestID is the request whose remembered answer serves this one
	// offline, when no decider could be reached ("" otherwise).
	grantRequestID string
}

// readChat authenticates what it can of a chat request and reads and parses
// its body. When it cannot, it answers the client and returns false.
func (s *Server) readChat(w http.ResponseWriter, r *http.Request) (*chatRequest, bool) {
	c, ok := s.readRequest(w, r, chatreq.Parse)
	if ok {
		c.api = switchboardv1.ClientApi_CLIENT_API_CHAT_COMPLETIONS
	}
	return c, ok
}

// readRequest is readChat with the body parsed by parse, which makes a
// chat request of it (the Messages API's translates its own first).
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, parse func([]byte) (*chatreq.Request, error)) (*chatRequest, bool) {
	// Everything that can refuse the request without its body does so
	// before reading it, and then does not read it at all.
	keyHash, aerr := s.clientKey(r)
	if aerr != nil {
		abandonBody(w)
		writeError(w, *aerr)
		return nil, false
	}
	if s.keys.rejected(keyHash) {
		abandonBody(w)
		writeError(w, unauthorized("invalid API key"))
		return nil, false
	}
	identity, aerr := identityOf(r, keyHash)
	if aerr != nil {
		abandonBody(w)
		writeError(w, *aerr)
		return nil, false
	}
	held := false
	if !s.keys.verified(keyHash) {
		select {
		case s.unverified <- struct{}{}:
			held = true
		default:
			abandonBody(w)
			writeError(w, apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "busy",
				retryAfter: unverifiedRetryIn,
				message:    "too many requests with API keys not yet verified are being read; retry shortly"})
			return nil, false
		}
	}
	body, aerr := s.readBody(w, r)
	if held {
		<-s.unverified
	}
	if aerr != nil {
		writeError(w, *aerr)
		return nil, false
	}
	req, err := parse(body)
	if err != nil {
		e := invalidRequest("", err.Error())
		if perr := (*chatreq.Error)(nil); errors.As(err, &perr) {
			e.param, e.code = perr.Param, perr.Code
		}
		writeError(w, e)
		return nil, false
	}
	return &chatRequest{keyHash: keyHash, identity: identity, req: req}, true
}

// decide asks the decider where to send a chat request, reserving on the
// endpoint it picks, and sets the route and queue headers. When the
// decider refuses naming the class's fallback model, it asks once more for
// that model (a fallback never falls back again). When the decider fails
// or refuses, it answers the client and returns nil.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, log reqLog, reqID string, c *chatRequest, debug bool) *switchboardv1.DecideResponse {
	resp, err := s.decideModel(r, reqID, c, c.req.Model, debug)
	if fb := resp.GetRefusal().GetFallbackModel(); err == nil && fb != "" {
		log.Info("admission refused; serving the class's fallback model", "model", c.req.Model, "fallback_model", fb,
			"code", resp.GetRefusal().GetCode())
		fresp, ferr := s.decideModel(r, reqID, c, fb, debug)
		switch {
		case ferr != nil && r.Context().Err() == nil:
			// The fallback cannot be routed (the request's provider
			// constraints, say): the refusal of the model asked for stands.
			log.Info("fallback model not routable", "fallback_model", fb, "error", ferr)
		default:
			w.Header().Set(HeaderFallbackModel, headerValue(fb))
			resp, err = fresp, ferr
		}
	}
	if err != nil {
		if r.Context().Err() != nil {
			return nil // the client left; nobody to answer
		}
		e := deciderError(err)
		if e.param == "max_tokens" {
			e.param = c.req.OutputParam()
		}
		if bearer.CallerRefused(err) {
			log.Error("the decider refused this edge's credentials: check --decider-token-file and the catalog's callers", "error", err)
		} else {
			log.Info("decide refused", "model", c.req.Model, "status", e.status, "error", err)
		}
		writeError(w, e)
		return nil
	}
	cls := resp.GetIdentity().GetWorkloadClass()
	if ref := resp.GetRefusal(); ref != nil {
		if ref.GetWorkloadClass() != switchboardv1.WorkloadClass_WORKLOAD_CLASS_UNSPECIFIED {
			cls = ref.GetWorkloadClass()
		}
		setQueueHeaders(w.Header(), cls, resp.GetQueue())
		e := refusalError(ref, time.Now())
		log.Info("admission refused", "model", resp.GetModel(), "reason", ref.GetReason().String(), "code", ref.GetCode(),
			"scope", ref.GetScope().String(), "unit", ref.GetUnit().String(), "retry_after", e.retryAfter)
		writeError(w, e)
		return nil
	}
	setQueueHeaders(w.Header(), cls, resp.GetQueue())
	if resp.GetEndpoint() == nil {
		// The decider names an endpoint or refuses: an answer with neither
		// is a routing service not able to route right now.
		writeError(w, apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "no_available_provider",
			retryAfter: deciderRetryIn, message: "no provider is available for model " + resp.GetModel()})
		return nil
	}
	if summary := resp.GetDecision().GetSummary(); summary != "" {
		w.Header().Set(HeaderRoute, headerValue(summary))
	}
	if debug && resp.GetDecision() != nil {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // "<8k" as is: a header, not HTML
		if err := enc.Encode(routeDebugOf(resp.GetDecision())); err == nil {
			w.Header().Set(HeaderRouteDebug, headerValue(strings.TrimSuffix(b.String(), "\n")))
		}
	}
	return resp
}

// decideModel asks the decider where to send the request as model, and
// to reserve there. The call may wait in the request's class's admission
// queue: its deadline is DeciderTimeout plus QueueWait, and the decider
// ends the wait at the class's max_wait, or sooner to answer within this
// deadline; the client leaving ends it at once.
func (s *Server) decideModel(r *http.Request, reqID string, c *chatRequest, model string, debug bool) (*switchboardv1.DecideResponse, error) {
	keyHash, req := c.keyHash, c.req
	dctx, cancel := context.WithTimeout(r.Context(), s.opts.DeciderTimeout+s.opts.QueueWait)
	defer cancel()
	resp, err := s.opts.Decider.Decide(dctx, &switchboardv1.DecideRequest{
		RequestId: reqID,
		Identity:  c.identity,
		Model:     model,
		Tokens: &switchboardv1.TokenEstimate{
			InputTokens:         req.InputTokens,
			MaxOutputTokens:     req.MaxOutputTokens,
			Prefixes:            req.Prefixes,
			CacheWriteTokens:    c.cacheWrite,
			CacheWrite_1HTokens: c.cacheWrite1h,
		},
		Stream:     req.Stream,
		Provider:   req.Provider,
		Parameters: req.Parameters,
		Region:     s.opts.Region,
		Explain:    debug,
		SessionId:  sessionID(r, c.session),
		// Every dispatch goes through the rate-limit broker: Decide reserves on
		// the endpoint it picks, skipping full ones, and refuses when the
		// caller's own limits or every endpoint are full. The request id
		// makes a retried Decide return the same reservation.
		Reserve:        true,
		IdempotencyKey: reqID,
		ReservationTtl: durationpb.New(s.opts.ReservationTTL),
	})
	switch {
	case err == nil:
		s.keys.accept(keyHash)
		if s.opts.Standby.On() { // the key is built only for a standby that serves
			s.opts.Standby.Remember(standbyKey(c, model), resp)
		}
	case status.Code(err) == codes.Unauthenticated && !bearer.CallerRefused(err):
		s.keys.refuse(keyHash)
	case unreachable(err) && r.Context().Err() == nil:
		return s.serveOffline(c, model, reqID, err)
	}
	return resp, err
}

// serveChat dispatches a decided chat request to its endpoints and answers
// the client with the first good answer or the error of the last.
func (s *Server) serveChat(w http.ResponseWriter, r *http.Request, log reqLog, reqID string, began time.Time, c *chatRequest, resp *switchboardv1.DecideResponse) {
	identity, req := c.identity, c.req
	model := resp.GetModel()
	if model == "" {
		model = req.Model
	}
	var asked string
	if req.Model != model {
		asked = req.Model
	}
	call := dispatch.Call{
		RequestID:      reqID,
		Received:       began,
		Model:          model,
		RequestedModel: asked,
		TenantID:       resp.GetIdentity().GetTenantId(),
		APIKeyID:       resp.GetIdentity().GetApiKeyId(),
		Grant:          resp.GetGrant(),
		GrantCaps:      resp.GetCaps(),
		GrantRequestID: c.grantRequestID,
		PromptTokens:   req.InputTokens,
		Stream:         req.Stream,
		ClientAPI:      c.api,
		IncludeUsage:   req.IncludeUsage,
		Body:           req.UpstreamBody,
		Messages:       c.messages,
		PromptHash:     req.PromptHash,
		Prefixes:       req.Prefixes,
		Quality:        quality.Request{Tools: slices.Contains(req.Parameters, "tools"), MaxTokens: req.MaxOutputTokens},
		Hedge:          resp.GetHedge(),
		RouteReason:    resp.GetDecision().GetReason(),
		Caps:           invoice.NewCaps(resp.GetMaxPrice(), req.Provider.GetMaxPrice(), req.MaxOutputTokens),
		Admission:      s.admission(resp, identity, req),
	}
	endpoints := append([]*switchboardv1.Endpoint{resp.GetEndpoint()}, resp.GetFallbacks()...)
	err := s.opts.Dispatcher.Serve(r.Context(), w, call, endpoints)
	var f *dispatch.Failure
	switch {
	case err == nil:
		log.Info("chat completion", "model", model, "stream", req.Stream, "duration", time.Since(began))
	case errors.Is(err, dispatch.ErrClientGone):
		log.Info("client went away", "model", model, "duration", time.Since(began))
	case errors.As(err, &f):
		if f.Provider != "" {
			w.Header().Set(HeaderProvider, f.Provider)
		}
		log.Warn("chat completion failed", "model", model, "status", f.Status, "error", f.Message)
		writeError(w, apiError{status: f.Status, typ: f.Type, code: f.Code, param: f.Param, message: f.Message, retryAfter: f.RetryAfter,
			final: f.Final})
	default:
		log.Error("chat completion failed", "model", model, "error", err)
		writeError(w, apiError{status: http.StatusInternalServerError, typ: "server_error", code: "internal_error",
			message: "internal error"})
	}
}

// admission is what dispatch needs to reserve the request's further
// endpoints (fallbacks, a hedge leg) the way Decide reserved the first: nil
// when Decide reserved nothing, as a decider without a broker answers.
func (s *Server) admission(resp *switchboardv1.DecideResponse, asked *switchboardv1.Identity, req *chatreq.Request) *dispatch.Admission {
	id := resp.GetReservation().GetReservationId()
	if id == "" {
		return nil
	}
	who := resp.GetIdentity()
	if who.GetTenantId() == "" {
		// Without a resolved identity, reserve as the client: the broker
		// authenticates the key hash again.
		who = asked
	} else if asked.GetApiKeySha256() != "" {
		// The resolved identity (its app, environment, workload class),
		// and the key hash: the decider lets an edge act only for a client
		// it authenticated by key.
		who = withKeyHash(who, asked.GetApiKeySha256())
	}
	demand := resp.GetDemand()
	if demand == nil {
		demand = resp.GetReservation().GetDemand()
	}
	if demand == nil {
		demand = &switchboardv1.Demand{InputTokens: req.InputTokens, OutputTokens: req.MaxOutputTokens, Requests: 1}
	}
	return &dispatch.Admission{
		ReservationID: id,
		EndpointID:    resp.GetEndpoint().GetId(),
		Identity:      who,
		Demand:        demand,
		TTL:           s.opts.ReservationTTL,
	}
}

// withKeyHash is a copy of id, unknown fields included, with its key hash
// set to hash: what proto.Clone and a set would make, without cloning by
// reflection.
func withKeyHash(id *switchboardv1.Identity, hash string) *switchboardv1.Identity {
	c := &switchboardv1.Identity{
		TenantId:      id.GetTenantId(),
		ApiKeyId:      id.GetApiKeyId(),
		ApiKeySha256:  hash,
		App:           id.GetApp(),
		Environment:   id.GetEnvironment(),
		Partner:       id.GetPartner(),
		WorkloadClass: id.GetWorkloadClass(),
	}
	if u := id.ProtoReflect().GetUnknown(); len(u) > 0 {
		c.ProtoReflect().SetUnknown(slices.Clone(u))
	}
	return c
}
