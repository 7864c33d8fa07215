package anthropic

import (
	"encoding/json"

	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
)

// Stream translates a chat-completions event stream, event by event, into
// Anthropic's: message_start and a ping first, then each text run, each
// run of reasoning (as thinking, when the client asked for it) and each
// tool call as a content block of its own (content_block_start, deltas,
// content_block_stop) with increasing indices, and at the end message_delta
// (stop_reason, stop_sequence, usage) and message_stop. A stream that fails
// ends with an error event instead. A Stream serves one answer.
type Stream struct {
	msgID string
	req   Request
	// inputTokens is the edge's estimate of the prompt, message_start's
	// usage until the provider's arrives with message_delta.
	inputTokens int64

	started bool
	// open is the index of the block open, -1 when none is; next the
	// index of the next block.
	open, next int
	// openKind is the open block's type: text, thinking or tool_use.
	openKind string
	// tools maps a chat tool call's index to its block's.
	tools    map[int]int
	toolSeen bool
	finish   *string
	named    any
	usage    *chatUsage
	// ended is set once message_stop or an error event was written.
	ended bool
}

// NewStream returns a Stream for the answer to req, whose edge request id
// is reqID and whose prompt the edge estimated at inputTokens.
func NewStream(reqID string, req Request, inputTokens int64) *Stream {
	return &Stream{msgID: MessageID(reqID), req: req, inputTokens: inputTokens, open: -1}
}

// Ended reports whether the stream was ended, by message_stop or an error.
func (s *Stream) Ended() bool { return s.ended }

// Event appends the Anthropic events for one chat stream event's data to
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
		return s.Fail(dst, streamErrorType(c.ErrType), c.ErrMessage)
	}
	a := &c.Answer
	dst = s.start(dst, a.Model)
	if a.Usage != nil {
		s.usage = a.Usage
	}
	if len(a.Choices) == 0 {
		return dst
	}
	ch := a.Choices[0]
	if ch.FinishReason != nil {
		s.finish, s.named = ch.FinishReason, ch.StopReason
	}
	d := ch.Delta
	if d == nil {
		return dst
	}
	if r := d.Reasoning(); r != "" && s.req.Thinking {
		if s.open < 0 || s.openKind != "thinking" {
			dst = s.closeBlock(dst)
			dst = s.startBlock(dst, map[string]any{"type": "thinking", "thinking": "", "signature": ""}, "thinking")
		}
		dst = event(dst, "content_block_delta", map[string]any{"type": "content_block_delta", "index": s.open,
			"delta": map[string]any{"type": "thinking_delta", "thinking": r}})
	}
	if d.Content != nil && *d.Content != "" {
		if s.open < 0 || s.openKind != "text" {
			dst = s.closeBlock(dst)
			dst = s.startBlock(dst, map[string]any{"type": "text", "text": ""}, "text")
		}
		dst = event(dst, "content_block_delta", map[string]any{"type": "content_block_delta", "index": s.open,
			"delta": map[string]any{"type": "text_delta", "text": *d.Content}})
	}
	for _, tc := range d.ToolCalls {
		idx, ok := s.tools[tc.Index]
		if !ok {
			if s.tools == nil {
				s.tools = map[int]int{}
			}
			dst = s.closeBlock(dst)
			dst = s.startBlock(dst, map[string]any{"type": "tool_use", "id": toolUseID(tc.ID, s.msgID, len(s.tools)),
				"name": tc.Function.Name, "input": map[string]any{}}, "tool_use")
			idx = s.open
			s.tools[tc.Index] = idx
			s.toolSeen = true
		}
		if tc.Function.Arguments != "" {
			dst = event(dst, "content_block_delta", map[string]any{"type": "content_block_delta", "index": idx,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": tc.Function.Arguments}})
		}
	}
	return dst
}

// Cut implements [clientapi.Stream.Cut]: an api_error event.
func (s *Stream) Cut(dst []byte) []byte {
	return s.Fail(dst, "api_error", "the answer's stream ended early")
}

// Fail appends an error event of type typ: the stream's end.
func (s *Stream) Fail(dst []byte, typ, msg string) []byte {
	if s.ended {
		return dst
	}
	s.ended = true
	return event(dst, "error", errorBody{Type: "error", Error: errorDetail{Type: typ, Message: msg}})
}

func (s *Stream) start(dst []byte, model string) []byte {
	if s.started {
		return dst
	}
	s.started = true
	if model == "" {
		model = s.req.Model
	}
	dst = event(dst, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": s.msgID, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": Usage{InputTokens: s.inputTokens},
	}})
	return event(dst, "ping", map[string]string{"type": "ping"})
}

func (s *Stream) startBlock(dst []byte, block map[string]any, kind string) []byte {
	s.open, s.openKind = s.next, kind
	s.next++
	return event(dst, "content_block_start", map[string]any{"type": "content_block_start", "index": s.open, "content_block": block})
}

func (s *Stream) closeBlock(dst []byte) []byte {
	if s.open < 0 {
		return dst
	}
	dst = event(dst, "content_block_stop", map[string]any{"type": "content_block_stop", "index": s.open})
	s.open = -1
	return dst
}

// end closes the open block and the message.
func (s *Stream) end(dst []byte) []byte {
	dst = s.start(dst, "")
	dst = s.closeBlock(dst)
	reason, seq := stopReason(s.finish, s.named, s.req.StopSequences)
	if s.toolSeen {
		reason, seq = "tool_use", nil
	}
	u := Usage{InputTokens: s.inputTokens}
	if s.usage != nil {
		u = usageOf(s.usage)
	}
	dst = event(dst, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq}, "usage": u})
	s.ended = true
	return event(dst, "message_stop", map[string]string{"type": "message_stop"})
}

// event appends one server-sent event named name with v as its data.
func event(dst []byte, name string, v any) []byte {
	b, _ := json.Marshal(v)
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, b...)
	return append(dst, "\n\n"...)
}
