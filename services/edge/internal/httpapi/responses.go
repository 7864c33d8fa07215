package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/chatreq"
	"github.com/switchboard-ai/switchboard/services/edge/internal/responses"
)

// The Responses API runs the chat pipeline itself, as the Messages API
// does: the request is read and checked as a chat request is, its body
// translated by the responses package first, and everything the pipeline
// answers (the answer, its stream, its errors) goes out through a
// responses.Writer that puts it in the Responses API's shape.

// responsesCreate serves POST /v1/responses.
func (s *Server) responsesCreate(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodPost) {
		return
	}
	began := time.Now()
	reqID := requestID(w)
	w.Header().Set(HeaderRequestID, reqID)
	rw := responses.NewWriter(w, reqID)
	defer rw.Finish()
	log := reqLog{ctx: context.Background(), log: s.log, id: reqID}
	var session string
	c, ok := s.readRequest(rw, r, func(body []byte) (*chatreq.Request, error) {
		chat, rreq, err := responses.ToChat(body)
		if err != nil {
			return nil, err
		}
		req, err := chatreq.Parse(chat)
		if perr := (*chatreq.Error)(nil); errors.As(err, &perr) {
			// What the chat API refuses of the translation, named as
			// the client sent it.
			perr.Param = responses.Param(perr.Param)
		}
		if err != nil {
			return nil, err
		}
		rreq.CreatedAt = began.Unix()
		session = rreq.PromptCacheKey
		rw.SetRequest(rreq, req.InputTokens)
		return req, nil
	})
	if !ok {
		return
	}
	c.api = switchboardv1.ClientApi_CLIENT_API_RESPONSES
	c.session = session
	resp := s.decide(rw, r, log, reqID, c, r.Header.Get(HeaderDebug) == "1")
	if resp == nil {
		return
	}
	s.serveChat(rw, r, log, reqID, began, c, resp)
}

// responsesNotFound answers the Responses API's paths the edge does not
// serve: retrieving, cancelling or deleting a response, its input items.
func responsesNotFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "not_found",
		message: fmt.Sprintf("%s %s is not served by this gateway: it keeps no responses; only POST /v1/responses is served", r.Method, r.URL.Path)})
}
