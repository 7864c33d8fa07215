package responses

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
)

// Writer is the http.ResponseWriter the chat pipeline answers a Responses
// request through: a clientapi.Writer putting what the pipeline writes in
// the Responses API's shape (a stream event by event; a held body, the
// Response object; an error, OpenAI's already, with its param named as
// the Responses API names it). Status and headers (Retry-After...) go out
// as the pipeline set them.
type Writer = clientapi.RequestWriter[Request]

// NewWriter returns a Writer answering through w the request with edge
// request id reqID.
func NewWriter(w http.ResponseWriter, reqID string) *Writer {
	return clientapi.NewRequestWriter[Request](w, reqID, api{})
}

// api is the Responses API's clientapi.API.
type api struct{}

var _ clientapi.API[Request] = api{}

// Stream implements [clientapi.API.Stream].
func (api) Stream(reqID string, req Request, inputTokens int64) clientapi.Stream {
	return NewStream(reqID, req, inputTokens)
}

// Body implements [clientapi.API.Body].
func (api) Body(body []byte, reqID string, req Request) ([]byte, error) {
	return FromChat(body, reqID, req)
}

// Error implements [clientapi.API.Error]: the status as it is, the body
// OpenAI's, with its param renamed once the request was translated (an
// error of the translation names the Responses field already).
func (api) Error(status int, body []byte, translated bool) (int, []byte) {
	return status, FromChatError(status, body, translated)
}

// Unreadable implements [clientapi.API.Unreadable].
func (api) Unreadable() (int, []byte) {
	return http.StatusBadGateway, errorJSON("the provider's answer could not be translated", "server_error", "", "bad_gateway")
}

// errorBody is OpenAI's error JSON.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    any     `json:"code"`
	} `json:"error"`
}

func errorJSON(msg, typ, param, code string) []byte {
	var e errorBody
	e.Error.Message, e.Error.Type = msg, typ
	if param != "" {
		e.Error.Param = &param
	}
	if code != "" {
		e.Error.Code = code
	}
	b, _ := json.Marshal(e)
	return b
}

// FromChatError is the error the chat pipeline answered (its OpenAI error
// body), with its param, when rename is set, as the Responses API names
// the field at fault (see Param). A body that is not OpenAI's error JSON
// becomes one.
func FromChatError(status int, body []byte, rename bool) []byte {
	var e errorBody
	if json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
		msg := strings.TrimSpace(string(body))
		if msg == "" {
			msg = http.StatusText(status)
		}
		msg = truncate(msg, 512)
		typ := "invalid_request_error"
		if status >= 500 {
			typ = "server_error"
		}
		return errorJSON(msg, typ, "", "")
	}
	if e.Error.Param != nil && rename {
		p := Param(*e.Error.Param)
		e.Error.Param = &p
	}
	b, _ := json.Marshal(e)
	return b
}

// Param is the Responses field a chat request's field p comes from: the
// chat request's messages are the input, its max_tokens the
// max_output_tokens, its response_format the text.format.
func Param(p string) string {
	for _, r := range []struct{ chat, responses string }{
		{"messages", "input"}, {"max_completion_tokens", "max_output_tokens"}, {"max_tokens", "max_output_tokens"},
		{"response_format", "text.format"},
	} {
		if rest, ok := strings.CutPrefix(p, r.chat); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			if r.chat == "messages" {
				// A message's index is not an item's.
				return "input"
			}
			return r.responses + rest
		}
	}
	return p
}
