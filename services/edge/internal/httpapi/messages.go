package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/anthropic"
	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
	"github.com/switchboard-ai/switchboard/services/edge/internal/upstream"
)

// The Messages API runs the chat pipeline itself: the request is read and
// checked as a chat request is, its body translated by the anthropic
// package first, and everything the pipeline answers (the answer, its
// stream, its errors) goes out through an anthropic.Writer that puts it
// in Anthropic's shape.

// Request headers of Anthropic's clients.
const (
	// HeaderAPIKey carries the API key, as Anthropic's SDKs send it.
	HeaderAPIKey = "X-Api-Key" //nolint:gosec // a header's name, not a credential
	// HeaderAnthropicRequestID is Anthropic's request id header, set to
	// the edge's request id.
	HeaderAnthropicRequestID = "Request-Id"
)

// The Messages API's writer says a prompt too long in Anthropic's words.
var _ contextWriter = (*anthropic.Writer)(nil)

// messages serves POST /v1/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	reqID := requestID(w)
	aw := s.startMessages(w, reqID)
	defer aw.Finish()
	r, ok := messagesAuth(aw, r)
	if !ok {
		return
	}
	log := reqLog{ctx: context.Background(), log: s.log, id: reqID}
	var raw []byte
	var breakpoints anthropic.Request
	c, ok := s.readRequest(aw, r, func(body []byte) (*chatreq.Request, error) {
		chat, areq, err := anthropic.ToChat(body, anthropic.Options{})
		if err != nil {
			return nil, err
		}
		req, err := chatreq.Parse(chat)
		if err != nil {
			return nil, err
		}
		aw.SetRequest(areq, req.InputTokens)
		raw, breakpoints = body, areq
		return req, nil
	})
	if !ok {
		return
	}
	c.api = switchboardv1.ClientApi_CLIENT_API_MESSAGES
	// An endpoint that speaks the Messages API is sent the request as the
	// client sent it, with its Anthropic headers.
	c.messages = upstream.Messages{Body: raw, Version: r.Header.Get("Anthropic-Version"), Beta: r.Header.Get("Anthropic-Beta")}
	c.cacheWrite, c.cacheWrite1h = breakpoints.CacheWriteTokens, breakpoints.CacheWrite1hTokens
	resp := s.decide(aw, r, log, reqID, c, r.Header.Get(HeaderDebug) == "1")
	if resp == nil {
		return
	}
	s.serveChat(aw, r, log, reqID, began, c, resp)
}

// countTokens serves POST /v1/messages/count_tokens: the edge's own
// estimate of the translated prompt (system, messages and tools), as the
// decider is given it. It needs an API key the edge's key set holds, and
// asks the decider nothing.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	reqID := requestID(w)
	aw := s.startMessages(w, reqID)
	defer aw.Finish()
	r, ok := messagesAuth(aw, r)
	if !ok {
		return
	}
	c, ok := s.readRequest(aw, r, func(body []byte) (*chatreq.Request, error) {
		chat, _, err := anthropic.ToChat(body, anthropic.Options{CountOnly: true})
		if err != nil {
			return nil, err
		}
		return chatreq.Parse(chat)
	})
	if !ok {
		return
	}
	// Past the Writer: the answer is Anthropic's already.
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int64{"input_tokens": c.req.InputTokens})
}

// messagesNotFound answers the Messages API's paths the edge does not
// serve (batches...) in Anthropic's shape.
func messagesNotFound(w http.ResponseWriter, r *http.Request) {
	aw := anthropic.NewWriter(w, requestID(w))
	aw.WriteError(anthropic.Error{Status: http.StatusNotFound, Type: "not_found_error",
		Message: fmt.Sprintf("%s %s is not served by this gateway: only POST /v1/messages and /v1/messages/count_tokens are", r.Method, r.URL.Path)})
}

// startMessages sets a Messages answer's request id headers and returns
// the Writer its answer goes through.
func (s *Server) startMessages(w http.ResponseWriter, reqID string) *anthropic.Writer {
	w.Header().Set(HeaderRequestID, reqID)
	w.Header().Set(HeaderAnthropicRequestID, reqID)
	return anthropic.NewWriter(w, reqID)
}

// messagesAuth checks the method and takes the API key from x-api-key when
// there is no Authorization header, so the chat pipeline's authentication
// reads it from there. The request returned is a copy when it changed.
func messagesAuth(aw *anthropic.Writer, r *http.Request) (*http.Request, bool) {
	if !allowMethods(aw, r, http.MethodPost) {
		return r, false
	}
	if r.Header.Get("Authorization") != "" {
		return r, true
	}
	key := strings.TrimSpace(r.Header.Get(HeaderAPIKey))
	if key == "" {
		abandonBody(aw)
		aw.WriteError(anthropic.Error{Status: http.StatusUnauthorized, Type: "authentication_error",
			Message: "x-api-key header is required (or Authorization: Bearer)"})
		return r, false
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+key)
	return r, true
}
