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
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonobj"
	"github.com/switchboard-ai/switchboard/services/edge/internal/jsonscan"
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
	s := scanner{jsonscan.New(data)}
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
		val := data[m.val.Start:m.val.End]
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
				dst = rw.member(dst, n, data[m.key.Raw.Start:m.key.Raw.End], nil)
				dst = rw.usageWithCost(dst, data, cost)
				n++
				continue
			}
		}
		dst = rw.member(dst, n, data[m.key.Raw.Start:m.key.Raw.End], val)
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
		dst = rw.member(dst, n, data[m.key.Raw.Start:m.key.Raw.End], data[m.val.Start:m.val.End])
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
	key jsonscan.Key
	val jsonscan.Span
	// name is the decoded name in Rewriter.names, for a key that is not
	// plain.
	name     jsonscan.Span
	role     role
	repeated bool
}

// nameOf is m's decoded name.
func (rw *Rewriter) nameOf(data []byte, m *member) []byte {
	if m.key.Plain() {
		return data[m.key.Raw.Start+1 : m.key.Raw.End-1]
	}
	return rw.names[m.name.Start:m.name.End]
}

// keep records a scanned member, its decoded name kept when it is not
// plain.
func (rw *Rewriter) keep(ms []member, s *scanner, m member) []member {
	if !m.key.Plain() {
		start := len(rw.names)
		var name []byte
		name, rw.names = s.Name(m.key, rw.names)
		if len(rw.names) == start { // plain text after all, in data
			rw.names = append(rw.names, name...)
		}
		m.name = jsonscan.Span{Start: start, End: len(rw.names)}
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

// String is s as a JSON string.
func String(s string) json.RawMessage {
	return jsonobj.AppendString(make([]byte, 0, len(s)+2), s)
}
