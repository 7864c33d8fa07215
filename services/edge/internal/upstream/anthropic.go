package upstream

import (
	"encoding/json"
	"net/http"
	"strings"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/edge/internal/anthropic"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
)

// A leg to an endpoint that speaks Anthropic's Messages API (api:
// anthropic) is the same leg, with its own request and its own reading of
// the answer: a Messages client's request goes as the client sent it
// (anthropic.NativeBody) and its answer comes back as the endpoint sent it
// (anthropic.Relay), with what the pipeline needs of each event read on
// the way; any other request is the chat request translated
// (anthropic.FromChatRequest), its answer translated into chat chunks
// (anthropic.ChatStream, anthropic.ChatAnswer) which then take the chat
// path (the Rewriter) as any provider's do. Deadlines, first token,
// holding back, hedging, retries and reports are the leg's, whichever API.

// DefaultAnthropicVersion is the anthropic-version sent for a request
// whose client named none.
const DefaultAnthropicVersion = "2023-06-01"

// NativeWriter is a client writer that can take a Messages answer as it
// is (anthropic.Writer): a leg relaying an anthropic endpoint's answer to
// a Messages client says so before writing it.
type NativeWriter interface {
	// Native says the answer written next is a Messages answer already.
	Native()
}

// messagesAPI reports whether the leg's endpoint speaks the Messages API.
func (l *Leg) messagesAPI() bool {
	return l.Endpoint.GetApi() == switchboardv1.EndpointApi_ENDPOINT_API_ANTHROPIC
}

// messagesRequest builds the body and target of a call to an anthropic
// endpoint, and sets how its answer is read.
func (l *Leg) messagesRequest() (body []byte, target string, err error) {
	model := l.Endpoint.GetUpstreamModel()
	if m := l.req.Messages.Body; m != nil {
		body, err = anthropic.NativeBody(m, model)
		var client string
		_ = json.Unmarshal(l.rw.Model, &client)
		l.relay = &anthropic.Relay{ID: anthropic.MessageID(l.req.ID), Model: client}
	} else {
		var chat []byte
		if chat, err = l.req.Body(l.Endpoint); err == nil {
			body, err = anthropic.FromChatRequest(chat, model)
		}
		l.toChat = &anthropic.ChatStream{}
	}
	return body, strings.TrimSuffix(l.Endpoint.GetBaseUrl(), "/") + "/messages", err
}

// messagesHeaders sets Anthropic's headers: the credential as x-api-key,
// the client's anthropic-version (or DefaultAnthropicVersion) and
// anthropic-beta.
func (l *Leg) messagesHeaders(h http.Header) {
	delete(h, "Authorization")
	if l.secret != "" {
		h["X-Api-Key"] = []string{l.secret}
	}
	v := l.req.Messages.Version
	if v == "" {
		v = DefaultAnthropicVersion
	}
	h["Anthropic-Version"] = []string{v}
	if b := l.req.Messages.Beta; b != "" {
		h["Anthropic-Beta"] = []string{b}
	}
}

// stepMessages is step for a Messages stream's event: relayed as it is,
// or translated into chat chunks each taken by chunk.
func (l *Leg) stepMessages(dst, data []byte) ([]byte, rewrite.Info, stepResult) {
	if l.relay != nil {
		start := len(dst)
		out, info, err := l.relay.Append(dst, data)
		switch {
		case err != nil:
			l.Result.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "malformed stream event", err.Error())
			return dst[:start], info, stepFail
		case info.ErrMsg != "":
			l.Result.fail(switchboardv1.Outcome_OUTCOME_UPSTREAM_ERROR, "provider sent an error", truncate(info.ErrMsg, maxErrorText))
			return dst[:start], info, stepFail
		}
		l.observe(nil, info)
		l.took(info)
		if l.relay.Ended() {
			l.ended = true
			return out, info, stepEnd
		}
		return out, info, stepChunk
	}
	chunks, err := l.toChat.Event(l.chunks[:0], data)
	l.chunks = chunks
	if err != nil {
		l.Result.fail(switchboardv1.Outcome_OUTCOME_MALFORMED, "malformed stream event", err.Error())
		return dst, rewrite.Info{}, stepFail
	}
	var all rewrite.Info
	for _, c := range chunks {
		var info rewrite.Info
		var st stepResult
		if dst, info, st = l.chunk(dst, c); st == stepFail {
			return dst, info, st
		}
		all.Token, all.Finish = all.Token || info.Token, all.Finish || info.Finish
		all.TextBytes += info.TextBytes
		if info.Usage != nil {
			all.Usage = info.Usage
		}
	}
	if l.toChat.Ended() {
		l.ended = true
		return dst, all, stepEnd
	}
	return dst, all, stepChunk
}

// plainMessages reads a Messages body: relayed as it is, or translated
// into a chat completion for the Rewriter.
func (l *Leg) plainMessages(raw []byte) ([]byte, rewrite.Info, error) {
	if l.relay != nil {
		return l.relay.Rewrite(raw)
	}
	chat, err := anthropic.ChatAnswer(raw)
	if err != nil {
		return nil, rewrite.Info{}, err
	}
	return l.rw.Rewrite(chat)
}
