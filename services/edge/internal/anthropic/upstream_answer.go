package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/services/edge/internal/rewrite"
)

// What an anthropic endpoint answers, read by the edge: its usage in the
// pipeline's terms (pricing.Usage), its message or events translated into
// a chat completion or chunks for a chat client (ChatAnswer, ChatStream,
// the inverse of FromChat and Stream), or relayed as they are to a
// Messages client (Relay).

// upstreamUsage is a Messages usage object as an endpoint reports it; a
// stream's message_delta carries some of its members, which replace
// message_start's.
type upstreamUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreation            *struct {
		Ephemeral5m *int64 `json:"ephemeral_5m_input_tokens"`
		Ephemeral1h *int64 `json:"ephemeral_1h_input_tokens"`
	} `json:"cache_creation"`
}

// merge takes the members u carries into dst.
func (dst *upstreamUsage) merge(u *upstreamUsage) {
	if u == nil {
		return
	}
	for _, f := range [...]struct{ to, from **int64 }{
		{&dst.InputTokens, &u.InputTokens}, {&dst.OutputTokens, &u.OutputTokens},
		{&dst.CacheCreationInputTokens, &u.CacheCreationInputTokens}, {&dst.CacheReadInputTokens, &u.CacheReadInputTokens},
	} {
		if *f.from != nil {
			*f.to = *f.from
		}
	}
	if u.CacheCreation != nil {
		dst.CacheCreation = u.CacheCreation
	}
}

func val(p *int64) int64 {
	if p == nil {
		return 0
	}
	return max(*p, 0)
}

// Pricing is the usage in the pipeline's terms: Input is the whole prompt
// (Anthropic's input_tokens leave out the cache's reads and writes),
// CachedInput the reads, CacheWrite and CacheWrite1h the writes by
// lifetime (all of cache_creation_input_tokens at 5 minutes when the
// endpoint does not split them).
func (u *upstreamUsage) Pricing() pricing.Usage {
	read, written := val(u.CacheReadInputTokens), val(u.CacheCreationInputTokens)
	p := pricing.Usage{Input: val(u.InputTokens) + read + written, CachedInput: read, Output: val(u.OutputTokens), CacheWrite: written}
	if c := u.CacheCreation; c != nil && (c.Ephemeral5m != nil || c.Ephemeral1h != nil) {
		p.CacheWrite1h = min(val(c.Ephemeral1h), written)
		p.CacheWrite = written - p.CacheWrite1h
	}
	return p
}

// ChatUsageJSON is u as a chat-completions usage object: prompt_tokens the
// whole prompt, prompt_tokens_details.cached_tokens the cache reads and
// cache_write_tokens every cache write, of which cache_write_1h_tokens
// were written for an hour.
func ChatUsageJSON(u pricing.Usage) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"prompt_tokens": u.Input, "completion_tokens": u.Output, "total_tokens": u.Input + u.Output,
		"prompt_tokens_details": map[string]int64{"cached_tokens": u.CachedInput,
			"cache_write_tokens": u.CacheWrite + u.CacheWrite1h, "cache_write_1h_tokens": u.CacheWrite1h},
	})
	return b
}

// finishReason maps a Messages stop_reason to chat's finish_reason, the
// inverse of stopReason.
func finishReason(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop"
}

// upstreamBlock is a content block of a Messages answer, or a stream's
// content_block_start block.
type upstreamBlock struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
}

// upstreamMessage is a Messages answer, or message_start's message.
type upstreamMessage struct {
	Type       string          `json:"type"`
	ID         string          `json:"id"`
	Model      string          `json:"model"`
	Content    []upstreamBlock `json:"content"`
	StopReason *string         `json:"stop_reason"`
	Usage      *upstreamUsage  `json:"usage"`
	Error      *errorDetail    `json:"error"`
}

// upstreamEvent is one event of a Messages stream, its type in its data.
type upstreamEvent struct {
	Type         string           `json:"type"`
	Message      *upstreamMessage `json:"message"`
	Index        int              `json:"index"`
	ContentBlock *upstreamBlock   `json:"content_block"`
	Delta        *struct {
		Type        string  `json:"type"`
		Text        string  `json:"text"`
		Thinking    string  `json:"thinking"`
		PartialJSON string  `json:"partial_json"`
		Signature   string  `json:"signature"`
		StopReason  *string `json:"stop_reason"`
	} `json:"delta"`
	Usage *upstreamUsage `json:"usage"`
	Error *errorDetail   `json:"error"`
}

// chatError is a chat error object for a Messages error, as a chat
// stream carries one.
func chatError(e *errorDetail) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": e.Message, "type": e.Type}})
	return b
}

// ChatAnswer translates a Messages answer into a chat completion: text
// blocks joined as the content, thinking as reasoning_content, tool_use
// blocks as tool_calls, stop_reason as finish_reason, usage as ChatUsageJSON.
// An error body becomes a chat error object.
func ChatAnswer(body []byte) ([]byte, error) {
	var m upstreamMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("decode message: %w", err)
	}
	if m.Type == "error" && m.Error != nil {
		return chatError(m.Error), nil
	}
	if m.Type != "message" {
		return nil, errors.New("decode message: not a message")
	}
	var text, thinking strings.Builder
	msg := map[string]any{"role": "assistant", "content": nil}
	var calls []map[string]any
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "thinking":
			thinking.WriteString(b.Thinking)
		case "tool_use":
			args := string(b.Input)
			if null(b.Input) {
				args = "{}"
			}
			calls = append(calls, map[string]any{"id": b.ID, "type": "function",
				"function": map[string]string{"name": b.Name, "arguments": args}})
		}
	}
	if text.Len() > 0 {
		msg["content"] = text.String()
	}
	if thinking.Len() > 0 {
		msg["reasoning_content"] = thinking.String()
	}
	if calls != nil {
		msg["tool_calls"] = calls
	}
	stop := ""
	if m.StopReason != nil {
		stop = *m.StopReason
	}
	out := map[string]any{"id": m.ID, "object": "chat.completion", "created": time.Now().Unix(), "model": m.Model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finishReason(stop)}}}
	if m.Usage != nil {
		out["usage"] = ChatUsageJSON(m.Usage.Pricing())
	}
	return json.Marshal(out)
}

// ChatStream translates a Messages event stream, event by event, into
// chat-completion chunks: message_start → the role chunk, text and
// thinking deltas → content and reasoning_content, each tool_use block →
// a tool call (its name at the block's start, its input's JSON as the
// arguments), message_delta → the finish_reason chunk and a usage-only
// chunk, an error event → a chat error object. Signatures and pings have
// no chat form and are dropped. A ChatStream serves one answer.
type ChatStream struct {
	id, model string
	created   int64
	usage     upstreamUsage
	// tools maps a tool_use block's index to its tool call's.
	tools map[int]int
	ended bool
}

// Ended reports whether message_stop was read.
func (s *ChatStream) Ended() bool { return s.ended }

// Event appends the chat chunks for one Messages event's data to chunks.
func (s *ChatStream) Event(chunks [][]byte, data []byte) ([][]byte, error) {
	var ev upstreamEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return chunks, fmt.Errorf("decode event: %w", err)
	}
	switch ev.Type {
	case "message_start":
		if ev.Message == nil {
			return chunks, errors.New("decode event: message_start without a message")
		}
		s.id, s.model, s.created = ev.Message.ID, ev.Message.Model, time.Now().Unix()
		s.usage.merge(ev.Message.Usage)
		return append(chunks, s.chunk(map[string]any{"role": "assistant", "content": ""}, nil)), nil
	case "content_block_start":
		if b := ev.ContentBlock; b != nil {
			switch b.Type {
			case "text":
				if b.Text != "" {
					return append(chunks, s.chunk(map[string]any{"content": b.Text}, nil)), nil
				}
			case "tool_use":
				if s.tools == nil {
					s.tools = map[int]int{}
				}
				n := len(s.tools)
				s.tools[ev.Index] = n
				return append(chunks, s.chunk(map[string]any{"tool_calls": []map[string]any{{"index": n, "id": b.ID,
					"type": "function", "function": map[string]string{"name": b.Name, "arguments": ""}}}}, nil)), nil
			}
		}
	case "content_block_delta":
		d := ev.Delta
		if d == nil {
			return chunks, nil
		}
		switch {
		case d.Type == "text_delta" && d.Text != "":
			return append(chunks, s.chunk(map[string]any{"content": d.Text}, nil)), nil
		case d.Type == "thinking_delta" && d.Thinking != "":
			return append(chunks, s.chunk(map[string]any{"reasoning_content": d.Thinking}, nil)), nil
		case d.Type == "input_json_delta" && d.PartialJSON != "":
			if n, ok := s.tools[ev.Index]; ok {
				return append(chunks, s.chunk(map[string]any{"tool_calls": []map[string]any{{"index": n,
					"function": map[string]string{"arguments": d.PartialJSON}}}}, nil)), nil
			}
		}
	case "message_delta":
		s.usage.merge(ev.Usage)
		if ev.Delta != nil && ev.Delta.StopReason != nil {
			f := finishReason(*ev.Delta.StopReason)
			chunks = append(chunks, s.chunk(map[string]any{}, &f))
		}
		return append(chunks, s.usageChunk()), nil
	case "message_stop":
		s.ended = true
	case "error":
		e := ev.Error
		if e == nil {
			e = &errorDetail{Type: "api_error", Message: "the provider sent an error"}
		}
		return append(chunks, chatError(e)), nil
	}
	return chunks, nil
}

func (s *ChatStream) chunk(delta map[string]any, finish *string) []byte {
	b, _ := json.Marshal(map[string]any{"id": s.id, "object": "chat.completion.chunk", "created": s.created, "model": s.model,
		"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}}})
	return b
}

func (s *ChatStream) usageChunk() []byte {
	b, _ := json.Marshal(map[string]any{"id": s.id, "object": "chat.completion.chunk", "created": s.created, "model": s.model,
		"choices": []any{}, "usage": ChatUsageJSON(s.usage.Pricing())})
	return b
}

// Relay passes an anthropic endpoint's own answer to a Messages client:
// every event as the endpoint sent it, but message_start's message id and
// model (a body's id and model) set to the edge's, and reads what the
// pipeline needs of each (rewrite.Info): whether it carries a token (a
// non-empty text, thinking, signature or input delta, a tool_use block's
// start, a stop reason), its finish, the usage so far, an error, the size
// of the generated text. A Relay serves one answer.
type Relay struct {
	// ID is the message id the client gets (MessageID of the edge's request id).
	ID string
	// Model is the model the client asked for.
	Model string

	usage upstreamUsage
	ended bool
	// err is the endpoint's error event, if it sent one.
	err *errorDetail
}

// Ended reports whether message_stop was read.
func (r *Relay) Ended() bool { return r.ended }

// Append appends the client's event for one event's data to dst, framed as
// a server-sent event named by its type. An error event is not appended:
// info.ErrMsg carries it.
func (r *Relay) Append(dst, data []byte) ([]byte, rewrite.Info, error) {
	var info rewrite.Info
	var ev upstreamEvent
	if err := json.Unmarshal(data, &ev); err != nil || ev.Type == "" {
		return dst, info, errors.New("malformed event: not a typed JSON object")
	}
	switch ev.Type {
	case "message_start":
		if ev.Message == nil {
			return dst, info, errors.New("malformed event: message_start without a message")
		}
		r.usage.merge(ev.Message.Usage)
		u := r.usage.Pricing()
		info.Usage = &u
		var err error
		if data, err = r.rename(data, "message"); err != nil {
			return dst, info, err
		}
	case "content_block_start":
		if b := ev.ContentBlock; b != nil && b.Type == "tool_use" {
			info.Token, info.TextBytes = true, int64(len(b.Name))
		}
	case "content_block_delta":
		if d := ev.Delta; d != nil {
			n := len(d.Text) + len(d.Thinking) + len(d.PartialJSON)
			info.Token, info.TextBytes = n > 0 || d.Signature != "", int64(n)
		}
	case "message_delta":
		r.usage.merge(ev.Usage)
		u := r.usage.Pricing()
		info.Usage = &u
		if ev.Delta != nil && ev.Delta.StopReason != nil {
			info.Finish, info.Token = true, true
		}
	case "message_stop":
		r.ended = true
	case "error":
		info.ErrMsg = "provider sent an error"
		if ev.Error != nil && ev.Error.Message != "" {
			info.ErrMsg = ev.Error.Type + ": " + ev.Error.Message
			r.err = ev.Error
		}
		return dst, info, nil
	}
	dst = append(dst, "event: "...)
	dst = append(dst, ev.Type...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...), info, nil
}

// Rewrite is Append for a body: the message with the edge's id and model,
// what it says for the pipeline, or info.ErrMsg for an error body.
func (r *Relay) Rewrite(body []byte) ([]byte, rewrite.Info, error) {
	var info rewrite.Info
	var m upstreamMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, info, fmt.Errorf("malformed answer: %w", err)
	}
	if m.Type == "error" {
		info.ErrMsg = "provider sent an error"
		if m.Error != nil && m.Error.Message != "" {
			info.ErrMsg = m.Error.Type + ": " + m.Error.Message
		}
		return nil, info, nil
	}
	if m.Type != "message" {
		return nil, info, errors.New("malformed answer: not a message")
	}
	if m.Usage != nil {
		u := m.Usage.Pricing()
		info.Usage = &u
	}
	for _, b := range m.Content {
		info.TextBytes += int64(len(b.Text) + len(b.Thinking) + len(b.Input))
	}
	info.Finish, info.Token = m.StopReason != nil, true
	out, err := r.rename(body, "")
	return out, info, err
}

// rename sets the id and model of the message in data (under member, or
// data itself when member is "").
func (r *Relay) rename(data []byte, member string) ([]byte, error) {
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(data, &outer); err != nil {
		return nil, fmt.Errorf("malformed answer: %w", err)
	}
	msg := outer
	if member != "" {
		msg = nil
		if err := json.Unmarshal(outer[member], &msg); err != nil || msg == nil {
			return nil, errors.New("malformed answer: the message is not an object")
		}
	}
	msg["id"], msg["model"] = rewrite.String(r.ID), rewrite.String(r.Model)
	if member == "" {
		return json.Marshal(msg)
	}
	inner, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encode message: %w", err)
	}
	outer[member] = inner
	return json.Marshal(outer)
}

// Interrupted appends the error event that ends a relayed stream that
// failed, as Anthropic ends one: the endpoint's own error event (its type,
// overloaded_error..., is what a client retries on), or an api_error saying
// why the edge ended it.
func (r *Relay) Interrupted(dst []byte, summary string) []byte {
	e := errorDetail{Type: "api_error", Message: "the provider's stream was interrupted: " + summary}
	if r.err != nil {
		e = *r.err
	}
	return event(dst, "error", errorBody{Type: "error", Error: e})
}
