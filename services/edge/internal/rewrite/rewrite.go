// Package rewrite turns an OpenAI-compatible provider's chat answer, or
// each chunk of its stream, into the client's: the edge's request id, the
// canonical model name, the serving provider, and usage carrying what the
// client is billed. It also reads what the edge needs from each chunk: does
// it carry a token (Info.Token says what counts as one), did a
// choice finish, the provider's usage, an error object, and the size of the
// generated text. Framing of the event stream is the sse package's.
package rewrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/switchboard-ai/switchboard/pkg/pricing"
)

// Info is what the edge learns from one answer or stream chunk.
type Info struct {
	// Token is set when the chunk carries a token: a non-empty
	// delta.content, delta.reasoning_content or delta.reasoning, a non-empty
	// delta.tool_calls, or a finish_reason.
	Token bool
	// Finish is set when a choice finished.
	Finish bool
	// Usage is the provider's usage, when the chunk carries it.
	Usage *pricing.Usage
	// ErrMsg is set when the chunk is an error object instead of an answer.
	ErrMsg string
	// TextBytes is the size of the generated text the chunk carries (content,
	// reasoning, tool call names and arguments), for estimating output tokens
	// when the provider reports no usage.
	TextBytes int64
}

var errMalformed = errors.New("malformed answer")

// Rewriter turns a provider's answer or chunks into the client's: id set to
// the edge's request id, model to the canonical model, a top-level provider,
// and usage carrying what the client is billed as usage.cost.
type Rewriter struct {
	// ID replaces the provider's completion id; nil keeps it.
	ID json.RawMessage
	// Model and Provider are JSON strings.
	Model, Provider json.RawMessage
	// KeepUsage forwards usage to the client; without it a usage-only chunk
	// is dropped and usage removed from other chunks.
	KeepUsage bool
	// Cost prices a usage for the client, set as usage.cost; nil adds none.
	Cost func(pricing.Usage) float64
	// AddUsage builds a usage object for an answer without one, from the
	// generated text's size; nil adds none. Used for non-streamed answers.
	AddUsage func(textBytes int64) json.RawMessage

	// Scratch space reused from chunk to chunk: the members of the chunk
	// and of its usage, and the decoded names of members whose name is
	// escaped.
	members, usageMembers []member
	names                 []byte
}

// Rewrite inspects one answer or chunk and writes it for the client, in a
// new slice. It returns a nil output for a usage-only chunk the client did
// not ask for, and for an error object. Every other field passes through
// unchanged.
func (rw *Rewriter) Rewrite(data []byte) ([]byte, Info, error) {
	size := len(data) + len(rw.ID) + len(rw.Model) + len(rw.Provider) + 64
	out, info, forward, err := rw.Append(make([]byte, 0, size), data)
	if err != nil || !forward {
		return nil, info, err
	}
	return out, info, nil
}

// Append is Rewrite on the bytes: it reads data in one pass and appends the
// client's chunk to dst, copying every member of the chunk as it is but the
// ones it rewrites, and allocates nothing for an ordinary chunk. forward is
// false, and dst returned as it was, for a chunk the client does not get
// (a usage-only chunk it did not ask for, an error object). A member named
// twice keeps its last value, as a decoder would read it. The Rewriter
// keeps scratch space between calls: it serves one answer at a time.
func (rw *Rewriter) Append(dst, data []byte) (out []byte, info Info, forward bool, err error) {
	s := scanner{data: data}
	var c chunk
	if cap(rw.members)+cap(rw.usageMembers) > maxKeptMembers || cap(rw.names) > maxKeptMembers*8 {
		// A chunk of thousands of members does not make every later one
		// hold their space.
		rw.members, rw.usageMembers, rw.names = nil, nil, nil
	}
	rw.members, rw.usageMembers, rw.names = rw.members[:0], rw.usageMembers[:0], rw.names[:0]
	if rw.members == nil {
		rw.members = getMembers()
	}
	if !rw.scanTop(&s, &c) {
		return dst, info, false, fmt.Errorf("%w: not a JSON object", errMalformed)
	}
	if c.hasError && !c.hasChoices {
		info.ErrMsg = ParseError(data).Message
		if info.ErrMsg == "" {
			info.ErrMsg = "provider sent an error"
		}
		return dst, info, false, nil
	}
	if !c.hasChoices && !c.hasUsage {
		return dst, info, false, fmt.Errorf("%w: no choices", errMalformed)
	}
	if c.choicesBad {
		return dst, info, false, fmt.Errorf("%w: choices: not a list of choice objects", errMalformed)
	}
	info.Finish = c.finish
	info.Token = c.token || c.finish
	info.TextBytes = c.text
	if c.hasUsage && c.usageOK {
		u := c.usage
		info.Usage = &u
	}
	mode := usageAsIs
	var cost float64
	var added json.RawMessage
	switch {
	case !rw.KeepUsage:
		if c.hasUsage && c.nChoices == 0 {
			return dst, info, false, nil
		}
		mode = usageDrop
	case info.Usage != nil && rw.Cost != nil:
		mode, cost = usageCost, rw.Cost(*info.Usage)
	case !c.hasUsage && rw.AddUsage != nil:
		mode, added = usageAdd, rw.AddUsage(info.TextBytes)
	}
	return rw.write(dst, data, mode, cost, added), info, true, nil
}

// usageMode is what becomes of a chunk's usage.
type usageMode int

const (
	usageAsIs usageMode = iota
	usageDrop           // removed: the client did not ask for it
	usageCost           // the provider's, with the client's cost set
	usageAdd            // an estimate, for an answer without one
)

// write appends the client's chunk: the members of data in their order
// (but for those named again later), id, model and provider replaced or
// added, usage as mode says.
func (rw *Rewriter) write(dst, data []byte, mode usageMode, cost float64, added json.RawMessage) []byte {
	rw.markRepeated(data, rw.members)
	dst = append(dst, '{')
	var seenID, seenModel, seenProvider, seenUsage bool
	n := 0
	for _, m := range rw.members {
		if m.repeated {
			continue
		}
		val := data[m.val.start:m.val.end]
		switch m.role {
		case roleID:
			seenID = true
			if rw.ID != nil {
				val = rw.ID
			}
		case roleModel:
			seenModel, val = true, rw.Model
		case roleProvider:
			seenProvider, val = true, rw.Provider
		case roleUsage:
			seenUsage = true
			switch mode {
			case usageDrop:
				continue
			case usageAdd:
				val = added
			case usageCost:
				dst = rw.member(dst, n, data[m.key.raw.start:m.key.raw.end], nil)
				dst = rw.usageWithCost(dst, data, cost)
				n++
				continue
			}
		}
		dst = rw.member(dst, n, data[m.key.raw.start:m.key.raw.end], val)
		n++
	}
	if !seenID && rw.ID != nil {
		dst = rw.member(dst, n, []byte(`"id"`), rw.ID)
		n++
	}
	if !seenModel {
		dst = rw.member(dst, n, []byte(`"model"`), rw.Model)
		n++
	}
	if !seenProvider {
		dst = rw.member(dst, n, []byte(`"provider"`), rw.Provider)
		n++
	}
	if !seenUsage && mode == usageAdd {
		dst = rw.member(dst, n, []byte(`"usage"`), added)
	}
	return append(dst, '}')
}

// member appends the n-th member of an object: its quoted name and value.
func (rw *Rewriter) member(dst []byte, n int, name, val []byte) []byte {
	if n > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, name...)
	dst = append(dst, ':')
	return append(dst, val...)
}

// usageWithCost appends the chunk's usage object with cost set, replacing
// a provider's own cost field, which is in the provider's terms, not the
// client's bill.
func (rw *Rewriter) usageWithCost(dst, data []byte, cost float64) []byte {
	rw.markRepeated(data, rw.usageMembers)
	dst = append(dst, '{')
	n := 0
	for _, m := range rw.usageMembers {
		if m.repeated || m.role == roleCost {
			continue
		}
		dst = rw.member(dst, n, data[m.key.raw.start:m.key.raw.end], data[m.val.start:m.val.end])
		n++
	}
	dst = rw.member(dst, n, []byte(`"cost"`), nil)
	dst = appendCost(dst, cost)
	return append(dst, '}')
}

// role is what an object member is to the rewriting.
type role uint8

const (
	roleOther role = iota
	roleID
	roleModel
	roleProvider
	roleUsage
	roleChoices
	roleError
	roleCost // usage.cost
)

// member is one member of an object as scanned.
type member struct {
	key key
	val span
	// name is the decoded name in Rewriter.names, for a key that is not
	// plain.
	name     span
	role     role
	repeated bool
}

// nameOf is m's decoded name.
func (rw *Rewriter) nameOf(data []byte, m *member) []byte {
	if m.key.plain() {
		return data[m.key.raw.start+1 : m.key.raw.end-1]
	}
	return rw.names[m.name.start:m.name.end]
}

// keep records a scanned member, its decoded name kept when it is not
// plain.
func (rw *Rewriter) keep(ms []member, s *scanner, m member) []member {
	if !m.key.plain() {
		start := len(rw.names)
		var name []byte
		name, rw.names = s.name(m.key, rw.names)
		if len(rw.names) == start { // plain text after all, in data
			rw.names = append(rw.names, name...)
		}
		m.name = span{start, len(rw.names)}
	}
	return append(ms, m)
}

// scratch keeps the member lists of released Rewriters (*[]member).
var scratch sync.Pool

// getMembers returns an empty member list.
func getMembers() []member {
	if ms, ok := scratch.Get().(*[]member); ok {
		return (*ms)[:0]
	}
	return make([]member, 0, 8) // a chunk has a handful
}

// Release gives the Rewriter's scratch space back for other answers, once
// it has rewritten its last chunk; it may still be used afterwards, at the
// cost of new scratch space.
func (rw *Rewriter) Release() {
	if ms := rw.members; ms != nil && cap(ms) <= maxKeptMembers {
		scratch.Put(&ms)
	}
	rw.members, rw.usageMembers, rw.names = nil, nil, nil
}

// maxKeptMembers bounds the scratch space a Rewriter keeps between chunks.
const maxKeptMembers = 256

// maxPairwise bounds the members compared pair by pair for repeated names;
// past it, a map.
const maxPairwise = 32

// markRepeated marks the members whose name is named again later.
func (rw *Rewriter) markRepeated(data []byte, ms []member) {
	if len(ms) <= maxPairwise {
		for i := range ms {
			a := rw.nameOf(data, &ms[i])
			for j := i + 1; j < len(ms); j++ {
				if bytes.Equal(a, rw.nameOf(data, &ms[j])) {
					ms[i].repeated = true
					break
				}
			}
		}
		return
	}
	last := make(map[string]int, len(ms))
	for i := range ms {
		last[string(rw.nameOf(data, &ms[i]))] = i
	}
	for i := range ms {
		ms[i].repeated = last[string(rw.nameOf(data, &ms[i]))] != i
	}
}

// chunk is what one answer or chunk says, as scanned.
type chunk struct {
	hasChoices bool
	// choicesBad is set when choices is not a list of choice objects as
	// the edge reads them.
	choicesBad bool
	nChoices   int
	finish     bool
	token      bool
	text       int64

	// hasError is set when an error member is there, errNull when it is
	// null.
	hasError, errNull bool

	// hasUsage is set when usage is there and not null; usageOK when it
	// reads as a usage, which is then usage.
	hasUsage, usageOK bool
	usage             pricing.Usage
}

// scanTop scans a whole answer or chunk, an object, recording its members.
func (rw *Rewriter) scanTop(s *scanner, c *chunk) bool {
	if s.peek() != '{' {
		return false
	}
	s.pos++
	for first := true; ; first = false {
		k, more, ok := s.nextKey(first)
		if !ok {
			return false
		}
		if !more {
			break
		}
		m := member{key: k, val: span{start: s.pos}, role: s.role(k)}
		switch m.role {
		case roleChoices:
			c.hasChoices = true
			ok = rw.choices(s, c)
		case roleUsage:
			ok = rw.usage(s, c)
		case roleError:
			c.hasError, c.errNull = true, s.peek() == 'n'
			ok = s.skip(2)
		default:
			ok = s.skip(2)
		}
		if !ok {
			return false
		}
		m.val.end = s.pos
		rw.members = rw.keep(rw.members, s, m)
	}
	s.ws()
	if c.hasError && c.errNull {
		c.hasError = false
	}
	return s.pos == len(s.data)
}

// role is what a top-level member is.
func (s *scanner) role(k key) role {
	switch string(s.exact(k)) {
	case "id":
		return roleID
	case "model":
		return roleModel
	case "provider":
		return roleProvider
	case "usage":
		return roleUsage
	case "choices":
		return roleChoices
	case "error":
		return roleError
	}
	return roleOther
}

// choices scans the choices list, which the last one named replaces.
func (rw *Rewriter) choices(s *scanner, c *chunk) bool {
	c.choicesBad, c.nChoices, c.finish, c.token, c.text = false, 0, false, false, 0
	switch s.peek() {
	case 'n':
		return s.lit("null")
	case '[':
	default:
		c.choicesBad = true
		return s.skip(2)
	}
	s.pos++
	for first := true; ; first = false {
		more, ok := s.nextElem(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		c.nChoices++
		if !s.choice(c) {
			return false
		}
	}
}

// text is a string member: set when it is there and not null, n its
// decoded length.
type text struct {
	set bool
	n   int64
}

// delta is a choice's delta or message as far as it is read.
type delta struct {
	there                       bool
	content, reasoningC, reason text
	// tools is the tool_calls value, toolText the size of its generated
	// text.
	tools    span
	toolText int64
}

// choice scans one choice and adds what it says to c.
func (s *scanner) choice(c *chunk) bool {
	switch s.peek() {
	case 'n':
		return s.lit("null")
	case '{':
	default:
		c.choicesBad = true
		return s.skip(3)
	}
	s.pos++
	var d, m delta
	var finish text
	for first := true; ; first = false {
		k, more, ok := s.nextKey(first)
		if !ok {
			return false
		}
		if !more {
			break
		}
		switch {
		case s.matches(k, "delta"):
			ok = s.delta(c, &d, false)
		case s.matches(k, "message"):
			ok = s.delta(c, &m, true)
		case s.matches(k, "finish_reason"):
			ok = s.strField(&finish, &c.choicesBad, 4)
		default:
			ok = s.skip(4)
		}
		if !ok {
			return false
		}
	}
	if finish.set && finish.n > 0 {
		c.finish = true
	}
	if m.there {
		c.text += m.content.n + m.reasoningC.n + m.reason.n + m.toolText
	}
	if d.there {
		tools := s.data[d.tools.start:d.tools.end]
		hasTools := len(tools) > 0 && string(tools) != "null" && string(tools) != "[]"
		if d.content.n > 0 || d.reasoningC.n > 0 || d.reason.n > 0 || hasTools {
			c.token = true
		}
		c.text += d.content.n + d.reasoningC.n + d.reason.n
		if hasTools {
			c.text += d.toolText
		}
	}
	return true
}

// delta scans a choice's delta or (lenient) message into d, which a delta
// or message named again adds to, and null clears.
func (s *scanner) delta(c *chunk, d *delta, lenient bool) bool {
	switch s.peek() {
	case 'n':
		*d = delta{}
		return s.lit("null")
	case '{':
	default:
		c.choicesBad = true
		return s.skip(4)
	}
	if !d.there {
		*d = delta{there: true}
	}
	bad := &c.choicesBad
	if lenient {
		bad = nil
	}
	s.pos++
	for first := true; ; first = false {
		k, more, ok := s.nextKey(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		switch {
		case s.matches(k, "content"):
			ok = s.strField(&d.content, bad, 5)
		case s.matches(k, "reasoning_content"):
			ok = s.strField(&d.reasoningC, bad, 5)
		case s.matches(k, "reasoning"):
			ok = s.strField(&d.reason, bad, 5)
		case s.matches(k, "tool_calls"):
			start := s.pos
			d.toolText, ok = s.toolCalls()
			d.tools = span{start, s.pos}
		default:
			ok = s.skip(5)
		}
		if !ok {
			return false
		}
	}
}

// strField scans a string member (at depth) into t: a string sets it,
// null unsets it; anything else sets bad, or, when bad is nil (a lenient
// member), leaves t as it was.
func (s *scanner) strField(t *text, bad *bool, depth int) bool {
	switch s.peek() {
	case 'n':
		*t = text{}
		return s.lit("null")
	case '"':
		start := s.pos
		f, ok := s.str()
		if ok {
			*t = text{set: true, n: decodedLen(s.data[start:s.pos], f)}
		}
		return ok
	}
	if bad != nil {
		*bad = true
	}
	return s.skip(depth)
}

// toolCalls scans a tool_calls list (depth 5) and returns the size of its
// generated text: every function name and arguments string. Anything
// unreadable in it makes the size 0.
func (s *scanner) toolCalls() (int64, bool) {
	switch s.peek() {
	case '[':
	default:
		return 0, s.skip(5)
	}
	s.pos++
	var n int64
	bad := false
	for first := true; ; first = false {
		more, ok := s.nextElem(first)
		if !ok {
			return 0, false
		}
		if !more {
			break
		}
		switch s.peek() {
		case 'n':
			ok = s.lit("null")
		case '{':
			var name, args text
			ok = s.toolCall(&name, &args, &bad)
			n += name.n + args.n
		default:
			bad = true
			ok = s.skip(6)
		}
		if !ok {
			return 0, false
		}
	}
	if bad {
		return 0, true
	}
	return n, true
}

// toolCall scans one tool call (an object, depth 6) for its function's
// name and arguments; bad is set when it does not read as a tool call.
func (s *scanner) toolCall(name, args *text, bad *bool) bool {
	s.pos++
	for first := true; ; first = false {
		k, more, ok := s.nextKey(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		if !s.matches(k, "function") {
			if !s.skip(7) {
				return false
			}
			continue
		}
		switch s.peek() {
		case 'n':
			ok = s.lit("null")
		case '{':
			s.pos++
			for first := true; ; first = false {
				k, more, ok := s.nextKey(first)
				if !ok {
					return false
				}
				if !more {
					break
				}
				switch {
				case s.matches(k, "name"):
					ok = s.strField(name, nil, 8)
				case s.matches(k, "arguments"):
					ok = s.strField(args, nil, 8)
				default:
					ok = s.skip(8)
				}
				if !ok {
					return false
				}
			}
		default:
			*bad = true
			ok = s.skip(7)
		}
		if !ok {
			return false
		}
	}
}

// usage scans the usage member, which the last one named replaces.
func (rw *Rewriter) usage(s *scanner, c *chunk) bool {
	c.hasUsage, c.usageOK, c.usage = false, false, pricing.Usage{}
	rw.usageMembers = rw.usageMembers[:0]
	switch s.peek() {
	case 'n':
		return s.lit("null")
	case '{':
	default:
		c.hasUsage = true
		return s.skip(2)
	}
	c.hasUsage = true
	s.pos++
	var in, out, cached, hit int64
	var details, hitSet, bad bool
	for first := true; ; first = false {
		k, more, ok := s.nextKey(first)
		if !ok {
			return false
		}
		if !more {
			break
		}
		m := member{key: k, val: span{start: s.pos}}
		switch {
		case s.matches(k, "prompt_tokens"):
			ok = s.intField(&in, &bad, 3)
		case s.matches(k, "completion_tokens"):
			ok = s.intField(&out, &bad, 3)
		case s.matches(k, "prompt_tokens_details"):
			switch s.peek() {
			case 'n':
				details, cached = false, 0
				ok = s.lit("null")
			case '{':
				if !details {
					details, cached = true, 0
				}
				ok = s.details(&cached, &bad)
			default:
				bad = true
				ok = s.skip(3)
			}
		case s.matches(k, "prompt_cache_hit_tokens"):
			if s.peek() == 'n' {
				hitSet, hit = false, 0
				ok = s.lit("null")
				break
			}
			hitSet = true
			ok = s.intField(&hit, &bad, 3)
		default:
			ok = s.skip(3)
		}
		if !ok {
			return false
		}
		m.val.end = s.pos
		if s.is(k, "cost") {
			m.role = roleCost
		}
		rw.usageMembers = rw.keep(rw.usageMembers, s, m)
	}
	c.usageOK = !bad
	c.usage = pricing.Usage{Input: in, Output: out}
	switch {
	case details:
		c.usage.CachedInput = cached
	case hitSet:
		c.usage.CachedInput = hit
	}
	return true
}

// details scans usage.prompt_tokens_details (an object, depth 3) for its
// cached_tokens.
func (s *scanner) details(cached *int64, bad *bool) bool {
	s.pos++
	for first := true; ; first = false {
		k, more, ok := s.nextKey(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		if s.matches(k, "cached_tokens") {
			ok = s.intField(cached, bad, 4)
		} else {
			ok = s.skip(4)
		}
		if !ok {
			return false
		}
	}
}

// intField scans a member read as an int64 (at depth, a number or null):
// an integer in range sets n, null leaves it; anything else sets bad.
func (s *scanner) intField(n *int64, bad *bool, depth int) bool {
	switch c := s.peek(); {
	case c == 'n':
		return s.lit("null")
	case c == '-' || isDigit(c):
		start := s.pos
		if !s.num() {
			return false
		}
		if v, ok := parseInt64(s.data[start:s.pos]); ok {
			*n = v
		} else {
			*bad = true
		}
		return true
	}
	*bad = true
	return s.skip(depth)
}

// String is s as a JSON string.
func String(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
