// Package fakeupstream is an OpenAI-compatible provider on loopback for the
// edge's tests: it answers chat completions streamed or not, with usage and
// cached tokens (or a test's usage, or none), and misbehaves on demand (429
// with Retry-After, 503, hanging, dropping a stream midway, a malformed first
// chunk, a 400, a redirect). Each server is one endpoint whose first token a
// gate a test opens may hold, so tests order events without measuring
// time. It records every request it receives, on any path, with
// its Authorization header.
//
// The end-to-end tests use provsim (services/provsim), the provider
// simulator, which streams real answers with faults drawn by rate or asked
// for in the prompt. The edge's own tests need what provsim does not offer:
// a gate that holds the first token until the test opens it, and a signal
// when a request arrives or is cancelled, so they order events without
// timing; byte-exact misbehaviour (a malformed first chunk, an event stream
// ended without its blank line, a stream that hangs after its headers or
// after one token, a 401 echoing the credential it got, a redirect); fixed
// usage figures to assert bills against; and the headers each request
// carried. provsim is a separate module and a product of its own, and these
// hooks have no place in it.
package fakeupstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Mode is how the provider answers the next requests.
type Mode int

// The behaviours a test can ask for.
const (
	// OK answers normally.
	OK Mode = iota
	// RateLimited answers 429 with Retry-After and x-ratelimit-* headers.
	RateLimited
	// Unavailable answers 503.
	Unavailable
	// Hang accepts the request and never answers until the caller gives up.
	Hang
	// HangAfterHeaders sends 200 headers (and for streams, a role chunk with
	// no token) and then never sends a token.
	HangAfterHeaders
	// DropMidStream sends the first tokens, then breaks the connection.
	DropMidStream
	// MalformedFirstChunk sends garbage instead of the first chunk or body.
	MalformedFirstChunk
	// BadRequest answers 400 with an OpenAI error body.
	BadRequest
	// Unauthorized answers 401 and echoes the credential it received in the
	// message, as some providers do, to prove the edge redacts it.
	Unauthorized
	// HangMidStream sends the first token of a stream, then never anything
	// again.
	HangMidStream
	// DoneWithoutBlankLine ends a complete stream with "data: [DONE]\n" and
	// closes it without the blank line that would end the event, as some
	// providers do.
	DoneWithoutBlankLine
	// Endless streams large content chunks as fast as they are taken until
	// the caller goes away.
	Endless
	// Redirect answers chat completions with a 307 to
	// /stolen/chat/completions on the same host, to prove the edge follows
	// no redirect with a credential.
	Redirect
	// SpendLimited answers 429 whose error code says the provider account's
	// quota is spent (OpenAI's insufficient_quota), without Retry-After.
	SpendLimited
	// CloseWithoutAnswer reads the request and closes the connection
	// without a byte of answer, as a provider's server that crashed would.
	CloseWithoutAnswer
	// InternalError answers 500, as a provider whose model crashed on the
	// input would.
	InternalError
)

// Reply texts and usage the fake sends, for assertions.
const (
	Content          = "Hello world"
	PromptTokens     = 42
	CachedTokens     = 30
	CompletionTokens = 2
	RetryAfter       = "7"
	// UnavailableRetryAfter is the Retry-After of a 503.
	UnavailableRetryAfter = "3"
	BadRequestText        = "temperature is out of range"
	// DeliveredBeforeDrop is the text a DropMidStream or HangMidStream
	// stream delivers before it breaks.
	DeliveredBeforeDrop = "Hello"
)

// Usage is the token accounting the provider reports.
type Usage struct {
	Prompt, Cached, Completion int64
}

// DefaultUsage is what a new Server reports.
var DefaultUsage = Usage{Prompt: PromptTokens, Cached: CachedTokens, Completion: CompletionTokens}

// Request is one request the provider received.
type Request struct {
	// Path is the URL path requested.
	Path string
	// Authorization is the Authorization header as received.
	Authorization string
	// Body is the decoded JSON body.
	Body map[string]any
}

// Server is a fake provider.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	mode     Mode
	gate     <-chan struct{}
	usage    *Usage
	requests []Request
	arrived  chan struct{}
	// cancelled is signalled when a handler sees its request context end
	// before it finished, which is how a client disconnect looks upstream.
	cancelled chan struct{}
	stop      chan struct{}
	stopOnce  sync.Once
}

// Start serves a new fake provider until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	u := DefaultUsage
	s := &Server{cancelled: make(chan struct{}, 16), stop: make(chan struct{}), usage: &u, arrived: make(chan struct{}, 64)}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

// Close releases hanging handlers and stops the server.
func (s *Server) Close() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.Server.Close()
}

// BaseURL is the provider's OpenAI base URL, ending in /v1.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// SetMode sets how the next requests are answered.
func (s *Server) SetMode(m Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = m
}

// SetGate holds the first token of OK answers (the whole answer when not
// streamed) until gate is closed or the request is cancelled; nil removes
// the gate. A streamed answer sends its role chunk first.
func (s *Server) SetGate(gate <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = gate
}

// SetUsage sets the usage reported; nil reports none at all, even when the
// client asked for it.
func (s *Server) SetUsage(u *Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usage = u
}

// Arrived is signalled each time a request arrives.
func (s *Server) Arrived() <-chan struct{} { return s.arrived }

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Cancelled is signalled each time a request's context ended early.
func (s *Server) Cancelled() <-chan struct{} { return s.cancelled }

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	s.mu.Lock()
	s.requests = append(s.requests, Request{Path: r.URL.Path, Authorization: r.Header.Get("Authorization"), Body: body})
	a := answer{mode: s.mode, gate: s.gate, usage: s.usage}
	s.mu.Unlock()
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		writeError(w, http.StatusNotFound, "not found", "invalid_request_error")
		return
	}
	mode := a.mode

	stream, _ := body["stream"].(bool)
	a.model, _ = body["model"].(string)
	switch mode {
	case RateLimited:
		w.Header().Set("Retry-After", RetryAfter)
		w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
		writeError(w, http.StatusTooManyRequests, "rate limit reached", "rate_limit_exceeded")
		return
	case Unavailable:
		w.Header().Set("Retry-After", UnavailableRetryAfter)
		writeError(w, http.StatusServiceUnavailable, "overloaded", "server_error")
		return
	case BadRequest:
		writeError(w, http.StatusBadRequest, BadRequestText, "invalid_request_error")
		return
	case InternalError:
		writeError(w, http.StatusInternalServerError, "internal error", "server_error")
		return
	case CloseWithoutAnswer:
		panic(http.ErrAbortHandler)
	case SpendLimited:
		writeError(w, http.StatusTooManyRequests, "You exceeded your current quota, please check your plan and billing details.", "insufficient_quota")
		return
	case Unauthorized:
		writeError(w, http.StatusUnauthorized, "Incorrect API key provided: "+r.Header.Get("Authorization"), "invalid_request_error")
		return
	case Hang:
		s.wait(r)
		return
	case Redirect:
		http.Redirect(w, r, "/stolen/chat/completions", http.StatusTemporaryRedirect)
		return
	}
	if !stream {
		s.nonStream(w, r, a)
		return
	}
	opts, _ := body["stream_options"].(map[string]any)
	includeUsage, _ := opts["include_usage"].(bool)
	s.stream(w, r, a, includeUsage)
}

// answer is how one request is answered, fixed when it arrives.
type answer struct {
	mode  Mode
	model string
	gate  <-chan struct{}
	usage *Usage
}

// hold waits for the gate; false when the request ended first.
func (s *Server) hold(r *http.Request, a answer) bool {
	if a.gate == nil {
		return true
	}
	select {
	case <-a.gate:
		return true
	case <-r.Context().Done():
		s.signalCancelled()
		return false
	case <-s.stop:
		return false
	}
}

func (s *Server) signalCancelled() {
	select {
	case s.cancelled <- struct{}{}:
	default:
	}
}

// wait blocks until the client gives up or the server stops.
func (s *Server) wait(r *http.Request) {
	select {
	case <-r.Context().Done():
		s.signalCancelled()
	case <-s.stop:
	}
}

func (s *Server) nonStream(w http.ResponseWriter, r *http.Request, a answer) {
	mode, model := a.mode, a.model
	if !s.hold(r, a) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Ratelimit-Remaining-Tokens", "1000")
	switch mode {
	case MalformedFirstChunk:
		_, _ = io.WriteString(w, `{"choices": [not json`)
		return
	case HangAfterHeaders, DropMidStream:
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		if mode == HangAfterHeaders {
			s.wait(r)
			return
		}
		panic(http.ErrAbortHandler)
	}
	reply := map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
		"system_fingerprint": "fp_x",
		"choices": []any{map[string]any{
			"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": Content},
		}},
	}
	if a.usage != nil {
		reply["usage"] = usageJSON(*a.usage)
	}
	_ = json.NewEncoder(w).Encode(reply)
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, a answer, includeUsage bool) {
	mode, model := a.mode, a.model
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		_ = rc.Flush()
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		}
	}
	if mode == MalformedFirstChunk {
		_, _ = io.WriteString(w, "data: {\"choices\": [oops\n\n")
		_ = rc.Flush()
		return
	}
	_, _ = io.WriteString(w, ": keep-alive\n\n")
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	if mode == HangAfterHeaders {
		s.wait(r)
		return
	}
	if !s.hold(r, a) {
		return
	}
	send(chunk(map[string]any{"content": DeliveredBeforeDrop}, nil))
	if mode == Endless {
		text := strings.Repeat("endless ", 1024)
		for r.Context().Err() == nil {
			send(chunk(map[string]any{"content": text}, nil))
		}
		return
	}
	switch mode {
	case DropMidStream:
		panic(http.ErrAbortHandler)
	case HangMidStream:
		s.wait(r)
		return
	}
	send(chunk(map[string]any{"content": " world"}, nil))
	send(chunk(map[string]any{}, "stop"))
	if includeUsage && a.usage != nil {
		send(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
			"choices": []any{}, "usage": usageJSON(*a.usage),
		})
	}
	if mode == DoneWithoutBlankLine {
		_, _ = io.WriteString(w, "data: [DONE]\n")
		_ = rc.Flush()
		return
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

func usageJSON(u Usage) map[string]any {
	return map[string]any{
		"prompt_tokens": u.Prompt, "completion_tokens": u.Completion,
		"total_tokens":          u.Prompt + u.Completion,
		"prompt_tokens_details": map[string]any{"cached_tokens": u.Cached},
	}
}

func writeError(w http.ResponseWriter, status int, msg, typ string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
}
