package app

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-ai/switchboard/services/provsim/internal/chatapi"
	"github.com/switchboard-ai/switchboard/services/provsim/internal/messagesapi"
	"github.com/switchboard-ai/switchboard/services/provsim/internal/promptcache"
	"github.com/switchboard-ai/switchboard/services/provsim/internal/ratelimit"
)

// messagesAPI is Anthropic's Messages API. A request is converted to the
// simulator's chat form (system first, tool results as tool messages), so it
// is simulated exactly as a chat completion is; its wire, a *messagesCall,
// keeps what the chat form cannot say: breakpoints, thinking, stop sequences.
type messagesAPI struct{}

var (
	_ clientAPI = messagesAPI{}
	_ wire      = (*messagesCall)(nil)
)

// requestIDHeader is the header Anthropic names every answer with.
const requestIDHeader = "Request-Id"

// authorized accepts the key as x-api-key, Anthropic's header, or as a
// bearer token, which Anthropic-compatible endpoints also take.
func (messagesAPI) authorized(p *Provider, r *http.Request) bool {
	if got := r.Header.Get("X-Api-Key"); got != "" {
		return p.keyMatches(got)
	}
	got, _ := bearer(r)
	return p.keyMatches(got)
}

func (messagesAPI) checkHeaders(r *http.Request) error {
	if r.Header.Get("Anthropic-Version") == "" {
		return errors.New("anthropic-version: header is required")
	}
	return nil
}

func (messagesAPI) parse(body []byte) (chatapi.Request, wire, error) {
	req, err := messagesapi.ParseRequest(body)
	if err != nil {
		return chatapi.Request{}, nil, err
	}
	return chatapi.Request{
		Model:     req.Model,
		Messages:  req.ChatMessages(),
		Stream:    req.Stream,
		MaxTokens: &req.MaxTokens,
		Tools:     req.ToolsJSON(),
	}, &messagesCall{req: req}, nil
}

func (messagesAPI) count(s *Stats) { s.Messages++ }

func (messagesAPI) writeError(w http.ResponseWriter, status int, message, typ, _ string) {
	writeMessagesError(w, status, message, typ)
}

func (messagesAPI) writeUnauthorized(w http.ResponseWriter) {
	writeMessagesError(w, http.StatusUnauthorized, "invalid x-api-key", "")
}

func (messagesAPI) writeUnknownModel(w http.ResponseWriter, model string) {
	writeMessagesError(w, http.StatusNotFound, "model: "+model, "")
}

// writeMessagesError answers in Anthropic's error format. The type follows
// the status as on Anthropic's API; an exhausted account (OpenAI's
// insufficient_quota) is Anthropic's 402 billing_error.
func writeMessagesError(w http.ResponseWriter, status int, message, typ string) {
	if typ == "insufficient_quota" {
		status = http.StatusPaymentRequired
	}
	writeJSON(w, status, messagesapi.NewError(messagesapi.ErrorType(status), message, requestID(w.Header())))
}

// requestID returns the answer's request id, naming it first if need be.
func requestID(h http.Header) string {
	if id := h.Get(requestIDHeader); id != "" {
		return id
	}
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	id := "req_provsim_" + hex.EncodeToString(b[:])
	h.Set(requestIDHeader, id)
	return id
}

// messagesCall is the wire of one Messages call: what the Messages request
// says beyond the chat form, and the reply it makes.
type messagesCall struct {
	req messagesapi.Request
	id  string

	// The cache: read is the prompt tokens read (from the prefix ending at
	// piece readAt, renewed with readTTL); writes the breakpoints written.
	keys               []promptcache.Key
	readAt             int
	readTTL            time.Duration
	read               int64
	writes             []int
	create5m, create1h int64
	thinkTokens        int64
	text               []string // the text block's pieces, one a token
	stopReason         string
	stopSequence       *string
	toolID             string
}

// prepare reads what only the Messages request says: the reply's length,
// thinking, stop sequences and tool choice, and its cache breakpoints.
func (m *messagesCall) prepare(c *call) {
	requestID(c.w.Header())
	m.id = "msg_" + strings.TrimPrefix(c.id, "chatcmpl-")
	m.toolID = "toolu_" + strings.TrimPrefix(c.id, "chatcmpl-")
	switch m.req.ToolChoice {
	case "none":
		c.tool = ""
	case "tool":
		c.tool = m.req.ToolChoiceName
	case "any":
		if c.tool == "" {
			c.tool = m.req.ToolNames[0]
		}
	}
	m.plan(c)
	m.lookup(c)
}

// plan decides the reply. max_tokens is a cap on Anthropic's API (and
// required), not a length: the model answers its natural length
// (default_output_tokens), after as many thinking tokens (at most the
// budget) when thinking is on, and stops at max_tokens if that comes first.
func (m *messagesCall) plan(c *call) {
	textN, textReason := outputLength(c.cfg, nil)
	think := int64(0)
	if m.req.Thinking {
		think = textN
		if b := m.req.ThinkingBudget; b > 0 {
			think = min(think, b)
		}
	}
	capN, _ := outputLength(c.cfg, &m.req.MaxTokens)
	n, reason := think+textN, textReason
	if n > capN {
		n, reason = capN, "length"
	}
	m.thinkTokens = min(think, n)
	textN = n - m.thinkTokens
	m.stopReason = "end_turn"
	if reason == "length" {
		m.stopReason = "max_tokens"
	}

	var full strings.Builder
	for i := range textN {
		full.WriteString(c.token(i))
	}
	// With a stop sequence, the tokens run until the one that completes it,
	// and the text is cut where it begins.
	cut, seq := stopAt(full.String(), m.req.StopSequences)
	at := 0
	m.text = m.text[:0]
	for i := range textN {
		tok := c.token(i)
		if seq != nil {
			if at >= cut+len(*seq) {
				break
			}
			tok = tok[:max(0, min(len(tok), cut-at))]
		}
		m.text = append(m.text, tok)
		at += len(c.token(i))
	}
	if seq != nil {
		m.stopReason, m.stopSequence = "stop_sequence", seq
		n = m.thinkTokens + int64(len(m.text))
	}
	if c.tool != "" && m.stopReason == "end_turn" {
		m.stopReason = "tool_use"
	} else {
		c.tool = ""
	}
	c.n = n
	c.finishReason = reason
}

// stopAt returns where in text the first stop sequence to complete begins,
// and which one it is (nil for none): the model stops once it has produced
// the sequence, and the reply's text excludes it.
func stopAt(text string, seqs []string) (int, *string) {
	best, end := -1, math.MaxInt
	var which *string
	for i, s := range seqs {
		at := strings.Index(text, s)
		if at >= 0 && at+len(s) < end {
			best, end, which = at, at+len(s), &seqs[i]
		}
	}
	return best, which
}

// lookup finds the longest cached prefix and plans the cache writes, as
// Anthropic does: only the prefixes ending at a cache_control breakpoint
// are written; a breakpoint finds a hit at itself or at one of the 19 pieces
// before it (an earlier request's breakpoint); a prefix under the model's
// min_tokens is never cached. Each written segment, from the hit (or the
// previous breakpoint written) to a breakpoint, is billed at that
// breakpoint's ttl.
func (m *messagesCall) lookup(c *call) {
	m.readAt = -1
	if c.cache == nil {
		return
	}
	now, minTokens := c.p.now(), c.cache.Config().MinTokens
	raw := m.req.PrefixKeys()
	m.keys = make([]promptcache.Key, len(raw))
	for i, k := range raw {
		m.keys[i] = promptcache.Key(k)
	}
	for i, pc := range m.req.Pieces {
		if pc.TTL == 0 {
			continue
		}
		for j := i; j >= 0 && j > i-lookbackPieces; j-- {
			if j > m.readAt && c.cache.Fresh(m.keys[j], now) && m.req.PrefixTokens(j) >= minTokens {
				m.readAt, m.readTTL = j, pc.TTL
				break
			}
		}
	}
	if m.readAt >= 0 {
		m.read = m.req.PrefixTokens(m.readAt)
	}
	prev := m.read
	for i, pc := range m.req.Pieces {
		if pc.TTL == 0 || i <= m.readAt {
			continue
		}
		t := m.req.PrefixTokens(i)
		if t < minTokens {
			continue
		}
		m.writes = append(m.writes, i)
		if pc.TTL == messagesapi.TTL1h {
			m.create1h += t - prev
		} else {
			m.create5m += t - prev
		}
		prev = t
	}
	c.cached = m.read
}

// lookbackPieces is how far before a breakpoint a hit is looked for.
const lookbackPieces = 20

// recordCache writes the planned breakpoints and renews the entry read,
// once the prompt is prefilled.
func (m *messagesCall) recordCache(c *call) {
	if c.cache == nil {
		return
	}
	now := c.p.now()
	if m.readAt >= 0 {
		c.cache.Put(m.keys[m.readAt], m.readTTL, now)
	}
	for _, i := range m.writes {
		c.cache.Put(m.keys[i], m.req.Pieces[i].TTL, now)
	}
	c.written = m.create5m + m.create1h
}

func (m *messagesCall) usage(c *call, output int64) messagesapi.Usage {
	return messagesapi.Usage{
		InputTokens:              c.prompt - m.read - m.create5m - m.create1h,
		CacheCreationInputTokens: m.create5m + m.create1h,
		CacheReadInputTokens:     m.read,
		CacheCreation:            &messagesapi.CacheCreation{Ephemeral5mInputTokens: m.create5m, Ephemeral1hInputTokens: m.create1h},
		OutputTokens:             output,
		ServiceTier:              "standard",
	}
}

func (m *messagesCall) fail(c *call, status int, message, typ, _ string) {
	writeMessagesError(c.w, status, message, typ)
}

// failRateLimited answers 429 with retry-after in whole seconds, rounded up.
func (m *messagesCall) failRateLimited(c *call, retry time.Duration, message string) {
	c.w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(retry.Seconds()))), 10))
	writeMessagesError(c.w, http.StatusTooManyRequests, message, "")
}

func (m *messagesCall) failOverloaded(c *call, retry time.Duration) {
	c.w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(retry.Seconds()))), 10))
	writeMessagesError(c.w, messagesapi.StatusOverloaded, "Overloaded (simulated).", "")
}

// limitHeaders sets Anthropic's anthropic-ratelimit-* headers for the quotas
// that are set, resets as RFC 3339 times.
func (m *messagesCall) limitHeaders(c *call, lim LimitsConfig, d ratelimit.Decision) {
	h, now := c.w.Header(), c.p.now()
	set := func(unit string, q ratelimit.Status) {
		h.Set("Anthropic-Ratelimit-"+unit+"-Limit", strconv.FormatInt(q.Limit, 10))
		h.Set("Anthropic-Ratelimit-"+unit+"-Remaining", strconv.FormatInt(q.Remaining, 10))
		h.Set("Anthropic-Ratelimit-"+unit+"-Reset", now.Add(q.Reset).UTC().Format(time.RFC3339))
	}
	if lim.RequestsPerMinute > 0 {
		set("Requests", d.Requests)
	}
	if lim.TokensPerMinute > 0 {
		set("Tokens", d.Tokens)
	}
}
