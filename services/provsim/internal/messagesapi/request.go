// Package messagesapi holds Anthropic's Messages API wire format as the
// simulator speaks it: the parser for untrusted request bodies, the prompt's
// cacheable pieces with their cache_control breakpoints, and the message,
// stream event and error shapes that the official SDKs decode.
package messagesapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
)

// MaxBreakpoints is how many blocks may carry cache_control, as on Anthropic's API.
const MaxBreakpoints = 4

// maxStopSequences bounds stop_sequences: each is searched for in the reply.
const maxStopSequences = 64

// The cache lifetimes a cache_control may ask for.
const (
	// TTL5m is the default lifetime of a cache entry ({"type":"ephemeral"}).
	TTL5m = 5 * time.Minute
	// TTL1h is the extended lifetime ({"type":"ephemeral","ttl":"1h"}).
	TTL1h = time.Hour
)

// Request is the part of a Messages request the simulator acts on. Fields
// it does not simulate (temperature, top_p, top_k, metadata) are checked for
// type and range and otherwise ignored, as a provider would.
type Request struct {
	// Model is the model id the client asked for.
	Model string
	// MaxTokens is the output cap (required by the API).
	MaxTokens int64
	// Stream asks for a server-sent-event stream.
	Stream bool
	// StopSequences end the reply where the text would contain one.
	StopSequences []string
	// Thinking is whether the reply starts with a thinking block.
	Thinking bool
	// ThinkingBudget is thinking.budget_tokens (0 for adaptive thinking).
	ThinkingBudget int64
	// ThinkingOmitted is thinking.display "omitted": the block's text is
	// empty and only its signature is sent.
	ThinkingOmitted bool
	// ToolChoice is tool_choice.type ("auto", "any", "tool", "none"), "" when absent.
	ToolChoice string
	// ToolChoiceName is the tool tool_choice {"type":"tool"} names.
	ToolChoiceName string
	// ToolNames are the names of the client's tools, in order.
	ToolNames []string
	// Pieces are the prompt in cache order: tools, system blocks, then every
	// message's content blocks.
	Pieces []Piece
}

// Piece is one cacheable unit of the prompt: a tool definition, a system
// block or a message's content block.
type Piece struct {
	// Kind is "tools", "system" or the role of the converted message ("user",
	// "assistant", or "tool" for a tool_result block).
	Kind string
	// Message is the index of the converted message the piece belongs to;
	// -1 for tools.
	Message int
	// Text is what the piece contributes to its message's counted content.
	Text string
	// Canonical is the piece's JSON without cache_control, keys sorted: what
	// the cache key covers.
	Canonical []byte
	// TTL is the piece's cache_control lifetime, 0 when it is no breakpoint.
	TTL time.Duration
}

// wireRequest mirrors the JSON body. Polymorphic fields stay raw.
type wireRequest struct {
	Model         *string           `json:"model"`
	MaxTokens     *int64            `json:"max_tokens"`
	Messages      []wireMessage     `json:"messages"`
	System        json.RawMessage   `json:"system"`
	Tools         []json.RawMessage `json:"tools"`
	ToolChoice    *wireToolChoice   `json:"tool_choice"`
	StopSequences []string          `json:"stop_sequences"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	TopK          *int64            `json:"top_k"`
	Thinking      *wireThinking     `json:"thinking"`
	Metadata      *struct {
		UserID *string `json:"user_id"`
	} `json:"metadata"`
	Stream *bool `json:"stream"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type wireToolChoice struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

type wireThinking struct {
	Type         string `json:"type"`
	BudgetTokens *int64 `json:"budget_tokens"`
	Display      string `json:"display"`
}

// wireBlock is a content block's fields that the simulator reads.
type wireBlock struct {
	Type         string            `json:"type"`
	Text         string            `json:"text"`
	Thinking     string            `json:"thinking"`
	Name         string            `json:"name"`
	ID           string            `json:"id"`
	Input        json.RawMessage   `json:"input"`
	ToolUseID    string            `json:"tool_use_id"`
	Content      json.RawMessage   `json:"content"`
	Source       *wireSource       `json:"source"`
	CacheControl *wireCacheControl `json:"cache_control"`
}

type wireSource struct {
	Type string `json:"type"`
	Data string `json:"data"`
}

type wireCacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl"`
}

// ErrInvalidRequest marks every error ParseRequest returns, so the handler can
// answer 400 invalid_request_error without inspecting messages.
var ErrInvalidRequest = errors.New("invalid request")

// parser collects every problem of one body, so a client sees them all.
type parser struct {
	errs   []error
	req    Request
	nextID int // converted messages so far
}

func (p *parser) bad(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...))
}

// ParseRequest decodes and checks a Messages body. It never panics on any
// input; every failure wraps ErrInvalidRequest with a message fit to show the
// client, in the API's "field: problem" style.
func ParseRequest(body []byte) (Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, fmt.Errorf("%w: body is not valid JSON for a Messages request: %w", ErrInvalidRequest, err)
	}
	p := &parser{}
	switch {
	case w.Model == nil:
		p.bad("model: Field required")
	case *w.Model == "":
		p.bad("model: must not be empty")
	default:
		p.req.Model = *w.Model
	}
	switch {
	case w.MaxTokens == nil:
		p.bad("max_tokens: Field required")
	case *w.MaxTokens < 1:
		p.bad("max_tokens: must be at least 1, got %d", *w.MaxTokens)
	default:
		p.req.MaxTokens = *w.MaxTokens
	}
	if w.Stream != nil {
		p.req.Stream = *w.Stream
	}
	p.sampling(w)
	p.stopSequences(w.StopSequences)
	p.thinking(w.Thinking)
	p.tools(w.Tools)
	p.toolChoice(w.ToolChoice)
	p.system(w.System)
	if len(w.Messages) == 0 {
		p.bad("messages: at least one message is required")
	}
	for i, m := range w.Messages {
		p.message(i, m)
	}
	if n := breakpoints(p.req.Pieces); n > MaxBreakpoints {
		p.bad("A maximum of %d blocks with cache_control may be provided. Found %d.", MaxBreakpoints, n)
	}
	p.ttlOrder()
	if len(p.errs) > 0 {
		return Request{}, errors.Join(p.errs...)
	}
	return p.req, nil
}

func (p *parser) sampling(w wireRequest) {
	if t := w.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 1) {
		p.bad("temperature: must be between 0 and 1, got %v", *t)
	}
	if t := w.TopP; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 1) {
		p.bad("top_p: must be between 0 and 1, got %v", *t)
	}
	if k := w.TopK; k != nil && *k < 0 {
		p.bad("top_k: must not be negative, got %d", *k)
	}
	if m := w.Metadata; m != nil && m.UserID != nil && len(*m.UserID) > 256 {
		p.bad("metadata.user_id: must be at most 256 characters")
	}
}

func (p *parser) stopSequences(seqs []string) {
	if len(seqs) > maxStopSequences {
		p.bad("stop_sequences: at most %d are allowed, got %d", maxStopSequences, len(seqs))
		return
	}
	for i, s := range seqs {
		if strings.TrimSpace(s) == "" {
			p.bad("stop_sequences[%d]: each stop sequence must contain non-whitespace", i)
		}
	}
	p.req.StopSequences = seqs
}

func (p *parser) thinking(t *wireThinking) {
	if t == nil {
		return
	}
	switch t.Type {
	case "disabled":
		return
	case "enabled":
		switch {
		case t.BudgetTokens == nil:
			p.bad("thinking.enabled.budget_tokens: Field required")
		case *t.BudgetTokens < 1024:
			p.bad("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
		case p.req.MaxTokens > 0 && *t.BudgetTokens >= p.req.MaxTokens:
			p.bad("`max_tokens` must be greater than `thinking.budget_tokens`")
		default:
			p.req.ThinkingBudget = *t.BudgetTokens
		}
	case "adaptive", "between_tools":
	default:
		p.bad("thinking.type: must be one of 'enabled', 'disabled', 'adaptive', 'between_tools', got %q", t.Type)
		return
	}
	switch t.Display {
	case "", "summarized":
	case "omitted":
		p.req.ThinkingOmitted = true
	default:
		p.bad("thinking.display: must be 'summarized' or 'omitted', got %q", t.Display)
	}
	p.req.Thinking = true
}

func (p *parser) tools(tools []json.RawMessage) {
	for i, raw := range tools {
		var t struct {
			Name         string            `json:"name"`
			CacheControl *wireCacheControl `json:"cache_control"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			p.bad("tools[%d]: must be an object: %v", i, err)
			continue
		}
		if t.Name == "" {
			p.bad("tools[%d].name: Field required", i)
		}
		p.req.ToolNames = append(p.req.ToolNames, t.Name)
		var compact bytes.Buffer
		// raw decoded above, so it is valid JSON.
		_ = json.Compact(&compact, raw)
		p.piece(fmt.Sprintf("tools[%d]", i), Piece{Kind: "tools", Message: -1, Text: compact.String()}, raw, t.CacheControl)
	}
}

func (p *parser) toolChoice(tc *wireToolChoice) {
	if tc == nil {
		return
	}
	switch tc.Type {
	case "auto", "any", "none":
	case "tool":
		if tc.Name == "" {
			p.bad("tool_choice.tool.name: Field required")
		}
		p.req.ToolChoiceName = tc.Name
	default:
		p.bad("tool_choice.type: must be one of 'auto', 'any', 'tool', 'none', got %q", tc.Type)
		return
	}
	if tc.Type != "none" && tc.Type != "auto" && len(p.req.ToolNames) == 0 {
		p.bad("tool_choice: tools must be provided when tool_choice is %q", tc.Type)
	}
	p.req.ToolChoice = tc.Type
}

// system reads system: a string, or an array of text blocks that may carry
// cache_control. All of it is one converted system message.
func (p *parser) system(raw json.RawMessage) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return
	}
	msg := p.nextID
	p.nextID++
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			p.bad("system: %v", err)
			return
		}
		p.piece("system", Piece{Kind: "system", Message: msg, Text: s}, raw, nil)
		return
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		p.bad("system: must be a string or an array of text blocks")
		return
	}
	for i, b := range blocks {
		var wb wireBlock
		if err := json.Unmarshal(b, &wb); err != nil {
			p.bad("system[%d]: must be a text block: %v", i, err)
			continue
		}
		if wb.Type != "text" {
			p.bad("system[%d].type: must be 'text', got %q", i, wb.Type)
			continue
		}
		p.piece(fmt.Sprintf("system[%d]", i), Piece{Kind: "system", Message: msg, Text: wb.Text}, b, wb.CacheControl)
	}
}

// message reads one message. Its content becomes converted messages the way
// OpenAI's chat format holds the same turn: each tool_result block a "tool"
// message, the other blocks (runs of them) messages of the role.
func (p *parser) message(i int, m wireMessage) {
	path := fmt.Sprintf("messages[%d]", i)
	if m.Role != "user" && m.Role != "assistant" {
		p.bad("%s.role: must be 'user' or 'assistant', got %q", path, m.Role)
		return
	}
	raw := bytes.TrimSpace(m.Content)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		p.bad("%s.content: Field required", path)
		return
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			p.bad("%s.content: %v", path, err)
			return
		}
		p.piece(path+".content", Piece{Kind: m.Role, Message: p.nextID, Text: s}, raw, nil)
		p.nextID++
		return
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		p.bad("%s.content: must be a string or an array of content blocks", path)
		return
	}
	if len(blocks) == 0 {
		p.bad("%s.content: must not be empty", path)
		return
	}
	open := -1 // the converted message that takes the next non-result block
	for j, b := range blocks {
		bpath := fmt.Sprintf("%s.content[%d]", path, j)
		var wb wireBlock
		if err := json.Unmarshal(b, &wb); err != nil {
			p.bad("%s: must be a content block: %v", bpath, err)
			continue
		}
		text, ok := p.blockText(bpath, m.Role, wb)
		if !ok {
			continue
		}
		if wb.Type == "tool_result" {
			p.piece(bpath, Piece{Kind: "tool", Message: p.nextID, Text: text}, b, wb.CacheControl)
			p.nextID++
			open = -1
			continue
		}
		if open < 0 {
			open = p.nextID
			p.nextID++
		}
		p.piece(bpath, Piece{Kind: m.Role, Message: open, Text: text}, b, wb.CacheControl)
	}
}

// blockText checks a content block and returns the text it counts as: its
// text, a tool call's name and input, a tool result's text, a text
// document's data; images and binary documents count nothing, as images do
// in the chat format.
func (p *parser) blockText(path, role string, b wireBlock) (string, bool) {
	switch b.Type {
	case "text":
		return b.Text, true
	case "image", "document":
		if b.Source == nil {
			p.bad("%s.source: Field required", path)
			return "", false
		}
		if b.Source.Type == "text" {
			return b.Source.Data, true
		}
		return "", true
	case "tool_use", "server_tool_use":
		if role != "assistant" {
			p.bad("%s: tool_use blocks are only allowed in assistant messages", path)
			return "", false
		}
		if b.ID == "" || b.Name == "" {
			p.bad("%s: tool_use blocks need an id and a name", path)
			return "", false
		}
		var input bytes.Buffer
		if len(b.Input) > 0 {
			_ = json.Compact(&input, b.Input)
		}
		return b.Name + input.String(), true
	case "tool_result":
		if role != "user" {
			p.bad("%s: tool_result blocks are only allowed in user messages", path)
			return "", false
		}
		if b.ToolUseID == "" {
			p.bad("%s.tool_use_id: Field required", path)
			return "", false
		}
		text, err := resultText(b.Content)
		if err != nil {
			p.bad("%s.content: %v", path, err)
			return "", false
		}
		return text, true
	case "thinking", "redacted_thinking":
		if role != "assistant" {
			p.bad("%s: thinking blocks are only allowed in assistant messages", path)
			return "", false
		}
		return b.Thinking, true
	case "":
		p.bad("%s.type: Field required", path)
	default:
		p.bad("%s.type: unsupported content block type %q", path, b.Type)
	}
	return "", false
}

// resultText flattens a tool_result's content: a string, or blocks whose
// text blocks are joined.
func resultText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var blocks []wireBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", errors.New("must be a string or an array of content blocks")
	}
	var b strings.Builder
	for _, x := range blocks {
		if x.Type == "text" {
			b.WriteString(x.Text)
		}
	}
	return b.String(), nil
}

// piece appends one piece, its canonical form and its breakpoint.
func (p *parser) piece(path string, pc Piece, raw json.RawMessage, cc *wireCacheControl) {
	pc.Canonical = canonical(raw)
	if cc != nil {
		switch {
		case cc.Type != "ephemeral":
			p.bad("%s.cache_control.type: must be 'ephemeral', got %q", path, cc.Type)
		case cc.TTL == "" || cc.TTL == "5m":
			pc.TTL = TTL5m
		case cc.TTL == "1h":
			pc.TTL = TTL1h
		default:
			p.bad("%s.cache_control.ttl: must be '5m' or '1h', got %q", path, cc.TTL)
		}
	}
	p.req.Pieces = append(p.req.Pieces, pc)
}

// canonical is raw without its cache_control, re-encoded with sorted keys,
// so where a client puts its breakpoints and how it spaces its JSON do not
// change what the cache matches.
func canonical(raw json.RawMessage) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		var buf bytes.Buffer
		_ = json.Compact(&buf, raw)
		return buf.Bytes()
	}
	delete(obj, "cache_control")
	b, _ := json.Marshal(obj) // values are valid raw JSON from the decoder
	return b
}

// ttlOrder checks that no 1h breakpoint follows a 5m one: a longer-lived
// entry cannot extend a prefix that expires sooner, and Anthropic refuses it.
func (p *parser) ttlOrder() {
	seen5m := false
	for _, pc := range p.req.Pieces {
		switch pc.TTL {
		case TTL5m:
			seen5m = true
		case TTL1h:
			if seen5m {
				p.bad("a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block")
				return
			}
		}
	}
}

func breakpoints(pieces []Piece) int {
	n := 0
	for _, pc := range pieces {
		if pc.TTL > 0 {
			n++
		}
	}
	return n
}

// ChatMessages returns the prompt as the simulator's chat-format messages:
// system first, then the turns, tool results as "tool" messages.
func (r Request) ChatMessages() []tokens.Message { return chatMessages(r.Pieces) }

// ToolsJSON returns the tools as one compact JSON array, nil when there are none.
func (r Request) ToolsJSON() []byte { return toolsJSON(r.Pieces) }

func chatMessages(pieces []Piece) []tokens.Message {
	var msgs []tokens.Message
	last := -1
	for _, pc := range pieces {
		if pc.Kind == "tools" {
			continue
		}
		if pc.Message != last {
			msgs = append(msgs, tokens.Message{Role: pc.Kind})
			last = pc.Message
		}
		msgs[len(msgs)-1].Content += pc.Text
	}
	return msgs
}

func toolsJSON(pieces []Piece) []byte {
	var b []byte
	for _, pc := range pieces {
		if pc.Kind != "tools" {
			continue
		}
		if b == nil {
			b = append(b, '[')
		} else {
			b = append(b, ',')
		}
		b = append(b, pc.Text...)
	}
	if b != nil {
		b = append(b, ']')
	}
	return b
}

// PrefixTokens returns the prompt tokens of the pieces up to and including
// piece i, by the same rule as the whole prompt, so a prefix never counts
// more than the prompt it begins.
func (r Request) PrefixTokens(i int) int64 {
	pieces := r.Pieces[:i+1]
	n := tokens.Prompt(chatMessages(pieces))
	if t := toolsJSON(pieces); t != nil {
		n += tokens.Text(string(t))
	}
	return n
}

// PrefixKeys returns, for every piece, the chained hash of the prompt up to
// and including it: key i matches only when every piece before it did.
func (r Request) PrefixKeys() [][sha256.Size]byte {
	keys := make([][sha256.Size]byte, len(r.Pieces))
	var prev [sha256.Size]byte
	h := sha256.New()
	for i, pc := range r.Pieces {
		h.Reset()
		h.Write(prev[:])
		h.Write([]byte(pc.Kind))
		h.Write([]byte{0})
		h.Write(pc.Canonical)
		h.Sum(prev[:0])
		keys[i] = prev
	}
	return keys
}
