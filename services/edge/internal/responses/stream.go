package responses

import (
	"encoding/json"
	"slices"

	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
)

// Stream translates a chat-completions event stream, event by event, into
// the Responses API's: response.created and response.in_progress first;
// then an output item per run of the provider's reasoning, per run of text
// (output_item.added, content_part.added, its deltas) and per tool call
// (output_item.added, function_call_arguments.delta), each tool call its
// own item however the provider interleaves their deltas; at the end each
// item's done events, in output order, and response.completed (or
// response.incomplete) with the whole response and its usage. A stream
// that fails ends with response.failed instead. Every event carries its
// sequence_number, from 0. A Stream serves one answer.
type Stream struct {
	req Request
	// inputTokens is the edge's estimate of the prompt, the usage's input
	// when the provider sends none.
	inputTokens int64
	resp        *Response

	seq     int64
	started bool
	// text and reasoning are the message and reasoning items open, nil
	// when none is: a run of another kind closes them.
	text, reasoning *Item
	// calls maps a chat tool call's index to its item.
	calls  map[int]*Item
	finish *string
	usage  *clientapi.ChatUsage
	ended  bool
}

// NewStream returns a Stream for the answer to req, whose edge request id
// is reqID and whose prompt the edge estimated at inputTokens.
func NewStream(reqID string, req Request, inputTokens int64) *Stream {
	return &Stream{req: req, inputTokens: inputTokens, resp: newResponse(ResponseID(reqID), req, "")}
}

// Ended reports whether the stream was ended, by its completion or its
// failure.
func (s *Stream) Ended() bool { return s.ended }

// Event appends the Responses events for one chat stream event's data to
// dst: a chunk, "[DONE]", or an error object.
func (s *Stream) Event(dst, data []byte) []byte {
	if s.ended {
		return dst
	}
	c := clientapi.ReadChunk(data)
	switch {
	case c.Done:
		return s.end(dst)
	case c.Failed:
		code := "server_error"
		if c.ErrType == "rate_limit_error" || c.ErrType == "rate_limit_exceeded" {
			code = "rate_limit_exceeded"
		}
		return s.Fail(dst, code, c.ErrMessage)
	}
	a := &c.Answer
	if a.Provider != "" {
		s.resp.Provider = a.Provider
	}
	dst = s.start(dst, a.Model)
	if a.Usage != nil {
		s.usage = a.Usage
	}
	if len(a.Choices) == 0 {
		return dst
	}
	ch := a.Choices[0]
	if ch.FinishReason != nil {
		s.finish = ch.FinishReason
	}
	d := ch.Delta
	if d == nil {
		return dst
	}
	if r := d.Reasoning(); r != "" {
		if s.reasoning == nil {
			dst = s.closeText(dst)
			s.reasoning = s.add(kindReasoning)
			dst = s.added(dst, s.reasoning, reasoningPart(""))
		}
		s.reasoning.Text.WriteString(r)
		dst = s.delta(dst, "response.reasoning_text.delta", s.reasoning, r)
	}
	if d.Content != nil && *d.Content != "" {
		if s.text == nil {
			dst = s.closeReasoning(dst)
			s.text = s.add(kindMessage)
			dst = s.added(dst, s.text, textPart(""))
		}
		s.text.Text.WriteString(*d.Content)
		dst = s.delta(dst, "response.output_text.delta", s.text, *d.Content, "logprobs", []any{})
	}
	for _, tc := range d.ToolCalls {
		it, ok := s.calls[tc.Index]
		if !ok {
			if s.calls == nil {
				s.calls = map[int]*Item{}
			}
			dst = s.closeText(s.closeReasoning(dst))
			it = s.add(kindCall)
			it.CallID, it.Name = callID(tc.ID, it.ID), tc.Function.Name
			s.calls[tc.Index] = it
			dst = s.added(dst, it, nil)
		}
		if tc.Function.Arguments != "" {
			it.Arguments.WriteString(tc.Function.Arguments)
			dst = s.event(dst, "response.function_call_arguments.delta", map[string]any{
				"item_id": it.ID, "output_index": s.index(it), "delta": tc.Function.Arguments})
		}
	}
	return dst
}

// Cut implements [clientapi.Stream.Cut]: response.failed.
func (s *Stream) Cut(dst []byte) []byte {
	return s.Fail(dst, "server_error", "the answer's stream ended early")
}

// Fail appends response.failed with an error of code: the stream's end.
func (s *Stream) Fail(dst []byte, code, msg string) []byte {
	if s.ended {
		return dst
	}
	dst = s.start(dst, "")
	s.ended = true
	s.resp.Status, s.resp.Error = "failed", &ResponseError{Code: code, Message: msg}
	for _, it := range s.resp.Output {
		it.added, it.Status = false, "incomplete"
	}
	return s.event(dst, "response.failed", map[string]any{"response": s.resp})
}

func (s *Stream) start(dst []byte, model string) []byte {
	if s.started {
		return dst
	}
	s.started = true
	if model != "" {
		s.resp.Model = model
	}
	dst = s.event(dst, "response.created", map[string]any{"response": s.resp})
	return s.event(dst, "response.in_progress", map[string]any{"response": s.resp})
}

// add opens an output item of kind.
func (s *Stream) add(kind string) *Item {
	it := &Item{Type: kind, ID: itemID(s.resp.ID, kind, len(s.resp.Output)), Status: "in_progress", added: true}
	s.resp.Output = append(s.resp.Output, it)
	return it
}

func (s *Stream) index(it *Item) int { return slices.Index(s.resp.Output, it) }

// added appends output_item.added for it, and content_part.added for its
// first part when it has one.
func (s *Stream) added(dst []byte, it *Item, part map[string]any) []byte {
	dst = s.event(dst, "response.output_item.added", map[string]any{"output_index": s.index(it), "item": it})
	if part == nil {
		return dst
	}
	return s.event(dst, "response.content_part.added", map[string]any{
		"item_id": it.ID, "output_index": s.index(it), "content_index": 0, "part": part})
}

// delta appends a text delta event of it's first content part.
func (s *Stream) delta(dst []byte, typ string, it *Item, text string, extra ...any) []byte {
	ev := map[string]any{"item_id": it.ID, "output_index": s.index(it), "content_index": 0, "delta": text}
	for i := 0; i+1 < len(extra); i += 2 {
		ev[extra[i].(string)] = extra[i+1]
	}
	return s.event(dst, typ, ev)
}

func (s *Stream) closeText(dst []byte) []byte {
	if s.text == nil {
		return dst
	}
	dst = s.done(dst, s.text, "completed")
	s.text = nil
	return dst
}

func (s *Stream) closeReasoning(dst []byte) []byte {
	if s.reasoning == nil {
		return dst
	}
	dst = s.done(dst, s.reasoning, "completed")
	s.reasoning = nil
	return dst
}

// done appends it's done events: its text's or its arguments', its
// content part's, and output_item.done.
func (s *Stream) done(dst []byte, it *Item, status string) []byte {
	if it.Status != "in_progress" {
		return dst
	}
	i := s.index(it)
	it.added, it.Status = false, status
	switch it.Type {
	case kindMessage:
		text := it.Text.String()
		dst = s.event(dst, "response.output_text.done", map[string]any{"item_id": it.ID, "output_index": i,
			"content_index": 0, "text": text, "logprobs": []any{}})
		dst = s.event(dst, "response.content_part.done", map[string]any{"item_id": it.ID, "output_index": i,
			"content_index": 0, "part": textPart(text)})
	case kindReasoning:
		text := it.Text.String()
		dst = s.event(dst, "response.reasoning_text.done", map[string]any{"item_id": it.ID, "output_index": i,
			"content_index": 0, "text": text})
		dst = s.event(dst, "response.content_part.done", map[string]any{"item_id": it.ID, "output_index": i,
			"content_index": 0, "part": reasoningPart(text)})
	case kindCall:
		dst = s.event(dst, "response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": i,
			"arguments": it.Arguments.String()})
	}
	return s.event(dst, "response.output_item.done", map[string]any{"output_index": i, "item": it})
}

// end closes every open item, in output order, and the response.
func (s *Stream) end(dst []byte) []byte {
	dst = s.start(dst, "")
	s.resp.finish(s.finish)
	// finish set the final statuses; the items still open get their done
	// events with them.
	status := map[*Item]string{}
	for _, it := range s.resp.Output {
		status[it] = it.Status
	}
	for _, it := range s.openItems() {
		it.Status = "in_progress"
	}
	for _, it := range s.resp.Output {
		if it.Status == "in_progress" {
			dst = s.done(dst, it, status[it])
		}
	}
	if s.usage != nil {
		s.resp.Usage = usageOf(s.usage)
	} else {
		s.resp.Usage = &Usage{InputTokens: s.inputTokens, TotalTokens: s.inputTokens}
	}
	s.ended = true
	typ := "response.completed"
	if s.resp.Status == "incomplete" {
		typ = "response.incomplete"
	}
	return s.event(dst, typ, map[string]any{"response": s.resp})
}

// openItems are the items not yet done: the text and reasoning runs open
// and every tool call.
func (s *Stream) openItems() []*Item {
	var open []*Item
	for _, it := range s.resp.Output {
		if it == s.text || it == s.reasoning || it.Type == kindCall {
			open = append(open, it)
		}
	}
	return open
}

// event appends one server-sent event of type typ, with its type and
// sequence number set in fields.
func (s *Stream) event(dst []byte, typ string, fields map[string]any) []byte {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	b, _ := json.Marshal(fields)
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, b...)
	return append(dst, "\n\n"...)
}
