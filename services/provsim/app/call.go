package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/pkg/tokens"
	"github.com/switchboard-ai/switchboard/services/provsim/internal/chatapi"
	"github.com/switchboard-ai/switchboard/services/provsim/internal/promptcache"
	"github.com/switchboard-ai/switchboard/services/provsim/internal/ratelimit"
)

// directiveRE finds a fault directive anywhere in a prompt. End-to-end tests
// through the gateway cannot reach the simulator's admin API per request, but
// the prompt always gets through, so that is where a test says "fail this one".
var directiveRE = regexp.MustCompile(`\[\[provsim:fault=([^\]]*)\]\]`)

// toolRE finds a tool directive, [[provsim:tool=NAME]] or
// [[provsim:tool=NAME {"json":"args"}]]: a reply that calls the client's
// tool NAME (with those arguments), for tests of a gateway's tool turns and
// of coding agents that run the tool. The arguments run up to the first
// "}]]", so a JSON object may hold "]]" inside.
var toolRE = regexp.MustCompile(`\[\[provsim:tool=([A-Za-z0-9_-]{1,64})(?: (\{[\s\S]*?\}))?\]\]`)

// toolPreambleTokens bounds the text a scripted tool call follows.
const toolPreambleTokens = 8

// toolResultQuote bounds how much of a tool's result the reply quotes.
const toolResultQuote = 200

// call is one chat-completions request being served.
type call struct {
	p     *Provider
	ms    *modelState
	cfg   ModelConfig
	cache *promptcache.Cache
	req   chatapi.Request
	wire  wire // the client API's wire format
	w     http.ResponseWriter
	r     *http.Request
	ctx   context.Context

	start   time.Time
	id      string
	created int64

	prompt, cached int64
	keys           []promptcache.Key
	written        int64  // prompt tokens written to the cache
	n              int64  // output tokens to produce
	finishReason   string // "stop" or "length"
	words          []string
	// tool is the tool the reply calls (a tool directive), "" for none.
	tool string
	// toolArgs are the directive's arguments, a JSON object; nil when it
	// gave none.
	toolArgs json.RawMessage

	outcome outcome
	sent    int64 // completion tokens delivered
}

func newCall(p *Provider, ms *modelState, req chatapi.Request, wire wire, w http.ResponseWriter, r *http.Request) *call {
	cfg, cache := ms.snapshot()
	now := p.now()
	return &call{
		p: p, ms: ms, cfg: cfg, cache: cache, req: req, wire: wire, w: w, r: r, ctx: r.Context(),
		start:   now,
		id:      fmt.Sprintf("chatcmpl-provsim-%s-%d", p.name, p.seq.Add(1)),
		created: now.Unix(),
	}
}

// finish records the call's outcome; it runs even when the connection was
// aborted on purpose.
func (c *call) finish() {
	c.p.stats.record(c.cfg.ID, c.outcome, c.prompt, c.cached, c.written, c.sent)
	c.p.logger.Debug("chat completion",
		"model", c.cfg.ID, "stream", c.req.Stream, "outcome", c.outcome.String(),
		"prompt_tokens", c.prompt, "cached_tokens", c.cached, "completion_tokens", c.sent,
		"elapsed", time.Since(c.start))
}

func (c *call) serve() {
	kind, forced, err := faultDirective(c.req)
	if err != nil {
		c.outcome = outcomeBadRequest
		c.wire.fail(c, http.StatusBadRequest, err.Error(), "invalid_request_error", "")
		return
	}
	c.tool, c.toolArgs, err = toolDirective(c.req)
	if err != nil {
		c.outcome = outcomeBadRequest
		writeError(c.w, http.StatusBadRequest, err.Error(), "invalid_request_error", "")
		return
	}
	var result bool
	c.words, result = replyWords(c.req)
	c.n, c.finishReason = outputLength(c.cfg, c.req.MaxTokens)
	if result {
		// An answer to a tool's result says what the tool returned, once,
		// and ends the turn, as a model does once it has what it asked
		// for: an agent then prints it rather than hitting its token cap.
		// Only a cap below the quote cuts it.
		cfg := c.cfg
		cfg.DefaultOutputTokens = int64(len(c.words))
		c.n, c.finishReason = outputLength(cfg, c.req.MaxTokens)
		if c.n >= cfg.DefaultOutputTokens {
			c.n, c.finishReason = cfg.DefaultOutputTokens, "stop"
		}
	}
	if c.tool != "" && c.n > toolPreambleTokens {
		// A model calling a tool says a few words first, not its whole
		// token cap: an agent asking for a large max_tokens gets its tool
		// call at once.
		c.n = toolPreambleTokens
	}
	c.prompt = c.req.PromptTokens()
	c.wire.prepare(c)

	if rps := c.cfg.Limits.RequestsPerSecond; rps > 0 {
		// Checked first and counted on its own: a request this refuses is
		// not counted against the minute's quotas.
		if d := c.ms.second.Admit(ratelimit.Limits{RequestsPerMinute: rps}, 0, c.p.now()); !d.Allowed {
			c.outcome = outcomeRateLimited
			c.wire.failRateLimited(c, c.p.scaled(d.RetryAfter), "Rate limit reached for requests per second.")
			return
		}
	}
	if lim := c.cfg.Limits; lim.RequestsPerMinute > 0 || lim.TokensPerMinute > 0 {
		// Quotas count prompt plus requested output at admission, as OpenAI
		// does: the provider cannot know the real output in advance.
		d := c.ms.window.Admit(ratelimit.Limits{
			RequestsPerMinute: lim.RequestsPerMinute,
			TokensPerMinute:   lim.TokensPerMinute,
		}, c.prompt+c.n, c.p.now())
		c.wire.limitHeaders(c, lim, d)
		if !d.Allowed {
			c.outcome = outcomeRateLimited
			c.wire.failRateLimited(c, c.p.scaled(d.RetryAfter), "Rate limit reached for requests or tokens per minute.")
			return
		}
	}

	if cp := c.cfg.Capacity; cp.RequestsPerMinute > 0 || cp.TokensPerMinute > 0 {
		// The simulation's rule: calls and prompt tokens over a sliding
		// minute, a fixed Retry-After, and no headers announcing it.
		if d := c.ms.capacity.Admit(ratelimit.Limits{RequestsPerMinute: cp.RequestsPerMinute, TokensPerMinute: cp.TokensPerMinute},
			c.prompt, c.p.now()); !d.Allowed {
			c.outcome = outcomeRateLimited
			c.wire.failRateLimited(c, c.p.scaled(cp.RetryAfter.D()), "The server is at capacity (simulated).")
			return
		}
	}
	if r := c.refusal(); r != nil {
		c.outcome = outcomeRefused
		c.wire.fail(c, r.Status, r.Message, r.Type, r.Code)
		return
	}

	var f *FaultConfig
	if forced {
		f = c.faultOfKind(kind)
	} else {
		f = c.drawFault()
	}
	if f != nil {
		switch f.Kind {
		case FaultRateLimit:
			c.outcome = outcomeRateLimited
			c.wire.failRateLimited(c, c.p.scaled(f.RetryAfter.D()), "Rate limit reached (simulated).")
			return
		case FaultUnavailable:
			c.outcome = outcomeUnavailable
			c.wire.fail(c, f.Status, "The server is overloaded or not ready yet (simulated).", "server_error", "service_unavailable")
			return
		case FaultSpendLimit:
			c.outcome = outcomeRateLimited
			c.wire.fail(c, http.StatusTooManyRequests,
				"You exceeded your current quota, please check your plan and billing details (simulated).", "insufficient_quota", "insufficient_quota")
			return
		case FaultOverloaded:
			c.outcome = outcomeUnavailable
			c.wire.failOverloaded(c, c.p.scaled(f.RetryAfter.D()))
			return
		case FaultHang:
			c.outcome = outcomeHang
			select {
			case <-c.ctx.Done():
			case <-c.p.closing:
				// Nothing was sent, and an empty 200 would be a lie: cut it.
				abortConnection()
			}
			return
		}
	}

	if !c.sleep(c.p.firstTokenDelay(c.cfg, c.prompt, c.cached)) {
		c.outcome = outcomeCancelled
		return
	}
	// The prompt is prefilled once the first token is due, so from here on a
	// later request can reuse it — even if this one is then cancelled, as a
	// cancelled hedge leg at a real provider still warms its cache.
	c.wire.recordCache(c)

	switch {
	case f != nil && f.Kind == FaultMalformed:
		c.outcome = outcomeMalformed
		c.wire.malformed(c)
	case f != nil && f.Kind == FaultDrop:
		c.outcome = c.wire.drop(c, f.AfterTokens)
	case f != nil && f.Kind == FaultStreamError:
		c.outcome = c.wire.streamError(c, f.AfterTokens)
	case c.req.Stream:
		c.outcome = c.wire.stream(c)
	default:
		c.outcome = c.wire.complete(c)
	}
}

// refusal is the first scripted refusal whose marker one of the request's
// messages contains, nil when none does.
func (c *call) refusal() *RefusalConfig {
	for i := range c.cfg.Refusals {
		r := &c.cfg.Refusals[i]
		for _, m := range c.req.Messages {
			if strings.Contains(m.Content, r.Match) {
				return r
			}
		}
	}
	return nil
}

// sleep waits for d or until the client goes away; it reports whether the
// full time passed.
func (c *call) sleep(d time.Duration) bool {
	if d <= 0 {
		return c.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// interval is the time between two output tokens.
func (c *call) interval() time.Duration {
	if c.cfg.TokensPerSecond <= 0 {
		return 0
	}
	return c.p.scaled(time.Duration(float64(time.Second) / c.cfg.TokensPerSecond))
}

func (c *call) token(i int64) string { return c.words[i%int64(len(c.words))] + " " }

func (c *call) usage() *chatapi.Usage {
	return &chatapi.Usage{
		PromptTokens:        c.prompt,
		CompletionTokens:    c.n,
		TotalTokens:         c.prompt + c.n,
		PromptTokensDetails: chatapi.PromptDetails{CachedTokens: c.cached},
	}
}

// complete writes a non-streamed reply after the whole generation time.
func (c *call) complete() outcome {
	if !c.sleep(time.Duration(c.n) * c.interval()) {
		return outcomeCancelled
	}
	var content strings.Builder
	for i := range c.n {
		content.WriteString(c.token(i))
	}
	finish := c.finishReason
	msg := &chatapi.Message{Role: "assistant", Content: content.String()}
	if c.tool != "" {
		msg.ToolCalls = []chatapi.ToolCall{{ID: c.toolCallID(), Type: "function",
			Function: chatapi.ToolFunction{Name: c.tool, Arguments: c.toolArguments()}}}
		finish = "tool_calls"
	}
	writeJSON(c.w, http.StatusOK, chatapi.Completion{
		ID: c.id, Object: "chat.completion", Created: c.created, Model: c.cfg.ID,
		Choices: []chatapi.Choice{{
			Message:      msg,
			FinishReason: &finish,
		}},
		Usage: c.usage(),
	})
	c.sent = c.n
	return outcomeOK
}

// streamWriter writes server-sent events and flushes each one, so the client
// sees every token when it is "generated", not when a buffer fills.
type streamWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (c *call) startStream() *streamWriter {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	c.w.WriteHeader(http.StatusOK)
	return &streamWriter{w: c.w, rc: http.NewResponseController(c.w)}
}

func (s *streamWriter) raw(data string) error {
	if _, err := io.WriteString(s.w, "data: "+data+"\n\n"); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *streamWriter) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.raw(string(b))
}

func (c *call) chunk(delta *chatapi.Delta, finish *string) chatapi.Chunk {
	return chatapi.Chunk{
		ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.cfg.ID,
		Choices: []chatapi.Choice{{Delta: delta, FinishReason: finish}},
	}
}

// streamTokens sends the role chunk and then tokens [0, upto) at the model's
// speed; it reports whether the client was still there.
func (c *call) streamTokens(s *streamWriter, upto int64) bool {
	empty := ""
	if s.event(c.chunk(&chatapi.Delta{Role: "assistant", Content: &empty}, nil)) != nil {
		return false
	}
	first := time.Now()
	step := c.interval()
	for i := range upto {
		// Deadlines from the first token, not from the previous write, so
		// slow writes do not make the stream slower than configured.
		if i > 0 && step > 0 && !c.sleep(time.Until(first.Add(time.Duration(i)*step))) {
			return false
		}
		if c.ctx.Err() != nil {
			return false
		}
		tok := c.token(i)
		if s.event(c.chunk(&chatapi.Delta{Content: &tok}, nil)) != nil {
			return false
		}
		c.sent = i + 1
	}
	return true
}

func (c *call) stream() outcome {
	s := c.startStream()
	if !c.streamTokens(s, c.n) {
		c.sent = 0 // a cancelled call delivers nothing billable
		c.cutIfClosing()
		return outcomeCancelled
	}
	finish := c.finishReason
	if c.tool != "" {
		if !c.streamToolCall(s) {
			c.sent = 0
			return outcomeCancelled
		}
		finish = "tool_calls"
	}
	if s.event(c.chunk(&chatapi.Delta{}, &finish)) != nil {
		c.sent = 0
		return outcomeCancelled
	}
	if c.req.IncludeUsage {
		u := chatapi.Chunk{
			ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.cfg.ID,
			Choices: []chatapi.Choice{}, Usage: c.usage(),
		}
		if s.event(u) != nil {
			c.sent = 0
			return outcomeCancelled
		}
	}
	if s.raw("[DONE]") != nil {
		c.sent = 0
		return outcomeCancelled
	}
	return outcomeOK
}

// streamToolCall sends the directive's tool call as a stream does: its
// id and name first, then its arguments in two pieces.
func (c *call) streamToolCall(s *streamWriter) bool {
	zero := 0
	args := c.toolArguments()
	half := len(args) / 2
	for _, tc := range []chatapi.ToolCall{
		{Index: &zero, ID: c.toolCallID(), Type: "function", Function: chatapi.ToolFunction{Name: c.tool}},
		{Index: &zero, Function: chatapi.ToolFunction{Arguments: args[:half]}},
		{Index: &zero, Function: chatapi.ToolFunction{Arguments: args[half:]}},
	} {
		if s.event(c.chunk(&chatapi.Delta{ToolCalls: []chatapi.ToolCall{tc}}, nil)) != nil {
			return false
		}
	}
	return true
}

func (c *call) toolCallID() string { return "call_" + c.id }

// toolArguments are the directive's tool call's arguments: those it
// scripted, or else the reply's first word, so a test can check they went
// through.
func (c *call) toolArguments() string {
	if c.toolArgs != nil {
		return string(c.toolArgs)
	}
	b, _ := json.Marshal(map[string]string{"word": strings.TrimSpace(c.token(0))})
	return string(b)
}

// toolDirective is the tool a [[provsim:tool=NAME]] or
// [[provsim:tool=NAME {...}]] directive in the request's last message asks
// to call, "" when there is none, with its arguments compacted (nil when
// it gave none). Only the last message counts (system messages after it
// aside), and only a user's: once the tool's result follows, the
// conversation goes on with text. Arguments
// that are not a JSON object are an error for the client.
func toolDirective(req chatapi.Request) (string, json.RawMessage, error) {
	last, ok := lastTurn(req)
	if !ok || last.Role != "user" {
		return "", nil, nil
	}
	sm := toolRE.FindStringSubmatch(last.Content)
	if sm == nil {
		return "", nil, nil
	}
	if sm[2] == "" {
		return sm[1], nil, nil
	}
	// The match starts with '{', so valid JSON is an object; compacted, it
	// is on one line, as a provider writes arguments.
	var args bytes.Buffer
	if err := json.Compact(&args, []byte(sm[2])); err != nil {
		return "", nil, fmt.Errorf("provsim tool directive for %q: arguments %.80q are not a JSON object: %w", sm[1], sm[2], err)
	}
	return sm[1], args.Bytes(), nil
}

// lastTurn is the conversation's last message that is not a system
// message: agents put their instructions (a system message, in chat form)
// after the turn they follow, as Claude Code does after its user's first
// message.
func lastTurn(req chatapi.Request) (tokens.Message, bool) {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role != "system" {
			return req.Messages[i], true
		}
	}
	return tokens.Message{}, false
}

// replyWords returns the words the reply cycles through, and whether they
// answer a tool's result. When the last message is a tool's result, the
// reply quotes it ("tool result: " and its first 200 characters), which
// shows at the far end of a gateway and an agent that the tool ran and its
// result came back; otherwise it echoes the last user message.
func replyWords(req chatapi.Request) ([]string, bool) {
	if last, ok := lastTurn(req); ok && last.Role == "tool" {
		quote := last.Content
		if r := []rune(quote); len(r) > toolResultQuote {
			quote = string(r[:toolResultQuote])
		}
		return strings.Fields("tool result: " + quote), true
	}
	return outputWords(req.LastUserText()), false
}

// drop cuts the connection after a few tokens: mid-stream for a stream, and
// before any byte (after the same generation time) otherwise.
// A client that leaves first makes it a plain cancellation.
func (c *call) drop(after int64) outcome { //nolint:unparam // a drop unwinds by aborting the connection, so it returns only when cancelled
	after = min(after, c.n)
	if c.req.Stream {
		s := c.startStream()
		if !c.streamTokens(s, after) {
			c.sent = 0
			return outcomeCancelled
		}
	} else if !c.sleep(time.Duration(after) * c.interval()) {
		return outcomeCancelled
	}
	// Set before aborting: the deferred finish records it while unwinding.
	c.outcome = outcomeDrop
	abortConnection()
	return outcomeDrop
}

// writeMalformed sends a truncated JSON document where the first event (or
// the body) should be, then ends the reply cleanly: the bytes arrive, but no
// parser accepts them.
func (c *call) writeMalformed() {
	if c.req.Stream {
		s := c.startStream()
		_ = s.raw(`{"id":`)
		return
	}
	c.w.Header().Set("Content-Type", "application/json")
	c.w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(c.w, `{"id":`)
}

// cutIfClosing aborts the connection of a stream stopped because the
// provider shuts down: returning would end the chunked body cleanly, and the
// client could not tell a cut stream from a finished one.
func (c *call) cutIfClosing() {
	select {
	case <-c.p.closing:
		c.outcome = outcomeCancelled
		abortConnection()
	default:
	}
}

// abortConnection makes net/http close the connection without finishing the
// response, which the client sees as an unexpected EOF. ErrAbortHandler is the
// documented way to do that, and net/http does not log it.
func abortConnection() {
	panic(http.ErrAbortHandler)
}

// faultOfKind returns the model's configured fault of that kind, for its
// parameters, or one with default parameters.
func (c *call) faultOfKind(kind FaultKind) *FaultConfig {
	for i := range c.cfg.Faults {
		if c.cfg.Faults[i].Kind == kind {
			f := c.cfg.Faults[i]
			return &f
		}
	}
	f := ModelConfig{Faults: []FaultConfig{{Kind: kind}}}.withDefaults().Faults[0]
	return &f
}

// drawFault picks at most one fault by rate with the seeded generator; the
// generator is not touched when no fault has a rate, so configurations without
// random faults keep the same jitter sequence.
func (c *call) drawFault() *FaultConfig {
	if !slices.ContainsFunc(c.cfg.Faults, func(f FaultConfig) bool { return f.Rate > 0 }) {
		return nil
	}
	u := c.p.uniform()
	cum := 0.0
	for i := range c.cfg.Faults {
		cum += c.cfg.Faults[i].Rate
		if u < cum {
			f := c.cfg.Faults[i]
			return &f
		}
	}
	return nil
}

// faultDirective finds a [[provsim:fault=KIND]] directive in any message.
func faultDirective(req chatapi.Request) (FaultKind, bool, error) {
	for _, m := range req.Messages {
		if sm := directiveRE.FindStringSubmatch(m.Content); sm != nil {
			kind := FaultKind(sm[1])
			if !slices.Contains(faultKinds, kind) {
				return "", false, fmt.Errorf("unknown provsim fault %q in directive (want one of %q)", sm[1], faultKinds)
			}
			return kind, true, nil
		}
	}
	return "", false, nil
}

// MaxGeneratedTokens bounds every reply, whatever the request and the
// model's configuration ask: a max_tokens near 2^63 must not make the
// simulator generate (or hold in memory) an endless answer. It is above any
// real model's output limit.
const MaxGeneratedTokens = 1 << 17

// outputLength returns how many tokens to produce and why generation stops:
// the request's cap (capped by the model's) ends it with "length"; otherwise
// the model's natural length ends it with "stop".
func outputLength(cfg ModelConfig, maxTokens *int64) (int64, string) {
	n, reason := cfg.DefaultOutputTokens, "stop"
	if maxTokens != nil {
		n, reason = *maxTokens, "length"
	}
	if cfg.MaxOutputTokens > 0 && n > cfg.MaxOutputTokens {
		n, reason = cfg.MaxOutputTokens, "length"
	}
	if n > MaxGeneratedTokens {
		n, reason = MaxGeneratedTokens, "length"
	}
	return n, reason
}

// outputWords returns the words the reply cycles through: those of the last
// user message without directives, or "ok". Echoing the prompt makes replies
// deterministic and easy to check at the far end of a gateway.
func outputWords(lastUser string) []string {
	words := strings.Fields(toolRE.ReplaceAllString(directiveRE.ReplaceAllString(lastUser, " "), " "))
	if len(words) == 0 {
		return []string{"ok"}
	}
	return words
}

// setLimitHeaders sets OpenAI's x-ratelimit-* headers for the quotas that are set.
func setLimitHeaders(h http.Header, lim LimitsConfig, d ratelimit.Decision) {
	if lim.RequestsPerMinute > 0 {
		h.Set("X-Ratelimit-Limit-Requests", strconv.FormatInt(d.Requests.Limit, 10))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.FormatInt(d.Requests.Remaining, 10))
		h.Set("X-Ratelimit-Reset-Requests", formatReset(d.Requests.Reset))
	}
	if lim.TokensPerMinute > 0 {
		h.Set("X-Ratelimit-Limit-Tokens", strconv.FormatInt(d.Tokens.Limit, 10))
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.FormatInt(d.Tokens.Remaining, 10))
		h.Set("X-Ratelimit-Reset-Tokens", formatReset(d.Tokens.Reset))
	}
}

// formatReset writes a reset delay as OpenAI does ("12s", "6m0s", "120ms"),
// rounded up to the millisecond so it is never early.
func formatReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond).String()
}

// writeRateLimited answers 429 with Retry-After in whole seconds (rounded up,
// at least 1) and retry-after-ms for clients that want precision, as OpenAI
// sends both.
// writeOverloaded answers 529 as Anthropic does when it is overloaded for
// everyone, with Retry-After in whole seconds (rounded up).
func writeOverloaded(w http.ResponseWriter, retry time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(retry.Seconds()))), 10))
	writeError(w, 529, "Overloaded (simulated).", "overloaded_error", "")
}

func writeRateLimited(w http.ResponseWriter, retry time.Duration, message string) {
	secs := max(1, int64(math.Ceil(retry.Seconds())))
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	w.Header().Set("Retry-After-Ms", strconv.FormatInt(max(0, retry.Milliseconds()), 10))
	writeError(w, http.StatusTooManyRequests, message, "rate_limit_error", "rate_limit_exceeded")
}
