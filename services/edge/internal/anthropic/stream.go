package anthropic

import (
	"encoding/json"

	"github.com/switchboard-ai/switchboard/services/edge/internal/clientapi"
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonscan"
)

// Stream translates a chat-completions event stream, event by event, into
// Anthropic's: message_start and a ping first, then each text run, each
// run of reasoning (as thinking, when the client asked for it) and each
// tool call as a content block of its own (content_block_start, deltas,
// content_block_stop) with increasing indices, and at the end message_delta
// (stop_reason, stop_sequence, usage) and message_stop. A stream that fails
// ends with an error event instead. A Stream serves one answer.
//
// Anthropic's blocks follow one another, while a provider may stream
// parallel tool calls with their argument deltas interleaved (index 0, 1,
// 0, 1...). A tool call that starts while another's block is open and its
// arguments are not yet a whole JSON value waits: its deltas are kept, and
// it gets its block, with what it sent so far as one delta, once the open
// call's arguments are whole, or when the open block ends for anything
// else (text, thinking, the answer's end).
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
	// tools holds the answer's tool calls by their chat index; openTool
	// is the one whose block is open, nil when none is; waiting are those
	// that started while openTool was still receiving its arguments, in
	// the order they started.
	tools    map[int]*toolCall
	calls    int // how many calls started
	openTool *toolCall
	waiting  []*toolCall
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
			dst = s.drain(dst)
			dst = s.startBlock(dst, map[string]any{"type": "thinking", "thinking": "", "signature": ""}, "thinking")
		}
		dst = event(dst, "content_block_delta", map[string]any{"type": "content_block_delta", "index": s.open,
			"delta": map[string]any{"type": "thinking_delta", "thinking": r}})
	}
	if d.Content != nil && *d.Content != "" {
		if s.open < 0 || s.openKind != "text" {
			dst = s.drain(dst)
			dst = s.startBlock(dst, map[string]any{"type": "text", "text": ""}, "text")
		}
		dst = event(dst, "content_block_delta", map[string]any{"type": "content_block_delta", "index": s.open,
			"delta": map[string]any{"type": "text_delta", "text": *d.Content}})
	}
	for _, tc := range d.ToolCalls {
		t := s.tools[tc.Index]
		// Some providers give every call of a turn index 0: a new id is a
		// new call.
		if t == nil || tc.ID != "" && t.providerID != "" && tc.ID != t.providerID {
			if s.tools == nil {
				s.tools = map[int]*toolCall{}
			}
			t = &toolCall{block: -1, id: toolUseID(tc.ID, s.msgID, s.calls), providerID: tc.ID, name: tc.Function.Name}
			s.calls++
			s.tools[tc.Index] = t
			s.toolSeen = true
			if s.openTool != nil && !s.openTool.args.Whole() {
				s.waiting = append(s.waiting, t)
			} else {
				dst = s.closeBlock(dst)
				dst = s.startTool(dst, t, "")
			}
		}
		dst = s.toolArgs(dst, t, tc.Function.Arguments)
	}
	return dst
}

// Cut implements [clientapi.Stream.Cut]: an api_error event.
func (s *Stream) Cut(dst []byte) []byte {
	return s.Fail(dst, "api_error", "the answer's stream ended early")
}

// toolCall is one chat tool call of the answer.
type toolCall struct {
	// block is the call's block index, -1 while it waits for one.
	block int
	// id is its tool_use id; providerID the id the provider gave it.
	id, providerID, name string
	// kept is what the call sent while it waited.
	kept []byte
	// args follows its arguments, to tell when they are whole.
	args jsonscan.Pieces
}

// toolArgs appends the delta of args for t: at once when its block is
// open, kept while it waits. Once the open call's arguments are whole,
// the calls waiting get their blocks.
func (s *Stream) toolArgs(dst []byte, t *toolCall, args string) []byte {
	if args == "" {
		return dst
	}
	switch {
	case t == s.openTool:
		t.args.Feed(args)
		dst = argsDelta(dst, t.block, args)
		for len(s.waiting) > 0 && s.openTool.args.Whole() {
			dst = s.closeBlock(dst)
			dst = s.startWaiting(dst)
		}
	case t.block < 0:
		t.kept = append(t.kept, args...)
	default:
		// The call's block was stopped: its arguments were whole, or text
		// came after them. Anthropic has no way to add to a stopped block,
		// and a provider sending past the end of a call's arguments sent
		// an answer no client could use either.
	}
	return dst
}

// startTool opens t's block, with kept as its first delta.
func (s *Stream) startTool(dst []byte, t *toolCall, kept string) []byte {
	dst = s.startBlock(dst, map[string]any{"type": "tool_use", "id": t.id, "name": t.name, "input": map[string]any{}}, "tool_use")
	t.block, s.openTool = s.open, t
	if kept != "" {
		t.args.Feed(kept)
		dst = argsDelta(dst, t.block, kept)
	}
	return dst
}

// startWaiting opens the block of the first call waiting, with what it
// sent so far.
func (s *Stream) startWaiting(dst []byte) []byte {
	t := s.waiting[0]
	s.waiting = s.waiting[1:]
	kept := string(t.kept)
	t.kept = nil
	return s.startTool(dst, t, kept)
}

// drain closes the open block and gives each waiting call its block, in
// turn: what comes next starts a block of its own after them.
func (s *Stream) drain(dst []byte) []byte {
	dst = s.closeBlock(dst)
	for len(s.waiting) > 0 {
		dst = s.startWaiting(dst)
		dst = s.closeBlock(dst)
	}
	return dst
}

func argsDelta(dst []byte, block int, args string) []byte {
	return event(dst, "content_block_delta", map[string]any{"type": "content_block_delta", "index": block,
		"delta": map[string]any{"type": "input_json_delta", "partial_json": args}})
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
	s.open, s.openTool = -1, nil
	return dst
}

// end closes the open block, gives the calls still waiting theirs, and
// closes the message.
func (s *Stream) end(dst []byte) []byte {
	dst = s.start(dst, "")
	dst = s.drain(dst)
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
