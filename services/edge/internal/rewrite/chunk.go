package rewrite

import (
	"github.com/switchboard-ai/switchboard/pkg/pricing"
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonscan"
)

// scanner is the JSON scanner with the rewriting's readers of an answer's
// members.
type scanner struct{ jsonscan.Scanner }

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
	if s.Peek() != '{' {
		return false
	}
	s.Step()
	for first := true; ; first = false {
		k, more, ok := s.NextKey(first)
		if !ok {
			return false
		}
		if !more {
			break
		}
		m := member{key: k, val: jsonscan.Span{Start: s.Pos()}, role: s.role(k)}
		switch m.role {
		case roleChoices:
			c.hasChoices = true
			ok = rw.choices(s, c)
		case roleUsage:
			ok = rw.usage(s, c)
		case roleError:
			c.hasError, c.errNull = true, s.Peek() == 'n'
			ok = s.Skip(2)
		default:
			ok = s.Skip(2)
		}
		if !ok {
			return false
		}
		m.val.End = s.Pos()
		rw.members = rw.keep(rw.members, s, m)
	}
	s.Space()
	if c.hasError && c.errNull {
		c.hasError = false
	}
	return s.AtEnd()
}

// role is what a top-level member is.
func (s *scanner) role(k jsonscan.Key) role {
	switch string(s.Exact(k)) {
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
	switch s.Peek() {
	case 'n':
		return s.Literal("null")
	case '[':
	default:
		c.choicesBad = true
		return s.Skip(2)
	}
	s.Step()
	for first := true; ; first = false {
		more, ok := s.NextElem(first)
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
	tools    jsonscan.Span
	toolText int64
}

// choice scans one choice and adds what it says to c.
func (s *scanner) choice(c *chunk) bool {
	switch s.Peek() {
	case 'n':
		return s.Literal("null")
	case '{':
	default:
		c.choicesBad = true
		return s.Skip(3)
	}
	s.Step()
	var d, m delta
	var finish text
	for first := true; ; first = false {
		k, more, ok := s.NextKey(first)
		if !ok {
			return false
		}
		if !more {
			break
		}
		switch {
		case s.Matches(k, "delta"):
			ok = s.delta(c, &d, false)
		case s.Matches(k, "message"):
			ok = s.delta(c, &m, true)
		case s.Matches(k, "finish_reason"):
			ok = s.strField(&finish, &c.choicesBad, 4)
		default:
			ok = s.Skip(4)
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
		tools := s.Data()[d.tools.Start:d.tools.End]
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
	switch s.Peek() {
	case 'n':
		*d = delta{}
		return s.Literal("null")
	case '{':
	default:
		c.choicesBad = true
		return s.Skip(4)
	}
	if !d.there {
		*d = delta{there: true}
	}
	bad := &c.choicesBad
	if lenient {
		bad = nil
	}
	s.Step()
	for first := true; ; first = false {
		k, more, ok := s.NextKey(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		switch {
		case s.Matches(k, "content"):
			ok = s.strField(&d.content, bad, 5)
		case s.Matches(k, "reasoning_content"):
			ok = s.strField(&d.reasoningC, bad, 5)
		case s.Matches(k, "reasoning"):
			ok = s.strField(&d.reason, bad, 5)
		case s.Matches(k, "tool_calls"):
			start := s.Pos()
			d.toolText, ok = s.toolCalls()
			d.tools = jsonscan.Span{Start: start, End: s.Pos()}
		default:
			ok = s.Skip(5)
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
	switch s.Peek() {
	case 'n':
		*t = text{}
		return s.Literal("null")
	case '"':
		start := s.Pos()
		f, ok := s.Str()
		if ok {
			*t = text{set: true, n: jsonscan.DecodedLen(s.Data()[start:s.Pos()], f)}
		}
		return ok
	}
	if bad != nil {
		*bad = true
	}
	return s.Skip(depth)
}

// toolCalls scans a tool_calls list (depth 5) and returns the size of its
// generated text: every function name and arguments string. Anything
// unreadable in it makes the size 0.
func (s *scanner) toolCalls() (int64, bool) {
	switch s.Peek() {
	case '[':
	default:
		return 0, s.Skip(5)
	}
	s.Step()
	var n int64
	bad := false
	for first := true; ; first = false {
		more, ok := s.NextElem(first)
		if !ok {
			return 0, false
		}
		if !more {
			break
		}
		switch s.Peek() {
		case 'n':
			ok = s.Literal("null")
		case '{':
			var name, args text
			ok = s.toolCall(&name, &args, &bad)
			n += name.n + args.n
		default:
			bad = true
			ok = s.Skip(6)
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
	s.Step()
	for first := true; ; first = false {
		k, more, ok := s.NextKey(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		if !s.Matches(k, "function") {
			if !s.Skip(7) {
				return false
			}
			continue
		}
		switch s.Peek() {
		case 'n':
			ok = s.Literal("null")
		case '{':
			s.Step()
			for first := true; ; first = false {
				k, more, ok := s.NextKey(first)
				if !ok {
					return false
				}
				if !more {
					break
				}
				switch {
				case s.Matches(k, "name"):
					ok = s.strField(name, nil, 8)
				case s.Matches(k, "arguments"):
					ok = s.strField(args, nil, 8)
				default:
					ok = s.Skip(8)
				}
				if !ok {
					return false
				}
			}
		default:
			*bad = true
			ok = s.Skip(7)
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
	switch s.Peek() {
	case 'n':
		return s.Literal("null")
	case '{':
	default:
		c.hasUsage = true
		return s.Skip(2)
	}
	c.hasUsage = true
	if rw.usageMembers == nil {
		// A usage has a handful of members: room for them at once.
		rw.usageMembers = make([]member, 0, 8)
	}
	s.Step()
	var in, out, cached, hit, written, written1h int64
	var details, hitSet, bad bool
	for first := true; ; first = false {
		k, more, ok := s.NextKey(first)
		if !ok {
			return false
		}
		if !more {
			break
		}
		m := member{key: k, val: jsonscan.Span{Start: s.Pos()}}
		switch {
		case s.Matches(k, "prompt_tokens"):
			ok = s.intField(&in, &bad, 3)
		case s.Matches(k, "completion_tokens"):
			ok = s.intField(&out, &bad, 3)
		case s.Matches(k, "prompt_tokens_details"):
			switch s.Peek() {
			case 'n':
				details, cached, written, written1h = false, 0, 0, 0
				ok = s.Literal("null")
			case '{':
				if !details {
					details, cached, written, written1h = true, 0, 0, 0
				}
				ok = s.details(&cached, &written, &written1h, &bad)
			default:
				bad = true
				ok = s.Skip(3)
			}
		case s.Matches(k, "prompt_cache_hit_tokens"):
			if s.Peek() == 'n' {
				hitSet, hit = false, 0
				ok = s.Literal("null")
				break
			}
			hitSet = true
			ok = s.intField(&hit, &bad, 3)
		default:
			ok = s.Skip(3)
		}
		if !ok {
			return false
		}
		m.val.End = s.Pos()
		if s.Is(k, "cost") {
			m.role = roleCost
		}
		rw.usageMembers = rw.keep(rw.usageMembers, s, m)
	}
	c.usageOK = !bad
	c.usage = pricing.Usage{Input: in, Output: out}
	switch {
	case details:
		// cache_write_tokens counts every cache write, of which
		// cache_write_1h_tokens were written for an hour.
		c.usage.CachedInput = cached
		c.usage.CacheWrite1h = min(max(written1h, 0), max(written, 0))
		c.usage.CacheWrite = max(written, 0) - c.usage.CacheWrite1h
	case hitSet:
		c.usage.CachedInput = hit
	}
	return true
}

// details scans usage.prompt_tokens_details (an object, depth 3) for its
// cached_tokens, cache_write_tokens and cache_write_1h_tokens.
func (s *scanner) details(cached, written, written1h *int64, bad *bool) bool {
	s.Step()
	for first := true; ; first = false {
		k, more, ok := s.NextKey(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		switch {
		case s.Matches(k, "cached_tokens"):
			ok = s.intField(cached, bad, 4)
		case s.Matches(k, "cache_write_tokens"):
			ok = s.intField(written, bad, 4)
		case s.Matches(k, "cache_write_1h_tokens"):
			ok = s.intField(written1h, bad, 4)
		default:
			ok = s.Skip(4)
		}
		if !ok {
			return false
		}
	}
}

// intField scans a member read as an int64 (at depth, a number or null):
// an integer in range sets n, null leaves it; anything else sets bad.
func (s *scanner) intField(n *int64, bad *bool, depth int) bool {
	switch c := s.Peek(); {
	case c == 'n':
		return s.Literal("null")
	case c == '-' || '0' <= c && c <= '9':
		start := s.Pos()
		if !s.Number() {
			return false
		}
		if v, ok := jsonscan.ParseInt64(s.Data()[start:s.Pos()]); ok {
			*n = v
		} else {
			*bad = true
		}
		return true
	}
	*bad = true
	return s.Skip(depth)
}
