package app

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/services/provsim/internal/messagesapi"
)

// thinking returns the thinking block's text (empty when display is
// omitted) and its signature, which covers the whole thinking as
// Anthropic's does, so a client that echoes the block back can be checked.
func (m *messagesCall) thinking(c *call) (string, string) {
	var b strings.Builder
	for i := range m.thinkTokens {
		b.WriteString(c.token(i))
	}
	sum := sha256.Sum256([]byte(m.id + "\n" + b.String()))
	sig := base64.StdEncoding.EncodeToString(sum[:])
	if m.req.ThinkingOmitted {
		return "", sig
	}
	return b.String(), sig
}

func (m *messagesCall) toolInput(c *call) json.RawMessage { return json.RawMessage(c.toolArguments()) }

// message is the reply's Message, its content whole (non-streamed) or empty
// with no stop reason yet (message_start).
func (m *messagesCall) message(c *call, whole bool) messagesapi.Message {
	msg := messagesapi.Message{
		ID: m.id, Type: "message", Role: "assistant", Model: c.cfg.ID,
		Content: []messagesapi.ContentBlock{},
	}
	if !whole {
		msg.Usage = m.usage(c, 1)
		return msg
	}
	if m.req.Thinking && m.thinkTokens > 0 {
		msg.Content = append(msg.Content, messagesapi.ThinkingBlock(m.thinking(c)))
	}
	if len(m.text) > 0 {
		msg.Content = append(msg.Content, messagesapi.TextBlock(strings.Join(m.text, "")))
	}
	if c.tool != "" {
		msg.Content = append(msg.Content, messagesapi.ToolUseBlock(m.toolID, c.tool, m.toolInput(c)))
	}
	msg.StopReason, msg.StopSequence = &m.stopReason, m.stopSequence
	msg.Usage = m.usage(c, c.n)
	return msg
}

// complete writes the Message after the whole generation time.
func (m *messagesCall) complete(c *call) outcome {
	if !c.sleep(time.Duration(c.n) * c.interval()) {
		return outcomeCancelled
	}
	writeJSON(c.w, http.StatusOK, m.message(c, true))
	c.sent = c.n
	return outcomeOK
}

// errTokenLimit ends a stream early once a drop's tokens are sent.
var errTokenLimit = errors.New("token limit of the stream reached")

// messagesStream writes one Messages stream: named events, and the output
// tokens paced from the first one at the model's speed.
type messagesStream struct {
	c     *call
	s     *streamWriter
	limit int64 // tokens to send before stopping with errTokenLimit
	first time.Time
	step  time.Duration
	index int // of the next content block
}

func (ms *messagesStream) event(typ string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(ms.s.w, "event: "+typ+"\ndata: "+string(b)+"\n\n"); err != nil {
		return err
	}
	return ms.s.rc.Flush()
}

// token waits for the next output token's time, sends it with send (nil
// when nothing is shown of it) and counts it as delivered.
func (ms *messagesStream) token(send func() error) error {
	c := ms.c
	if c.sent >= ms.limit {
		return errTokenLimit
	}
	if c.sent == 0 {
		ms.first = time.Now()
	} else if ms.step > 0 && !c.sleep(time.Until(ms.first.Add(time.Duration(c.sent)*ms.step))) {
		return c.ctx.Err()
	}
	if err := c.ctx.Err(); err != nil {
		return err
	}
	if send != nil {
		if err := send(); err != nil {
			return err
		}
	}
	c.sent++
	return nil
}

// block sends one content block: its start, its deltas and its stop; the
// first block start is followed by a ping, as Anthropic sends one.
func (ms *messagesStream) block(start messagesapi.ContentBlock, deltas func(index int) error) error {
	i := ms.index
	ms.index++
	if err := ms.event("content_block_start", messagesapi.BlockStart{Type: "content_block_start", Index: i, ContentBlock: start}); err != nil {
		return err
	}
	if i == 0 {
		if err := ms.event("ping", messagesapi.Bare{Type: "ping"}); err != nil {
			return err
		}
	}
	if err := deltas(i); err != nil {
		return err
	}
	return ms.event("content_block_stop", messagesapi.BlockStop{Type: "content_block_stop", Index: i})
}

func (ms *messagesStream) delta(i int, d messagesapi.Delta) error {
	return ms.event("content_block_delta", messagesapi.BlockDelta{Type: "content_block_delta", Index: i, Delta: d})
}

// run sends the whole stream, or its first limit tokens.
func (m *messagesCall) run(c *call, ms *messagesStream) error {
	if err := ms.event("message_start", messagesapi.MessageStart{Type: "message_start", Message: m.message(c, false)}); err != nil {
		return err
	}
	empty := ""
	if m.req.Thinking && m.thinkTokens > 0 {
		_, sig := m.thinking(c)
		err := ms.block(messagesapi.ThinkingBlock("", ""), func(i int) error {
			for k := range m.thinkTokens {
				var send func() error
				if !m.req.ThinkingOmitted {
					tok := c.token(k)
					send = func() error { return ms.delta(i, messagesapi.Delta{Type: "thinking_delta", Thinking: &tok}) }
				}
				if err := ms.token(send); err != nil {
					return err
				}
			}
			return ms.delta(i, messagesapi.Delta{Type: "signature_delta", Signature: &sig})
		})
		if err != nil {
			return err
		}
	}
	if len(m.text) > 0 {
		err := ms.block(messagesapi.TextBlock(empty), func(i int) error {
			for _, tok := range m.text {
				var send func() error
				if tok != "" {
					send = func() error { return ms.delta(i, messagesapi.Delta{Type: "text_delta", Text: &tok}) }
				}
				if err := ms.token(send); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if c.tool != "" {
		args := string(m.toolInput(c))
		half := len(args) / 2
		err := ms.block(messagesapi.ToolUseBlock(m.toolID, c.tool, json.RawMessage(`{}`)), func(i int) error {
			for _, part := range []string{args[:half], args[half:]} {
				if err := ms.delta(i, messagesapi.Delta{Type: "input_json_delta", PartialJSON: &part}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	end := messagesapi.MessageDelta{Type: "message_delta", Usage: m.usage(c, c.n)}
	end.Delta.StopReason, end.Delta.StopSequence = &m.stopReason, m.stopSequence
	if err := ms.event("message_delta", end); err != nil {
		return err
	}
	return ms.event("message_stop", messagesapi.Bare{Type: "message_stop"})
}

func (m *messagesCall) newStream(c *call, limit int64) *messagesStream {
	return &messagesStream{c: c, s: c.startStream(), limit: limit, step: c.interval()}
}

func (m *messagesCall) stream(c *call) outcome {
	if m.run(c, m.newStream(c, c.n)) != nil {
		c.sent = 0 // a cancelled call delivers nothing billable
		c.cutIfClosing()
		return outcomeCancelled
	}
	return outcomeOK
}

// drop cuts the connection after a few tokens: mid-stream for a stream, and
// before any byte (after the same generation time) otherwise.
func (m *messagesCall) drop(c *call, after int64) outcome {
	after = min(after, c.n)
	if c.req.Stream {
		if err := m.run(c, m.newStream(c, after)); err != nil && !errors.Is(err, errTokenLimit) {
			c.sent = 0
			return outcomeCancelled
		}
	} else if !c.sleep(time.Duration(after) * c.interval()) {
		return outcomeCancelled
	}
	c.outcome = outcomeDrop
	abortConnection()
	return outcomeDrop
}

// malformed sends a truncated JSON document where message_start (or the
// body) should be, then ends the reply cleanly.
func (m *messagesCall) malformed(c *call) {
	if !c.req.Stream {
		c.writeMalformed() // the same broken body as a chat completion's
		return
	}
	s := c.startStream()
	_, _ = io.WriteString(s.w, "event: message_start\ndata: {\"id\":\n\n")
	_ = s.rc.Flush()
}
